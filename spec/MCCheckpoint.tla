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
CkptDispatchedValue == [epoch |-> epoch, handed |-> handed \cup inflight, nw |-> nw]
CkptDispatchedSnapshot == IF it = "running" THEN CkptDispatchedValue ELSE Truth

\* CheckpointIsHandedOut: a state taken after StopIteration says "this epoch, all handed out",
\* so the resumed iter() yields nothing and the user's loop loses an epoch
\* (meta-pytorch/data#1437).
CkptEndOfEpochSnapshot ==
    IF it = "ended" /\ pending = NoState THEN [epoch |-> epoch, handed |-> handed, nw |-> nw]
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

\* Always TRUE: prints the name of every invariant the state violates (loaderspec.variantcheck).
ViolationMonitor ==
    /\ ~TypeOK => PrintT(<<"VIOLATES", "TypeOK">>)
    /\ ~ResumeEquivalence => PrintT(<<"VIOLATES", "ResumeEquivalence">>)
    /\ ~CheckpointIsHandedOut => PrintT(<<"VIOLATES", "CheckpointIsHandedOut">>)
    /\ ~SnapshotIsImmutable => PrintT(<<"VIOLATES", "SnapshotIsImmutable">>)
    /\ ~LoadIsNeverIgnored => PrintT(<<"VIOLATES", "LoadIsNeverIgnored">>)
    /\ ~ResumeAdvances => PrintT(<<"VIOLATES", "ResumeAdvances">>)
    /\ ~ResumeTopologyExplicit => PrintT(<<"VIOLATES", "ResumeTopologyExplicit">>)
=============================================================================
