----------------------------- MODULE MCCheckpoint -----------------------------
(***************************************************************************)
(* Broken checkpointing loaders: each definition replaces one HOOK of      *)
(* DataLoaderCheckpoint (`CONSTANT Hook <- Broken...` in a                 *)
(* spec/broken/Ckpt*.cfg), each a public defect of 2024-2026 (issue 19).   *)
(* spec/models.toml lists the full set of properties each one violates.    *)
(***************************************************************************)
EXTENDS DataLoaderCheckpoint, TLC

\* CheckpointIsHandedOut: the state counts what was dispatched (prefetched batches are thrown
\* away at resume: maintainer on meta-pytorch/data#1520).
CkptDispatchedValue == [Truth EXCEPT !.handed = handed \cup inflight]
CkptDispatchedSnapshot == IF it = "running" THEN CkptDispatchedValue ELSE Truth

\* CheckpointIsHandedOut: a state taken after StopIteration says "this epoch, all handed out",
\* so the resumed iter() yields nothing and the user's loop loses an epoch
\* (meta-pytorch/data#1437).
CkptEndOfEpochSnapshot ==
    IF it = "ended" /\ pending = NoState THEN [Truth EXCEPT !.epoch = epoch, !.handed = handed]
    ELSE Truth

\* SnapshotIsImmutable: the returned dict is the live one; later next() calls change it
\* (meta-pytorch/data PR #1547).
CkptAliased == TRUE

\* LoadIsNeverIgnored: a load after iter() or state_dict() on the same loader is ignored
\* (meta-pytorch/data PR #1548; PrimeIntellect-ai/prime-rl PR #3332; TorchEasyRec PR #544).
CkptLoadAppliesUntouched == ~touched

\* ResumeAdvances: after one resume the state is frozen at the loaded one, so a second resume
\* restarts from it (huggingface/datasets#8308 = pytorch/torchtitan#3907; KempnerForge#57).
CkptFrozenSnapshot == IF started # NoState THEN started ELSE Truth

\* ResumeAdvances: persistent workers keep the resumed epoch's skip list, so every later epoch
\* yields only the leftover batches (huggingface/datasets#7447).
CkptStickySkip == skip

\* ResumeTopologyExplicit: another num_workers is let through (a bare assert, gone under
\* python -O) and the per-worker states are dropped: the epoch starts over.
CkptTopologyAccepted(s, n) == TRUE
CkptApplied(s, n) == IF Iterable /\ s.nw # n THEN [s EXCEPT !.handed = {}] ELSE s

\* --- issue 35: what the order and the items depend on, and three more decisions -----------

\* ResumeEquivalence: shuffle=True without a `generator`: a state taken after StopIteration
\* records no generator state, so a new loader (seeded, rebuilt, loaded) draws the resumed
\* epoch's order from its fresh generator: epoch 0's order again.
CkptNoGenSnapshot == IF it = "ended" THEN [Truth EXCEPT !.gen = None] ELSE Truth

\* ResumeEquivalence: a state taken after StopIteration drops the dataset's own state (its
\* epoch counter, advanced as the iteration ended): the resumed epoch reads a fresh dataset's.
CkptNoDatasetStateSnapshot == IF it = "ended" THEN [Truth EXCEPT !.dstate = None] ELSE Truth

\* ResumeEquivalence: the iterator's own state_dict() is ignored; the resumed epoch is fast-
\* forwarded by count on a new iterator, whose RNG (seeded in the new process) draws other
\* values.
CkptFreshSeed(s) == FreshSeed

\* ResumeEquivalence: a dataset that is its own iterator gets the loaded state before
\* iter(dataset), which resets it: the resumed epoch replays from its start with a new iterator.
CkptReplayHanded(s) == {}

\* CheckpointIsReceived: state_dict() counts the batches in flight as handed out, in the
\* loader's own count too, so the state agrees with that count and not with what the user got
\* (CheckpointIsHandedOut compares the two); only a resume and a finished epoch show it otherwise.
CkptCountInflight == IF it = "running" THEN handed \cup inflight ELSE handed

\* ResumeNeverStalls: a resumed iterator counts the skipped (already handed-out) batches as
\* outstanding: its window stays full of them and StopIteration waits for them; only the
\* fatal timeout ends the epoch.
CkptOutstandingWithSkip == inflight \cup skip

\* MapResumeAnyWorkers: a map-style state is refused under another num_workers.
CkptSameWorkersOnly(s, n) == s.nw = n

\* --- issue 36: whose RNG the order is drawn from ---------------------------------------------

\* OrderFromUserGenerator: the `generator` the loader was given is ignored; each epoch's order
\* is drawn from torch's global RNG, so the user's torch.manual_seed between epochs changes it
\* and two runs from equal generator states hand out other orders.
CkptOrderFromGlobalRng == TRUE

\* Always TRUE: prints the name of every invariant the state violates (loaderspec.variantcheck).
ViolationMonitor ==
    /\ ~TypeOK => PrintT(<<"VIOLATES", "TypeOK">>)
    /\ ~ResumeEquivalence => PrintT(<<"VIOLATES", "ResumeEquivalence">>)
    /\ ~CheckpointIsHandedOut => PrintT(<<"VIOLATES", "CheckpointIsHandedOut">>)
    /\ ~SnapshotIsImmutable => PrintT(<<"VIOLATES", "SnapshotIsImmutable">>)
    /\ ~LoadIsNeverIgnored => PrintT(<<"VIOLATES", "LoadIsNeverIgnored">>)
    /\ ~ResumeAdvances => PrintT(<<"VIOLATES", "ResumeAdvances">>)
    /\ ~ResumeTopologyExplicit => PrintT(<<"VIOLATES", "ResumeTopologyExplicit">>)
    /\ ~CheckpointIsReceived => PrintT(<<"VIOLATES", "CheckpointIsReceived">>)
    /\ ~ResumeNeverStalls => PrintT(<<"VIOLATES", "ResumeNeverStalls">>)
    /\ ~MapResumeAnyWorkers => PrintT(<<"VIOLATES", "MapResumeAnyWorkers">>)
    /\ ~OrderFromUserGenerator => PrintT(<<"VIOLATES", "OrderFromUserGenerator">>)
=============================================================================
