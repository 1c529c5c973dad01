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
(*   UserSeedGlobal(s)     torch.manual_seed(s) between epochs (issue 36): *)
(*                         the user's code, not a loader call, so no       *)
(*                         loader method or trace record names it          *)
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
(* What the items depend on besides their position (issue 35), each part  *)
(* of what a state must record:                                            *)
(*   gen     a ghost generator (the loader's `generator`, or torch's       *)
(*           global one): each epoch's sampler order is drawn from it      *)
(*           (Shuffle; map-style), so the order depends on the epoch       *)
(*   dstate  the dataset's own state, which may change when an epoch ends  *)
(*           (DatasetState: a dataset that counts its epochs)              *)
(*   iseed   the state of the iterator iter(dataset) returns (IterState;   *)
(*           IterableDataset): its RNG, seeded from its process's entropy  *)
(*           (`proc`) when it is made, so a fresh iterator in a new        *)
(*           process draws other values than the one it replaces           *)
(* A handed-out item carries its value: its dataset index (the order's),   *)
(* the dataset state and the iterator state it was drawn with.             *)
(*                                                                         *)
(* Whose RNG the order is drawn from (issue 36): `gen` is the generator    *)
(* the loader was given (torch's global one only when none was); the user  *)
(* may reseed torch's global RNG, `grng`, between epochs                   *)
(* (torch.manual_seed with a seed of GlobalSeeds). A loader draws each     *)
(* epoch's order from `gen` alone, so the order is a function of that      *)
(* generator's state: equal states give equal orders, and a reseeded       *)
(* global RNG changes none (OrderFromUserGenerator). A handed-out item's   *)
(* value also carries, as a ghost, the generator state its epoch's order   *)
(* was to be drawn at.                                                     *)
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
    ResumeWorkers,  \* the num_workers a loader built for a resume may have
    Shuffle,        \* map-style: each epoch's order is drawn from the loader's generator
    DatasetState,   \* the dataset has a state of its own that advances when an epoch ends
    IterState,      \* iterable: iter(dataset) returns an iterator with its own RNG state
    GlobalSeeds     \* the seeds the user's code gives torch.manual_seed between epochs
                    \* (torch's global RNG; {}: it never reseeds it)

ASSUME /\ NumWorkers \in Nat \ {0}
       /\ NumTasks \in Nat \ {0}
       /\ PrefetchFactor \in Nat \ {0}
       /\ NumEpochs \in Nat \ {0}
       /\ MaxSnapshots \in Nat /\ MaxLoads \in Nat
       /\ ResumeWorkers \subseteq Nat \ {0} /\ NumWorkers \in ResumeWorkers
       /\ \A flag \in {InOrder, Iterable, Persistent, WithFault, Shuffle, DatasetState,
                        IterState} : flag \in BOOLEAN
       /\ Shuffle => ~Iterable     \* an IterableDataset has no sampler order to draw
       /\ IterState => Iterable    \* a map-style dataset has no iterator of its own
       /\ GlobalSeeds \subseteq Nat

Workers == 0 .. NumWorkers - 1
\* Worker w's shard length: worker 0's is one longer, so shards end at different tasks.
ShardLen(w) == IF w = 0 THEN NumTasks ELSE NumTasks - 1
Items == IF Iterable THEN {i \in Workers \X (0 .. NumTasks - 1) : i[2] < ShardLen(i[1])}
         ELSE {0} \X (0 .. NumTasks - 1)
\* The position of an item in an uninterrupted in-order epoch: the sampler's order, or the
\* round-robin of the workers' shards (an exhausted worker's turns are skipped).
Rank(item) == IF Iterable THEN item[2] * NumWorkers + item[1] ELSE item[2]
MinRank(S) == CHOOSE i \in S : \A j \in S : Rank(i) <= Rank(j)

\* The value an uninterrupted run's epoch u hands out at the item's position: the sampler's
\* order of epoch u is drawn from the generator at state u (one draw per epoch from the seed),
\* a rotation of the positions, so epochs differ; the dataset's state then is u.
Order(g, p) == (p + g) % NumTasks
Index(g, item) == IF Shuffle THEN <<0, Order(g, item[2])>> ELSE item
UPos(u, idx) == IF Shuffle THEN (idx[2] - u) % NumTasks ELSE Rank(idx)
UDState(u) == IF DatasetState THEN u ELSE 0

\* "Not recorded" for a part of a state (the loader then keeps what it has).
None == -1
\* A state, as state_dict() returns it: the epoch and the set of its items handed out (a set,
\* not a count: in_order=False hands out in any order), the num_workers it was taken with, the
\* generator state the epoch's order is drawn from (an ended epoch's: the next one's), the
\* dataset's state, and the iterator's (None: no iterator has drawn yet; a new one is made).
NoState == [epoch |-> -1, handed |-> {}, nw |-> 0, gen |-> None, dstate |-> None,
            iseed |-> None]
States == [epoch : Nat, handed : SUBSET Items, nw : ResumeWorkers, gen : Nat \cup {None},
           dstate : Nat \cup {None}, iseed : Nat \cup {None}] \cup {NoState}
\* A handed-out item as the user got it: <<user epoch, item (position), value>>, the value
\* <<dataset index, dataset state, iterator state, generator state>>: the last a ghost, the
\* state of the loader's generator the epoch's order was to be drawn at (Drawn).
Value == (Nat \X Nat) \X Nat \X Nat \X Nat

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
    gen,         \* the loader's generator: draws so far (Shuffle); an epoch draws its order
    dstate,      \* the dataset's own state (DatasetState): epochs it has seen end
    iseed,       \* the running epoch's iterator's state: its RNG's seed (IterState)
    proc,        \* the loader's process: 0, then one more for each new loader (a restart)
    grng,        \* torch's global RNG: the seed the user last gave it (0 at first), plus one
                 \* for each draw a loader made from it since
    \* --- history, for the properties only (no guard reads it) ---
    log,         \* the user's view: <<user epoch, item>> handed out (rolled back at a load)
    uepoch,      \* the user's epoch: StopIterations seen (rolled back at a load)
    snaps,       \* every state_dict() returned: see SnapRec
    loads,       \* load_state_dict() calls so far
    governs,     \* the state the last load asked iter() to start from, or NoState
    started      \* the state the current iterator started from (NoState: from scratch)

vars == <<it, epoch, handed, inflight, skip, nw, pending, touched, gen, dstate, iseed, proc,
          grng, log, uepoch, snaps, loads, governs, started>>

\* A returned state and its ghosts: `value` (the object the user holds, as it is now),
\* `returned` (it at the moment it was returned), `truth` (what was handed out then),
\* `base` (the state the iterator it came from had started from), and the user's point then.
SnapRec == [value : States, returned : States, truth : States, base : States,
            log : Seq(Nat \X Items \X Value), uepoch : Nat]

TypeOK ==
    /\ it \in {"none", "running", "ended", "failed"}
    /\ epoch \in Nat
    /\ handed \subseteq Items /\ inflight \subseteq Items /\ skip \subseteq Items
    /\ nw \in ResumeWorkers
    /\ pending \in States
    /\ touched \in BOOLEAN
    /\ gen \in Nat /\ dstate \in Nat /\ iseed \in Nat /\ proc \in 0 .. MaxLoads /\ grng \in Nat
    /\ log \in Seq(Nat \X Items \X Value)
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
    /\ gen = 0 /\ dstate = 0 /\ iseed = 0 /\ proc = 0 /\ grng = 0
    /\ log = << >>
    /\ uepoch = 0
    /\ snaps = << >>
    /\ loads = 0
    /\ governs = NoState /\ started = NoState

-----------------------------------------------------------------------------
(* HOOKS: the decisions a checkpointing loader can get wrong (MCCheckpoint.tla breaks them) *)

\* The generator state the running epoch's order was drawn from (the draw advanced it by one).
Drawn == IF Shuffle THEN gen - 1 ELSE gen
\* One epoch's draw of its order from generator state g.
Draw(g) == IF Shuffle THEN g + 1 ELSE g
\* A new iterator's state: its RNG seeded from its process's entropy.
FreshSeed == IF IterState THEN proc ELSE 0
\* A state's iterator part when no iterator has drawn yet (none to record without IterState).
NoIter == IF IterState THEN None ELSE 0

\* What the loader's position is now, as the handed-out history says it, with what the rest of
\* the run depends on: an ended epoch is over (the next iter() starts the next one whole, its
\* order drawn from the generator as it is now, its dataset state the one the end left, a new
\* iterator); before any iter(), the epoch to come.
Truth ==
    CASE pending # NoState -> pending
      [] it = "ended" -> [epoch |-> epoch + 1, handed |-> {}, nw |-> nw, gen |-> gen,
                          dstate |-> dstate, iseed |-> NoIter]
      [] it = "none" -> [epoch |-> epoch, handed |-> {}, nw |-> nw, gen |-> gen,
                         dstate |-> dstate, iseed |-> NoIter]
      [] OTHER -> [epoch |-> epoch, handed |-> handed, nw |-> nw, gen |-> Drawn,
                   dstate |-> dstate, iseed |-> iseed]
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
\* HOOK: the loader's own count of handed-out items after state_dict() (state_dict() reads it).
CountAfterStateDict == handed
\* HOOK: what the iterator waits for: the items sent and not handed out.
Outstanding == inflight
\* HOOK: what a resumed epoch begins with as handed out: the loaded state's items.
ResumedHanded(s) == s.handed
\* HOOK: the resumed epoch's iterator: the state's (its load_state_dict() after iter(dataset)),
\* or a new iterator when the state holds none.
ResumedSeed(s) == IF s.iseed = None THEN FreshSeed ELSE s.iseed
\* HOOK (issue 36): each epoch's order is drawn from torch's global RNG (one draw at iter()),
\* not from the generator the loader was given.
OrderFromGlobalRng == FALSE
\* The RNG state the running epoch's order was drawn at: the loader's generator's, or (the
\* draw advanced it by one) the global RNG's.
OrderKey == IF OrderFromGlobalRng THEN grng - 1 ELSE Drawn

-----------------------------------------------------------------------------
(* The loader *)

Remaining == Items \ (handed \cup inflight)

\* Send the next task (its item, in the order of an uninterrupted run) ahead of the hand-out.
MainTryPutIndex ==
    /\ it = "running"
    /\ Remaining # {}
    /\ Cardinality(Outstanding) < PrefetchFactor * nw
    /\ inflight' = inflight \cup {MinRank(Remaining)}
    /\ UNCHANGED <<it, epoch, handed, skip, nw, pending, touched, gen, dstate, iseed, proc, grng,
                   log, uepoch, snaps, loads, governs, started>>

\* Hand an item out: in sampler order with in_order, any in-flight one without. The user gets
\* its value: the dataset index at that position of the epoch's order, drawn with the dataset's
\* and the iterator's state.
MainProcessData(i) ==
    /\ it = "running"
    /\ i \in inflight
    /\ InOrder => i = MinRank(inflight)
    /\ inflight' = inflight \ {i}
    /\ handed' = handed \cup {i}
    /\ log' = Append(log, <<uepoch, i, <<Index(OrderKey, i), dstate, iseed, Drawn>>>>)
    /\ snaps' = IF AliasedSnapshots
                THEN [k \in DOMAIN snaps |->
                        [snaps[k] EXCEPT !.value = [@ EXCEPT !.handed = handed']]]
                ELSE snaps
    /\ UNCHANGED <<it, epoch, skip, nw, pending, touched, gen, dstate, iseed, proc, grng, uepoch,
                   loads, governs, started>>

\* StopIteration; a dataset with a state of its own advances it as its iteration ends.
MainStopIteration ==
    /\ it = "running"
    /\ Outstanding = {} /\ Remaining = {}
    /\ it' = "ended"
    /\ uepoch' = uepoch + 1
    /\ dstate' = IF DatasetState THEN dstate + 1 ELSE dstate
    /\ UNCHANGED <<epoch, handed, inflight, skip, nw, pending, touched, gen, iseed, proc, grng,
                   log, snaps, loads, governs, started>>

\* A fatal error (a worker killed, a timeout): fail-stop; what was prefetched is lost.
FaultFatalError ==
    /\ WithFault
    /\ it = "running"
    /\ it' = "failed"
    /\ inflight' = {}
    /\ UNCHANGED <<epoch, handed, skip, nw, pending, touched, gen, dstate, iseed, proc, grng,
                   log, uepoch, snaps, loads, governs, started>>

-----------------------------------------------------------------------------
(* The user *)

\* iter(): the next epoch, or the epoch a loaded state names, with its handed-out items done.
\* The epoch's order is drawn from the generator (a loaded state's, if it holds one); the
\* dataset takes a loaded state's own state; iter(dataset) makes the epoch's iterator, and a
\* resumed one then loads the state's iterator state.
UserIter ==
    /\ it \in {"none", "ended"}
    /\ uepoch < NumEpochs
    /\ it' = "running"
    /\ inflight' = {}
    /\ touched' = TRUE
    /\ IF pending # NoState
       THEN /\ epoch' = pending.epoch
            /\ handed' = ResumedHanded(pending)
            /\ skip' = handed'
            /\ gen' = Draw(IF pending.gen = None THEN gen ELSE pending.gen)
            /\ dstate' = IF pending.dstate = None THEN dstate ELSE pending.dstate
            /\ iseed' = ResumedSeed(pending)
            /\ started' = pending
       ELSE /\ epoch' = IF it = "ended" THEN epoch + 1 ELSE epoch
            /\ handed' = IF Persistent /\ it = "ended" THEN NewEpochSkip ELSE {}
            /\ skip' = handed'
            /\ gen' = Draw(gen)
            /\ dstate' = dstate
            /\ iseed' = FreshSeed
            /\ started' = IF it = "ended" THEN started ELSE NoState
    /\ pending' = NoState
    /\ grng' = IF OrderFromGlobalRng THEN grng + 1 ELSE grng
    /\ UNCHANGED <<nw, proc, log, uepoch, snaps, loads, governs>>

\* state_dict(): allowed at any moment. It returns the state as the loader is after the call
\* (SnapshotValue', Truth': what the call itself left of the loader's count).
UserStateDict ==
    /\ Len(snaps) < MaxSnapshots
    /\ handed' = CountAfterStateDict
    /\ touched' = TRUE
    /\ UNCHANGED <<it, epoch, inflight, skip, nw, pending, gen, dstate, iseed, proc, grng, log,
                   uepoch, loads, governs, started>>
    /\ snaps' = Append(snaps, [value |-> SnapshotValue', returned |-> SnapshotValue',
                               truth |-> Truth', base |-> started, log |-> log,
                               uepoch |-> uepoch])

\* load_state_dict(snaps[k].value): on this loader object (same), or on a new loader with n
\* workers (the process was restarted: its generator seeded as the first one's was, a new
\* dataset object, new entropy). The user resumes from that snapshot's point. A load that is
\* refused raises and changes nothing.
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
    /\ gen' = IF same THEN gen ELSE 0
    /\ dstate' = IF same THEN dstate ELSE 0
    /\ iseed' = IF same THEN iseed ELSE 0
    /\ proc' = IF same \/ ~IterState THEN proc ELSE proc + 1
    /\ log' = snaps[k].log
    /\ uepoch' = snaps[k].uepoch
    /\ loads' = loads + 1
    /\ started' = NoState
    /\ UNCHANGED <<grng, snaps>>

\* On the same loader a running iterator is dropped: the next iter() starts from the state.
UserLoad == \E k \in 1 .. MaxSnapshots, same \in BOOLEAN, n \in ResumeWorkers :
                UserLoadStateDict(k, same, n)

\* torch.manual_seed(s) in the user's code between epochs (issue 36): only torch's global RNG
\* changes. (The order is drawn at iter(), so a reseed while an epoch runs changes no order.)
UserSeedGlobal(s) ==
    /\ it # "running"
    /\ grng' = s
    /\ UNCHANGED <<it, epoch, handed, inflight, skip, nw, pending, touched, gen, dstate, iseed,
                   proc, log, uepoch, snaps, loads, governs, started>>

\* The user has no iterator running and nothing more to do: the run has ended (stuttering).
Terminated == it # "running" /\ UNCHANGED vars

\* The iterator's own steps: what it can do without a fault or a timeout.
LoaderStep == MainTryPutIndex \/ (\E i \in Items : MainProcessData(i)) \/ MainStopIteration

Next ==
    \/ LoaderStep
    \/ FaultFatalError
    \/ UserIter \/ UserStateDict \/ UserLoad
    \/ \E s \in GlobalSeeds : UserSeedGlobal(s)
    \/ Terminated

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Properties (loaderspec.vocabulary.PROPERTIES, module DataLoaderCheckpoint) *)

\* log[j]: <<user epoch, item, <<dataset index, dataset state, iterator state, generator
\* state>>>>.
IndicesOf(u) == {log[j][3][1] : j \in {j \in DOMAIN log : log[j][1] = u}}

\* MUST: what was handed out before a checkpoint followed by what the resumed loader hands out
\* is an uninterrupted run's stream: in each of the user's epochs no dataset index twice, in
\* the order drawn for that epoch with in_order, every epoch the user finished handed out every
\* item; each value drawn with the dataset state that epoch has in an uninterrupted run, and
\* all of an epoch's values by one iterator (its state continued, not a new one's).
ResumeEquivalence ==
    /\ \A j, l \in DOMAIN log : (j < l /\ log[j][1] = log[l][1]) => log[j][3][1] # log[l][3][1]
    /\ InOrder => \A j, l \in DOMAIN log :
                      (j < l /\ log[j][1] = log[l][1]) =>
                          UPos(log[j][1], log[j][3][1]) < UPos(log[l][1], log[l][3][1])
    /\ \A u \in 0 .. uepoch - 1 : IndicesOf(u) = Items
    /\ \A j \in DOMAIN log : log[j][3][2] = UDState(log[j][1])
    /\ \A j, l \in DOMAIN log : log[j][1] = log[l][1] => log[j][3][3] = log[l][3][3]

\* A state's position: the epoch, its items handed out, the num_workers.
Position(s) == [epoch |-> s.epoch, handed |-> s.handed, nw |-> s.nw]

\* MUST: a state, when returned, counts exactly the items handed out (not those dispatched,
\* in flight or buffered), and an epoch that raised StopIteration as over.
CheckpointIsHandedOut ==
    \A k \in DOMAIN snaps : Position(snaps[k].returned) = Position(snaps[k].truth)

\* The items the user received in the epoch a snapshot was taken in (its user epoch).
Received(r) == {r.log[j][2] : j \in {j \in DOMAIN r.log : r.log[j][1] = r.uepoch}}

\* MUST: a state, when returned, is what the user received: the user's epoch, and the items the
\* user got in it (what next() returned, since the state the user resumed from), whatever the
\* loader's own count says.
CheckpointIsReceived ==
    \A k \in DOMAIN snaps : /\ snaps[k].returned.epoch = snaps[k].uepoch
                            /\ snaps[k].returned.handed = Received(snaps[k])

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
              /\ Position(s.truth) # Position(s.base) => Position(s.returned) # Position(s.base)
    /\ (it = "running" /\ started # NoState /\ epoch > started.epoch) => skip = {}

\* MUST: a running iterator, resumed or not, can always take a step of its own (send, hand
\* out, StopIteration): it never waits for what the state said was handed out. A fault or a
\* timeout (FaultFatalError, always enabled where it may happen) is not such a step, so a
\* stall is a violation whatever the timeout does.
ResumeNeverStalls == it = "running" => ENABLED LoaderStep

\* SHOULD: an IterableDataset's state is resumed only under the num_workers it was taken with
\* (another count raises, naming both); a map-style one continues exactly under any count.
ResumeTopologyExplicit == (Iterable /\ it = "running" /\ started # NoState) => started.nw = nw

\* SHOULD: a map-style state is accepted by a loader of any num_workers (the sampler's order
\* does not depend on it): every state returned would be loaded under every count.
MapResumeAnyWorkers ==
    ~Iterable => \A k \in DOMAIN snaps, n \in ResumeWorkers : TopologyAccepted(snaps[k].value, n)
\* --- issue 36: whose RNG the order is drawn from ---------------------------------------------

\* MUST: each epoch's order is drawn from the generator the loader was given, and from it alone:
\* every item the user got has the dataset index that generator's state, at the epoch's draw,
\* puts at its position. So two runs from equal generator states hand out the same order, a
\* generator in another state another one, and torch's global RNG (reseeded, advanced) none.
OrderFromUserGenerator == \A j \in DOMAIN log : log[j][3][1] = Index(log[j][3][4], log[j][2])
=============================================================================
