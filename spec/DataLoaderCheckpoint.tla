------------------------- MODULE DataLoaderCheckpoint -------------------------
(***************************************************************************)
(* Checkpoint and resume of a multi-process DataLoader: what the user's    *)
(* state_dict() returns and what a load_state_dict() followed by a new     *)
(* iter() must do (torchdata's StatefulDataLoader API; issue 19).          *)
(*                                                                         *)
(* The decision this module makes: a checkpoint describes what was handed  *)
(* out to the user, never what was dispatched or prefetched; everything    *)
(* prefetched but not handed out is produced again after a resume, never   *)
(* lost and never doubled.                                                 *)
(*                                                                         *)
(* The iterator is DataLoader.tla's at the level of its history: a task is *)
(* dispatched (MainTryPutIndex: it joins `inflight`, at most               *)
(* PrefetchFactor * NumWorkers ahead), handed out (MainProcessData: in     *)
(* sampler order with in_order, any in-flight one without), and the epoch  *)
(* ends (MainStopIteration) once every item was handed out. An item has an *)
(* identity: for a map-style dataset its position in the epoch's sampler   *)
(* order, for an IterableDataset <<worker, position in that worker's       *)
(* shard>>, the shard ending at its length (worker 0's shard is one item   *)
(* longer, so a shard ends before another: exhaustion), so an epoch that   *)
(* wrongly yields nothing, or skips a shard's item, is visible.            *)
(*                                                                         *)
(* User actions (the caller of the loader's API):                          *)
(*   UserIter              iter(): a new epoch, from a loaded state if any  *)
(*   UserStateDict         state_dict(), at any moment                     *)
(*   UserLoadStateDict     load_state_dict(s) on this loader or on a new   *)
(*                         one (the process was restarted), maybe with     *)
(*                         another num_workers                             *)
(* Loader actions: MainTryPutIndex, MainProcessData, MainStopIteration, and *)
(* the fault FaultFatalError (a worker's death, a timeout: the iterator    *)
(* fails and what it prefetched is lost).                                  *)
(*                                                                         *)
(* The user's own view is a ghost: `log`, every item handed out tagged with *)
(* the user's epoch (how many StopIterations the user has seen), rolled    *)
(* back to a snapshot's point when that snapshot is loaded (the user       *)
(* resumes from it; what came after it is forgotten with the old process). *)
(* ResumeEquivalence compares it with an uninterrupted run.                *)
(*                                                                         *)
(* Broken variants (spec/MCCheckpoint.tla) replace the HOOK definitions.   *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    NumWorkers,     \* num_workers of the loader that takes the first checkpoint (> 0)
    NumTasks,       \* map-style: batches per epoch; iterable: worker 0's shard length
    PrefetchFactor, \* prefetch_factor
    InOrder,        \* in_order
    Iterable,       \* an IterableDataset (per-worker shards) rather than a map-style one
    Persistent,     \* persistent_workers: one iterator object across epochs
    NumEpochs,      \* epochs the user runs
    WithFault,      \* the iterator may fail (worker death, timeout): fail-stop
    MaxSnapshots,   \* state_dict() calls the model explores
    MaxLoads,       \* load_state_dict() calls the model explores
    ResumeWorkers   \* the num_workers a loader built for a resume may have

ASSUME /\ NumWorkers \in Nat \ {0}
       /\ NumTasks \in Nat \ {0}
       /\ PrefetchFactor \in Nat \ {0}
       /\ NumEpochs \in Nat \ {0}
       /\ MaxSnapshots \in Nat /\ MaxLoads \in Nat
       /\ ResumeWorkers \subseteq Nat \ {0} /\ NumWorkers \in ResumeWorkers
       /\ \A flag \in {InOrder, Iterable, Persistent, WithFault} : flag \in BOOLEAN

Workers == 0 .. NumWorkers - 1
\* Worker w's shard length: worker 0's is one longer, so shards end at different tasks.
ShardLen(w) == IF w = 0 THEN NumTasks ELSE NumTasks - 1
Items == IF Iterable THEN {i \in Workers \X (0 .. NumTasks - 1) : i[2] < ShardLen(i[1])}
         ELSE {0} \X (0 .. NumTasks - 1)
\* The position of an item in an uninterrupted in-order epoch: the sampler's order, or the
\* round-robin of the workers' shards (an exhausted worker's turns are skipped).
Rank(item) == IF Iterable THEN item[2] * NumWorkers + item[1] ELSE item[2]
MinRank(S) == CHOOSE i \in S : \A j \in S : Rank(i) <= Rank(j)

\* A state, as state_dict() returns it: the epoch and the set of its items handed out (a set,
\* not a count: in_order=False hands out in any order), and the num_workers it was taken with.
NoState == [epoch |-> -1, handed |-> {}, nw |-> 0]
States == [epoch : Nat, handed : SUBSET Items, nw : ResumeWorkers] \cup {NoState}

VARIABLES
    it,          \* the iterator: "none" (no iter() since the loader was built or loaded),
                 \* "running", "ended" (StopIteration raised), "failed" (fatal error)
    epoch,       \* the loader's epoch: of the running iterator, or the last one
    handed,      \* this epoch's items handed out to the user (what a checkpoint describes)
    inflight,    \* this epoch's items dispatched and not handed out (in flight, buffered)
    skip,        \* the items this epoch began with as already handed out (from a load)
    nw,          \* num_workers of the loader object
    pending,     \* the state load_state_dict() stored for the next iter(), or NoState
    touched,     \* this loader object has had iter() or state_dict() called on it
    \* --- history, for the properties only (no guard reads it) ---
    log,         \* the user's view: <<user epoch, item>> handed out (rolled back at a load)
    uepoch,      \* the user's epoch: StopIterations seen (rolled back at a load)
    snaps,       \* every state_dict() returned: see SnapRec
    loads,       \* load_state_dict() calls so far
    governs,     \* the state the last load asked iter() to start from, or NoState
    started      \* the state the current iterator started from (NoState: from scratch)

vars == <<it, epoch, handed, inflight, skip, nw, pending, touched, log, uepoch, snaps, loads,
          governs, started>>

\* A returned state and its ghosts: `value` (the object the user holds, as it is now),
\* `returned` (it at the moment it was returned), `truth` (what was handed out then),
\* `base` (the state the iterator it came from had started from), and the user's point then.
SnapRec == [value : States, returned : States, truth : States, base : States,
            log : Seq(Nat \X Items), uepoch : Nat]

TypeOK ==
    /\ it \in {"none", "running", "ended", "failed"}
    /\ epoch \in Nat
    /\ handed \subseteq Items /\ inflight \subseteq Items /\ skip \subseteq Items
    /\ nw \in ResumeWorkers
    /\ pending \in States
    /\ touched \in BOOLEAN
    /\ log \in Seq(Nat \X Items)
    /\ uepoch \in 0 .. NumEpochs
    /\ snaps \in Seq(SnapRec)
    /\ loads \in 0 .. MaxLoads
    /\ governs \in States /\ started \in States

Init ==
    /\ it = "none"
    /\ epoch = 0
    /\ handed = {} /\ inflight = {} /\ skip = {}
    /\ nw = NumWorkers
    /\ pending = NoState
    /\ touched = FALSE
    /\ log = << >>
    /\ uepoch = 0
    /\ snaps = << >>
    /\ loads = 0
    /\ governs = NoState /\ started = NoState

-----------------------------------------------------------------------------
(* HOOKS: the decisions a checkpointing loader can get wrong (MCCheckpoint.tla breaks them) *)

\* What the loader's position is now, as the handed-out history says it: an ended epoch is
\* over (the next iter() starts the next one whole); before any iter(), the epoch to come.
Truth ==
    CASE pending # NoState -> pending
      [] it = "ended" -> [epoch |-> epoch + 1, handed |-> {}, nw |-> nw]
      [] it = "none" -> [epoch |-> epoch, handed |-> {}, nw |-> nw]
      [] OTHER -> [epoch |-> epoch, handed |-> handed, nw |-> nw]
\* HOOK: what state_dict() returns (a fresh copy of the truth).
SnapshotValue == Truth
\* HOOK: a handed-out item also changes the state objects returned before (aliasing).
AliasedSnapshots == FALSE
\* HOOK: load_state_dict() on this loader object is applied (whatever was called before it).
LoadApplies == TRUE
\* HOOK: a load taken with another num_workers is accepted (FALSE: it raises, naming both).
TopologyAccepted(s, n) == ~Iterable \/ s.nw = n
\* HOOK: how a state taken with another num_workers is applied (map-style: exactly as it is).
Applied(s, n) == s
\* HOOK: what a persistent iterator's next epoch begins with as already handed out.
NewEpochSkip == {}

-----------------------------------------------------------------------------
(* The loader *)

Remaining == Items \ (handed \cup inflight)

\* Send the next task (its item, in the order of an uninterrupted run) ahead of the hand-out.
MainTryPutIndex ==
    /\ it = "running"
    /\ Remaining # {}
    /\ Cardinality(inflight) < PrefetchFactor * nw
    /\ inflight' = inflight \cup {MinRank(Remaining)}
    /\ UNCHANGED <<it, epoch, handed, skip, nw, pending, touched, log, uepoch, snaps, loads,
                   governs, started>>

\* Hand an item out: in sampler order with in_order, any in-flight one without.
MainProcessData(i) ==
    /\ it = "running"
    /\ i \in inflight
    /\ InOrder => i = MinRank(inflight)
    /\ inflight' = inflight \ {i}
    /\ handed' = handed \cup {i}
    /\ log' = Append(log, <<uepoch, i>>)
    /\ snaps' = IF AliasedSnapshots
                THEN [k \in DOMAIN snaps |->
                        [snaps[k] EXCEPT !.value = [@ EXCEPT !.handed = handed']]]
                ELSE snaps
    /\ UNCHANGED <<it, epoch, skip, nw, pending, touched, uepoch, loads, governs, started>>

MainStopIteration ==
    /\ it = "running"
    /\ inflight = {} /\ Remaining = {}
    /\ it' = "ended"
    /\ uepoch' = uepoch + 1
    /\ UNCHANGED <<epoch, handed, inflight, skip, nw, pending, touched, log, snaps, loads,
                   governs, started>>

\* A fatal error (a worker killed, a timeout): fail-stop; what was prefetched is lost.
FaultFatalError ==
    /\ WithFault
    /\ it = "running"
    /\ it' = "failed"
    /\ inflight' = {}
    /\ UNCHANGED <<epoch, handed, skip, nw, pending, touched, log, uepoch, snaps, loads,
                   governs, started>>

-----------------------------------------------------------------------------
(* The user *)

\* iter(): the next epoch, or the epoch a loaded state names, with its handed-out items done.
UserIter ==
    /\ it \in {"none", "ended"}
    /\ uepoch < NumEpochs
    /\ it' = "running"
    /\ inflight' = {}
    /\ touched' = TRUE
    /\ IF pending # NoState
       THEN /\ epoch' = pending.epoch
            /\ handed' = pending.handed
            /\ skip' = pending.handed
            /\ started' = pending
       ELSE /\ epoch' = IF it = "ended" THEN epoch + 1 ELSE epoch
            /\ handed' = IF Persistent /\ it = "ended" THEN NewEpochSkip ELSE {}
            /\ skip' = handed'
            /\ started' = IF it = "ended" THEN started ELSE NoState
    /\ pending' = NoState
    /\ UNCHANGED <<nw, log, uepoch, snaps, loads, governs>>

\* state_dict(): allowed at any moment.
UserStateDict ==
    /\ Len(snaps) < MaxSnapshots
    /\ LET v == SnapshotValue IN
       snaps' = Append(snaps, [value |-> v, returned |-> v, truth |-> Truth,
                               base |-> started, log |-> log, uepoch |-> uepoch])
    /\ touched' = TRUE
    /\ UNCHANGED <<it, epoch, handed, inflight, skip, nw, pending, log, uepoch, loads, governs,
                   started>>

\* load_state_dict(snaps[k].value): on this loader object (same), or on a new loader with n
\* workers (the process was restarted). The user resumes from that snapshot's point. A load
\* that is refused raises and changes nothing.
UserLoadStateDict(k, same, n) ==
    /\ loads < MaxLoads
    /\ k \in DOMAIN snaps
    /\ same => n = nw
    /\ LET s == snaps[k].value IN
       /\ TopologyAccepted(s, n)
       /\ pending' = IF ~same \/ LoadApplies THEN Applied(s, n) ELSE pending
       /\ governs' = Applied(s, n)
    /\ it' = "none"
    /\ epoch' = IF same THEN epoch ELSE 0
    /\ handed' = IF same THEN handed ELSE {}
    /\ inflight' = IF same THEN inflight ELSE {}
    /\ skip' = IF same THEN skip ELSE {}
    /\ nw' = n
    /\ touched' = (same /\ touched)
    /\ log' = snaps[k].log
    /\ uepoch' = snaps[k].uepoch
    /\ loads' = loads + 1
    /\ started' = NoState
    /\ UNCHANGED snaps

\* On the same loader a running iterator is dropped: the next iter() starts from the state.
UserLoad == \E k \in 1 .. MaxSnapshots, same \in BOOLEAN, n \in ResumeWorkers :
                UserLoadStateDict(k, same, n)

\* The user has no iterator running and nothing more to do: the run has ended (stuttering).
Terminated == it # "running" /\ UNCHANGED vars

Next ==
    \/ MainTryPutIndex
    \/ \E i \in Items : MainProcessData(i)
    \/ MainStopIteration
    \/ FaultFatalError
    \/ UserIter \/ UserStateDict \/ UserLoad
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Properties (loaderspec.vocabulary.PROPERTIES, module DataLoaderCheckpoint) *)

ItemsOf(u) == {log[j][2] : j \in {j \in DOMAIN log : log[j][1] = u}}
CountIn(u, i) == Cardinality({j \in DOMAIN log : log[j] = <<u, i>>})

\* MUST: what was handed out before a checkpoint followed by what the resumed loader hands out
\* is an uninterrupted run's stream: in each of the user's epochs no item twice, in sampler
\* order with in_order, and every epoch the user finished handed out every item.
ResumeEquivalence ==
    /\ \A j \in DOMAIN log : CountIn(log[j][1], log[j][2]) = 1
    /\ InOrder => \A j, l \in DOMAIN log :
                      (j < l /\ log[j][1] = log[l][1]) => Rank(log[j][2]) < Rank(log[l][2])
    /\ \A u \in 0 .. uepoch - 1 : ItemsOf(u) = Items

\* MUST: a state, when returned, counts exactly the items handed out (not those dispatched,
\* in flight or buffered), and an epoch that raised StopIteration as over.
CheckpointIsHandedOut == \A k \in DOMAIN snaps : snaps[k].returned = snaps[k].truth

\* MUST: a state once returned never changes.
SnapshotIsImmutable == \A k \in DOMAIN snaps : snaps[k].value = snaps[k].returned

\* MUST: a load governs the next iter(), whatever was called on the loader before it (iter(),
\* state_dict(), live persistent workers): the running iterator started from the loaded state.
LoadIsNeverIgnored == (governs = NoState) \/ (it = "running" => started = governs)

Later(a, b) == a.epoch > b.epoch \/ (a.epoch = b.epoch /\ b.handed \subseteq a.handed)

\* MUST: a state taken after a resume is later than the one loaded, strictly once something
\* more was handed out; an epoch after the resumed one begins whole.
ResumeAdvances ==
    /\ \A k \in DOMAIN snaps :
          LET s == snaps[k] IN
          s.base # NoState =>
              /\ Later(s.returned, s.base)
              /\ s.truth # s.base => s.returned # s.base
    /\ (it = "running" /\ started # NoState /\ epoch > started.epoch) => skip = {}

\* SHOULD: an IterableDataset's state is resumed only under the num_workers it was taken with
\* (another count raises, naming both); a map-style one continues exactly under any count.
ResumeTopologyExplicit == (Iterable /\ it = "running" /\ started # NoState) => started.nw = nw
=============================================================================
