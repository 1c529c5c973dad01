--------------------------- MODULE TraceDataLoader ---------------------------
(***************************************************************************)
(* Trace validation: a logged run of a loader is a behaviour of DataLoader.*)
(*                                                                         *)
(* After etcd-io/raft's Traceetcdraft.tla and microsoft/CCF's trace specs: *)
(* the log is a sequence of records, and every step of TraceNext consumes  *)
(* the next record l through <Action>IfLogged, which takes the spec action *)
(* of that name with the logged parameters (worker, task, kind, epoch) and *)
(* then compares the logged post-state of the main process with the spec's.*)
(* The 2020 TLC has no Json module: `loaderspec trace-check` writes the    *)
(* runs as a sequence literal into a generated module TraceLog, which this *)
(* one extends (spec/TraceLog.tla is its empty placeholder; see            *)
(* loaderspec/tracecompile.py).                                            *)
(*                                                                         *)
(* Several runs with the same constants are checked in one TLC call: the   *)
(* variable tr picks the run. TraceProgress prints <<"TRACE-AT", tr, l,    *)
(* Ended>> for every distinct state; a run is accepted iff TLC reaches a   *)
(* state with l = Len(log) + 1 (every record consumed) in which the run    *)
(* has Ended (so a log that lost its last events fails). The furthest l    *)
(* reached is the first record no spec step allows.                        *)
(*                                                                         *)
(* Two records that are one spec step, stuttering records, a hidden step: *)
(*  * An error fetch is FaultFetchError(w) in the spec. faultinject logs   *)
(*    it (FaultFetchError, no task) and the worker logs WorkerFetch with   *)
(*    kind "error": whichever comes first takes the step, the other only   *)
(*    checks that it was taken (w holds an error result for that task).    *)
(*  * A kill that raced the worker's own end: a worker that logged         *)
(*    WorkerExit, or was killed, is still a process until it is reaped; a  *)
(*    bounded join that times out (a loaded machine, or none after a       *)
(*    failure) kills it while it tears down, and the loader logs           *)
(*    MainTerminateWorker. The spec's worker has already "exited" (or was  *)
(*    "killed"): the record is a stuttering step of the main process (same *)
(*    guards as MainTerminateWorker).                                      *)
(*  * next() on a failed iterator raises its error again at once: the      *)
(*    loader logs MainCallNext, and the spec takes no step (a call that    *)
(*    reads and waits for nothing is not a call of the model).             *)
(*  * Hidden step: after the loader's process died, a worker killed by the *)
(*    kernel (PR_SET_PDEATHSIG) cannot log its exit. Once every record is  *)
(*    consumed, WorkerWatchdogExit(w) may happen unlogged. Whether the     *)
(*    workers really exited is the sandbox's check (NoOrphanWorkers).      *)
(*  * Hidden step: a worker killed by what nobody logs (the OOM killer, a  *)
(*    segfault) is FaultKillWorker(w), inferred just before the main       *)
(*    process's MainDetectWorkerFailure(w) record, its evidence.           *)
(* The user's checkpoints (DataLoaderCheckpoint.tla's UserStateDict and   *)
(* UserLoadStateDict) are records too, stuttering steps of DataLoader.     *)
(* Each run carries Start (its Config header's `start`): the state its     *)
(* iterator began from. A state_dict() of the live iterator must be        *)
(* exactly its run's hand-outs on top of Start (CheckpointIsHandedOut); a  *)
(* load, logged before the iterator it governs (the run opens with it), is *)
(* that run's Start, and state_dict() before the iterator returns it       *)
(* (LoadIsNeverIgnored). A state's user parts are fingerprints: per worker *)
(* the user state its last batch handed out brought (UserIsBrought), and   *)
(* one generator state per epoch (RngIsDrawn); a load holds them to Start. *)
(* See the section "Checkpoints" below.                                    *)
(* SpecStep ([][Next]_vars) is a PROPERTY of every generated model: TLC    *)
(* checks that each step taken here is a step of DataLoader's Next.        *)
(***************************************************************************)
EXTENDS DataLoader, TraceLog, Integers, Sequences, TLC

CONSTANTS
    StopTrace,      \* > 0: TraceNotAtStop fails at run StopTrace's record StopLine
    StopLine,
    CheckPostState  \* FALSE: take actions whatever post-state was logged (for diagnosis)

VARIABLES
    tr,     \* which run of TraceLogs this behaviour follows
    l,      \* the next record of that run to consume
    loaded  \* << >>, or <<the state>> the last UserLoadStateDict before the iterator loaded

trace_vars == <<tr, l, loaded>>

Log == TraceLogs[tr]
logline == Log[l]
Has(f) == f \in DOMAIN logline
Logged(name) == l <= Len(Log) /\ logline.action = name
\* The record names a worker / task (the actions that take them require it).
LoggedW(name) == Logged(name) /\ Has("worker")
LoggedT(name) == Logged(name) /\ Has("task")
Consume == l' = l + 1 /\ UNCHANGED <<tr, loaded>>

(* The logged post-state of the main process (architecture.md, "Trace records"): every     *)
(* main-process variable, by its spec name (loaderspec.vocabulary.MAIN_STATE_FIELDS, which    *)
(* trace-check requires on every Main record before TLC runs); per-worker variables are lists *)
(* indexed by worker id; task_info maps a task idx to <<worker, buffered>>, buffered meaning  *)
(* its result has arrived (data # NoMsg).                                                     *)
PerWorker(f, list) == Len(list) = NumWorkers /\ \A w \in Workers : f[w] = list[w + 1]
MainPostState ==
    \/ ~CheckPostState
    \/ LET s == logline.state IN
        /\ send_idx' = s.send_idx
        /\ rcvd_idx' = s.rcvd_idx
        /\ tasks_outstanding' = s.tasks_outstanding
        /\ shutdown' = s.shutdown
        /\ iter_state' = s.iter_state
        /\ in_call' = s.in_call
        /\ worker_queue_idx' = s.worker_queue_idx
        /\ resume_iteration_cnt' = s.resume_iteration_cnt
        /\ failure' = s.failure
        /\ workers_done_event' = s.workers_done_event
        /\ pin_memory_thread_done_event' = s.pin_memory_thread_done_event
        /\ PerWorker(workers_status', s.workers_status)
        /\ PerWorker(workers_num_tasks', s.workers_num_tasks)
        /\ PerWorker(sentinel_sent', s.sentinel_sent)
        /\ DOMAIN task_info' = DOMAIN s.task_info
        /\ \A i \in DOMAIN s.task_info :
              /\ task_info'[i].worker = s.task_info[i][1]
              /\ (task_info'[i].data # NoMsg) = s.task_info[i][2]
        /\ epoch' = logline.epoch

\* A worker record that carries the worker's state: its iteration_end after the step.
WorkerPostState(w) ==
    ~CheckPostState \/ ~Has("state") \/ iteration_end'[w] = logline.state.iteration_end

\* A main-process record: the action, then its logged post-state, then the next record.
MainStep(A) == A /\ MainPostState /\ Consume

\* A result message m is the one the record describes; its origin (the payload-origin ghost:
\* <<worker, task, epoch>> of the message actually written, read or handed out) is m's.
IsLoggedMsg(m) ==
    /\ Has("task") => m.idx = logline.task
    /\ Has("kind") => m.kind = logline.kind
    /\ Has("worker") => m.worker = logline.worker
    /\ Has("origin") => /\ m.worker = logline.origin[1]
                        /\ m.idx = logline.origin[2]
                        /\ m.epoch = logline.origin[3]

\* Where the main process read the logged message: the data queue (pin memory) or w's channel.
PoppedLoggedSource ==
    IF PinMemory
    THEN data_queue # << >> /\ IsLoggedMsg(Head(data_queue)) /\ data_queue' = Tail(data_queue)
    ELSE /\ Has("worker") /\ logline.worker \in Workers
         /\ LET q == worker_result_queue[logline.worker] IN
               q # << >> /\ IsLoggedMsg(Head(q))
               /\ worker_result_queue'[logline.worker] = Tail(q)

-----------------------------------------------------------------------------
(* Main process *)

\* See the header: a next() on a failed iterator is a stuttering record.
MainCallNextIfLogged ==
    /\ Logged("MainCallNext")
    /\ \/ MainStep(MainCallNext)
       \/ iter_state = "failed" /\ MainStep(UNCHANGED vars)

MainTryPutIndexIfLogged ==
    /\ Logged("MainTryPutIndex")
    /\ Has("task") => send_idx = logline.task
    /\ MainStep(MainTryPutIndex /\ (Has("worker") => assigned'[send_idx] = logline.worker))

MainGetDataIfLogged ==
    /\ Logged("MainGetData")
    /\ MainStep(MainGetData /\ PoppedLoggedSource)

MainProcessDataIfLogged ==
    /\ LoggedT("MainProcessData")
    /\ logline.task \in 0 .. NumTasks - 1
    /\ Buffered(logline.task)
    /\ IsLoggedMsg(task_info[logline.task].data)
    /\ MainStep(MainProcessData(logline.task))

MainSkipExhaustedIfLogged == Logged("MainSkipExhausted") /\ MainStep(MainSkipExhausted)

MainMarkWorkerUnavailableIfLogged ==
    /\ LoggedW("MainMarkWorkerUnavailable")
    /\ MainStep(MainMarkWorkerUnavailable(logline.worker))

MainStopIterationIfLogged == Logged("MainStopIteration") /\ MainStep(MainStopIteration)

MainDetectWorkerFailureIfLogged ==
    /\ LoggedW("MainDetectWorkerFailure")
    /\ MainStep(MainDetectWorkerFailure(logline.worker))

MainDetectPinFailureIfLogged ==
    Logged("MainDetectPinFailure") /\ MainStep(MainDetectPinFailure)

MainTimeoutIfLogged == Logged("MainTimeout") /\ MainStep(MainTimeout)

MainResumeIterationIfLogged == Logged("MainResumeIteration") /\ MainStep(MainResumeIteration)

MainDrainResumeIfLogged ==
    /\ Logged("MainDrainResume")
    /\ MainStep(MainDrainResume /\ PoppedLoggedSource)

MainDropIteratorIfLogged == Logged("MainDropIterator") /\ MainStep(MainDropIterator)

MainSetPinDoneIfLogged == Logged("MainSetPinDone") /\ MainStep(MainSetPinDone)

MainJoinPinThreadIfLogged == Logged("MainJoinPinThread") /\ MainStep(MainJoinPinThread)

MainSetWorkersDoneIfLogged == Logged("MainSetWorkersDone") /\ MainStep(MainSetWorkersDone)

MainPutSentinelIfLogged ==
    LoggedW("MainPutSentinel") /\ MainStep(MainPutSentinel(logline.worker))

MainJoinWorkerIfLogged ==
    LoggedW("MainJoinWorker") /\ MainStep(MainJoinWorker(logline.worker))

\* See the header: a kill that raced the worker's own exit is a stuttering step.
MainTerminateWorkerIfLogged ==
    /\ LoggedW("MainTerminateWorker")
    /\ LET w == logline.worker IN
        \/ MainStep(MainTerminateWorker(w))
        \/ /\ TerminatesStragglers /\ parent_alive /\ workers_done_event /\ JoinMayStart
           /\ worker_state[w] \in {"exited", "killed"}
           /\ MainStep(UNCHANGED vars)

-----------------------------------------------------------------------------
(* Workers: the record names the worker; the task and kind are checked against the spec's *)

\* The index message w takes next is the logged task, of the logged epoch.
NextIndexIsLogged(w) ==
    /\ index_queues[w] # << >>
    /\ Has("task") => Head(index_queues[w]).idx = logline.task
    /\ Has("epoch") => Head(index_queues[w]).epoch = logline.epoch

\* w already holds the error result of the logged task (FaultFetchError took the step).
ErrorTaken(w) ==
    /\ worker_state[w] = "busy"
    /\ worker_msg[w].kind = "error"
    /\ Has("task") => worker_msg[w].idx = logline.task

WorkerFetchIfLogged ==
    /\ LoggedW("WorkerFetch")
    /\ LET w == logline.worker IN
        IF Has("kind") /\ logline.kind = "error"
        THEN \/ NextIndexIsLogged(w) /\ FaultFetchError(w)
             \/ ErrorTaken(w) /\ UNCHANGED vars
        ELSE /\ NextIndexIsLogged(w)
             /\ WorkerFetch(w)
             /\ Has("kind") => worker_msg'[w].kind = logline.kind
    /\ WorkerPostState(logline.worker)
    /\ Consume

WorkerPutIfLogged ==
    /\ LoggedW("WorkerPut")
    /\ worker_state[logline.worker] = "busy"
    /\ IsLoggedMsg(worker_msg[logline.worker])
    /\ WorkerPut(logline.worker)
    /\ Consume

WorkerAckResumeIfLogged ==
    /\ LoggedW("WorkerAckResume")
    /\ NextIndexIsLogged(logline.worker)
    /\ WorkerAckResume(logline.worker)
    /\ WorkerPostState(logline.worker)
    /\ Consume

WorkerSkipIndexIfLogged ==
    /\ LoggedW("WorkerSkipIndex")
    /\ NextIndexIsLogged(logline.worker)
    /\ WorkerSkipIndex(logline.worker)
    /\ WorkerPostState(logline.worker)
    /\ Consume

WorkerExitIfLogged == LoggedW("WorkerExit") /\ WorkerExit(logline.worker) /\ Consume

WorkerWatchdogExitIfLogged ==
    LoggedW("WorkerWatchdogExit") /\ WorkerWatchdogExit(logline.worker) /\ Consume

-----------------------------------------------------------------------------
(* The pin-memory thread *)

PinGetResultIfLogged ==
    /\ Logged("PinGetResult")
    /\ PinGetResult
    /\ IsLoggedMsg(pin_msg')
    /\ Has("worker") => worker_result_queue'[logline.worker]
                          = Tail(worker_result_queue[logline.worker])
    /\ Consume

PinPutDataIfLogged ==
    Logged("PinPutData") /\ IsLoggedMsg(pin_msg) /\ PinPutData /\ Consume

PinExitIfLogged == Logged("PinExit") /\ PinExit /\ Consume

-----------------------------------------------------------------------------
(* Faults, logged by whoever injects them (faultinject), just before they happen *)

FaultKillWorkerIfLogged ==
    LoggedW("FaultKillWorker") /\ FaultKillWorker(logline.worker) /\ Consume

FaultKillParentIfLogged == Logged("FaultKillParent") /\ FaultKillParent /\ Consume

FaultHangWorkerIfLogged ==
    /\ LoggedW("FaultHangWorker")
    /\ NextIndexIsLogged(logline.worker)
    /\ FaultHangWorker(logline.worker)
    /\ Consume

\* See the header: the worker's WorkerFetch(kind "error") record may have taken the step.
FaultFetchErrorIfLogged ==
    /\ LoggedW("FaultFetchError")
    /\ LET w == logline.worker IN
        \/ NextIndexIsLogged(w) /\ FaultFetchError(w)
        \/ ErrorTaken(w) /\ UNCHANGED vars
    /\ Consume

\* Logged by the worker, between its WorkerFetch and its WorkerPut of the error in its place.
FaultPutErrorIfLogged ==
    /\ LoggedW("FaultPutError")
    /\ Has("task") => worker_msg[logline.worker].idx = logline.task
    /\ FaultPutError(logline.worker)
    /\ Consume

\* Logged by the main process that failed to read, with its post-state.
FaultRecvErrorIfLogged ==
    LoggedW("FaultRecvError") /\ MainStep(FaultRecvError(logline.worker))

\* Logged by the pin thread as it dies on a result of that worker it could not read.
FaultPinDeathIfLogged ==
    LoggedW("FaultPinDeath") /\ FaultPinDeath(logline.worker) /\ Consume

-----------------------------------------------------------------------------
(* Checkpoints: the user's state_dict() and load_state_dict() (spec/DataLoaderCheckpoint.tla;  *)
(* docs/checkpoint.md, "Traced"). A record's `checkpoint` is the state returned or loaded: its *)
(* epoch, the sampler positions handed out (handed_below, handed_above: map-style), and per    *)
(* worker shard the batches handed out and whose batch is next (batches, next_worker).         *)

Start == TraceStarts[tr]  \* the state the run's iterator began from (its header's start)
Range(s) == {s[k] : k \in DOMAIN s}
\* The point a state describes: its epoch, the positions handed out, the shards' progress.
Point(c) == [epoch |-> c.epoch, handed |-> (0 .. c.handed_below - 1) \cup Range(c.handed_above),
             batches |-> c.batches, next_worker |-> c.next_worker]
WholeEpoch(e) == [epoch |-> e, handed |-> {}, batches |-> [s \in DOMAIN Start.batches |-> 0],
                  next_worker |-> 0]
\* Where this epoch of the run began: Start for its first, a whole epoch for the next ones.
EpochStart == IF epoch = 0 THEN Point(Start) ELSE WholeEpoch(Start.epoch + epoch)
\* Map-style: task i's sampler position, the i-th one the epoch's start left to send.
Pos(i) ==
    LET left == {p \in 0 .. i + Cardinality(EpochStart.handed) : p \notin EpochStart.handed}
    IN CHOOSE p \in left : Cardinality({q \in left : q < p}) = i
\* IterableDataset: the shard worker w runs (a resumed epoch rotates them, so that the
\* round-robin, which begins at worker 0, begins at the shard whose batch is next).
Shard(w) == (w + EpochStart.next_worker) % NumWorkers
HandedBy(s) == Cardinality({k \in DOMAIN delivered : Shard(delivered[k].worker) = s})
\* CheckpointIsHandedOut: what state_dict() describes now: this epoch's hand-outs on top of
\* where it began (their sampler positions; per shard their count and whose batch is next),
\* never what is dispatched, in flight or buffered; an epoch that raised StopIteration is over.
HandedOutPoint ==
    IF iter_state = "stopped" THEN WholeEpoch(Start.epoch + epoch + 1)
    ELSE [epoch |-> Start.epoch + epoch,
          handed |-> IF Iterable THEN {}
                     ELSE EpochStart.handed \cup {Pos(delivered[k].idx) : k \in DOMAIN delivered},
          batches |-> [s \in DOMAIN Start.batches |-> EpochStart.batches[s] + HandedBy(s - 1)],
          next_worker |-> IF ~Iterable \/ delivered = << >> THEN EpochStart.next_worker
                          ELSE (Shard(delivered[Len(delivered)].worker) + 1) % NumWorkers]

(* The user's parts of a state: per worker shard a fingerprint of its user state (dataset,      *)
(* iterator, ran dry, RNGs), `user`, and one of the generator state the epoch's order is drawn  *)
(* from, `rng`: short hashes of their JSON ("" for none), compared for equality only. A         *)
(* MainProcessData record's `user` is the fingerprint of the user state its batch brought.     *)

\* The shard worker w runs: an IterableDataset's as Shard; map-style, a resumed first epoch
\* rotates by the positions handed out below (the reference's rotation, docs/checkpoint.md).
UserShard(w) ==
    IF Iterable THEN Shard(w)
    ELSE (w + IF epoch = 0 THEN Start.handed_below ELSE 0) % NumWorkers
\* This epoch's hand-outs before record l that brought a user state of shard s.
Brought(s) == {j \in 1 .. l - 1 : /\ Log[j].action = "MainProcessData"
                                  /\ "user" \in DOMAIN Log[j] /\ "origin" \in DOMAIN Log[j]
                                  /\ Log[j].epoch = logline.epoch
                                  /\ UserShard(Log[j].origin[1]) = s}
LastOf(S) == CHOOSE j \in S : \A k \in S : k <= j
\* UserIsBrought: the user state shard s has now: what its last batch handed out brought; with
\* none of this epoch, the start's (first epoch) or, once an epoch of workers that do not
\* persist is over, none (its next workers begin anew). "*": the records do not say (a
\* persistent worker's state at its epoch's edge travels with no record).
UserNow(s) ==
    IF iter_state = "stopped" THEN IF Persistent THEN "*" ELSE ""
    ELSE IF Brought(s) # {} THEN Log[LastOf(Brought(s))].user
    ELSE IF epoch = 0 THEN Start.user[s + 1]
    ELSE "*"
UserIsBrought(c) ==
    ~CheckPostState \/ \A s \in DOMAIN c.user : UserNow(s - 1) \in {"*", c.user[s]}
\* The user's parts of a state are those of c (a load, or the run's start).
SameUserParts(c) ==
    ~CheckPostState \/ (logline.checkpoint.user = c.user /\ logline.checkpoint.rng = c.rng)
\* RngIsDrawn: every state of the live iterator that names an epoch names one generator state
\* for its order, the one the run's start names for it (a state taken as an epoch ended
\* names the next epoch's, which that epoch's states must name too).
RngIsDrawn ==
    LET c == logline.checkpoint
        Names(d) == d.epoch = c.epoch /\ d.rng # ""
    IN \/ ~CheckPostState \/ c.rng = ""
       \/ /\ Names(Start) => Start.rng = c.rng
          /\ \A j \in 1 .. l - 1 : (/\ Log[j].action = "UserStateDict" /\ "state" \in DOMAIN Log[j]
                                   /\ Names(Log[j].checkpoint)) => Log[j].checkpoint.rng = c.rng

UserRecord(r) == r.action \in {"UserStateDict", "UserLoadStateDict"}
\* A user's record from before the run's iterator existed: no post-state, and only such
\* records before it (trace-check puts them first in the run they govern).
BeforeTheIterator == ~Has("state") /\ \A j \in 1 .. l - 1 : UserRecord(Log[j])
CheckedPoint(c) == ~CheckPostState \/ Point(logline.checkpoint) = c

\* No UserLoadStateDict comes after record l (they all come before the iterator).
NoLaterLoad == \A j \in l + 1 .. Len(Log) : Log[j].action # "UserLoadStateDict"

\* state_dict() of the live iterator (its post-state logged): exactly its hand-outs. Before the
\* iterator: the state the next iter() starts from: the last one loaded; with none loaded yet,
\* the run's start if no load follows, else (a loader never iterated) epoch 0, whole.
UserStateDictIfLogged ==
    /\ Logged("UserStateDict")
    /\ IF Has("state")
       THEN /\ CheckedPoint(HandedOutPoint) /\ MainStep(UNCHANGED vars)
            /\ UserIsBrought(logline.checkpoint) /\ RngIsDrawn
       ELSE /\ BeforeTheIterator
            /\ CheckedPoint(CASE loaded # << >> -> Point(loaded[1])
                              [] NoLaterLoad -> Point(Start)
                              [] OTHER -> WholeEpoch(0))
            /\ CASE loaded # << >> -> SameUserParts(loaded[1])
                 [] NoLaterLoad -> SameUserParts(Start)
                 [] OTHER -> TRUE
            /\ UNCHANGED vars /\ Consume

\* LoadIsNeverIgnored: the last state loaded before the iterator is the one it began from, its
\* user parts included (what the workers start from, the order's generator), and (map-style)
\* its run sends exactly the sampler positions that state had not handed out.
UserLoadStateDictIfLogged ==
    /\ Logged("UserLoadStateDict")
    /\ BeforeTheIterator
    /\ NoLaterLoad =>
          /\ CheckedPoint(Point(Start))
          /\ SameUserParts(Start)
          /\ Iterable \/ NumTasks + Cardinality(Point(Start).handed) = Start.total
    /\ loaded' = <<logline.checkpoint>>
    /\ l' = l + 1
    /\ UNCHANGED <<tr, vars>>

-----------------------------------------------------------------------------
(* Unlogged steps (see the header) *)

HiddenWatchdogExit ==
    /\ l = Len(Log) + 1
    /\ \E w \in Workers : WorkerWatchdogExit(w)
    /\ UNCHANGED trace_vars

\* A worker death nobody logged (the OOM killer, a segfault in a C extension, a worker that
\* SIGKILLs itself): the main process's record that it found w dead is the evidence, so the
\* kill is inferred just before that record (if w is alive in the spec; a logged kill took it).
HiddenKillWorker ==
    /\ LoggedW("MainDetectWorkerFailure")
    /\ logline.worker \in Workers
    /\ FaultKillWorker(logline.worker)
    /\ UNCHANGED trace_vars

-----------------------------------------------------------------------------

TraceInit ==
    /\ tr \in 1 .. Len(TraceLogs)
    /\ l = 1
    /\ loaded = << >>
    /\ Init

TraceNext ==
    \/ MainCallNextIfLogged
    \/ MainTryPutIndexIfLogged \/ MainGetDataIfLogged \/ MainProcessDataIfLogged
    \/ MainSkipExhaustedIfLogged \/ MainMarkWorkerUnavailableIfLogged
    \/ MainStopIterationIfLogged \/ MainDetectWorkerFailureIfLogged
    \/ MainDetectPinFailureIfLogged \/ MainTimeoutIfLogged
    \/ MainResumeIterationIfLogged \/ MainDrainResumeIfLogged \/ MainDropIteratorIfLogged
    \/ MainSetPinDoneIfLogged \/ MainJoinPinThreadIfLogged \/ MainSetWorkersDoneIfLogged
    \/ MainPutSentinelIfLogged \/ MainJoinWorkerIfLogged \/ MainTerminateWorkerIfLogged
    \/ WorkerFetchIfLogged \/ WorkerPutIfLogged \/ WorkerAckResumeIfLogged
    \/ WorkerSkipIndexIfLogged \/ WorkerExitIfLogged \/ WorkerWatchdogExitIfLogged
    \/ PinGetResultIfLogged \/ PinPutDataIfLogged \/ PinExitIfLogged
    \/ FaultKillWorkerIfLogged \/ FaultKillParentIfLogged \/ FaultHangWorkerIfLogged
    \/ FaultFetchErrorIfLogged \/ FaultPutErrorIfLogged \/ FaultRecvErrorIfLogged
    \/ FaultPinDeathIfLogged
    \/ UserStateDictIfLogged \/ UserLoadStateDictIfLogged
    \/ HiddenWatchdogExit \/ HiddenKillWorker

TraceSpec == TraceInit /\ [][TraceNext]_<<vars, trace_vars>>

\* Checked as a PROPERTY of every trace model (refinement, after etcd's trace validation): each
\* step the trace spec takes, hidden steps and stuttering records included, is a step of the
\* spec (or leaves its variables unchanged), not only argued to be one.
SpecStep == [][Next]_vars

\* Always true: prints where each distinct state stands (loaderspec/tracecheck.py reads it).
TraceProgress == PrintT(<<"TRACE-AT", tr, l, Ended>>)

\* For localisation: violated at the first state that has consumed records 1 .. StopLine - 1.
TraceNotAtStop == ~(tr = StopTrace /\ l = StopLine)

\* A run that is a behaviour of the spec reaches this (the reachability check, as a formula).
TraceAccepted == l = Len(Log) + 1 /\ Ended
=============================================================================
