------------------------------ MODULE MCBroken ------------------------------
(***************************************************************************)
(* Broken loaders: each definition below replaces one HOOK of DataLoader  *)
(* (`substitute.Hook = "Broken..."` in its table of spec/models.toml, which *)
(* lists the full set of properties TLC finds violated; tests/spec checks  *)
(* exactly that set). Several are what torch does or did; the comment      *)
(* names the release or the seed.                                          *)
(***************************************************************************)
EXTENDS DataLoader

\* TypeOK: the sampler's end is never checked, so send_idx runs past B.
BrokenSamplerHasNext == TRUE

\* PrefetchBound: off by one, one task more than prefetch_factor * num_workers in the window.
BrokenPrefetchRoom == Cardinality(DOMAIN task_info) <= MaxTasks

\* PrefetchBound: refill as soon as a result arrives (tasks_outstanding, not the window): with
\* one slow worker the others run ahead, about num_workers x the bound.
RefillOnArrivalPrefetchRoom == tasks_outstanding < MaxTasks

\* InOrderDelivery: no reorder buffer; whatever arrives is handed out, in_order or not.
BrokenMayHandOut(i) == TRUE

\* NoDuplicateDelivery: the slot is not popped after its batch is handed out.
BrokenAfterHandOut(i) == task_info

\* ExactlyOnce: StopIteration as soon as nothing is pending, without asking the sampler (and,
\* for an IterableDataset, with workers whose shards have not ended).
BrokenNothingLeft == rcvd_idx = send_idx

\* NoDeliveryAfterShutdown: next() after StopIteration starts the epoch over, no iter() asked
\* (FAILURE-MODES D3: the loader kept calling __next__ after StopIteration).
BrokenRestartsAfterEnd == TRUE

\* NoStaleEpochDelivery: a new epoch starts without draining the resume acknowledgements,
\* so results of the epoch that was broken off are taken for the new epoch's tasks.
BrokenResumeAcksAwaited == 0

\* PrefetchBound: the same start without the drain, but results tagged with their epoch, so an old
\* one is dropped when it arrives instead of handed out: nothing stale is delivered, yet the new
\* epoch's batches are loaded beside the old epoch's still in the pipes (the spec before issue
\* 23 counted only this epoch's batches and accepted it).
EpochTaggedTakesResult(m) ==  \* TakesResult's body (the substitution makes it this one), tagged
    m.kind # "resume" /\ m.idx \in DOMAIN task_info /\ task_info[m.idx].data = NoMsg
    /\ m.epoch = epoch

\* NoSilentLoss: torch's reaction to a dead worker. _try_get_data raises "exited unexpectedly"
\* but only marks the worker unavailable; the iterator goes on handing out other workers'
\* batches and later skips the dead worker's slots as if exhausted.
TorchOnWorkerFailure(w) ==
    /\ workers_status' = [workers_status EXCEPT ![w] = FALSE]
    /\ in_call' = FALSE
    /\ UNCHANGED <<iter_state, shutdown, task_info, tasks_outstanding, index_queues,
                   workers_num_tasks, worker_result_queue>>

\* The SHOULD-only witness (NOTE 2.a's resumable contract): the death is not fatal; every task
\* the dead worker still owed becomes an error raised in its turn (its pipe is closed, unread
\* results with it: a batch kept there would exceed the prefetch bound beside the error), the
\* worker gets no more tasks, and the epoch goes on. With no worker left it fails instead.
LostTasks(w) ==
    {i \in DOMAIN task_info : task_info[i].worker = w /\ task_info[i].data = NoMsg}
RaiseLostTasksOnWorkerFailure(w) ==
    IF ActiveCount = 1
    THEN FailStop
    ELSE LET lost == LostTasks(w) IN
         /\ task_info' = [i \in DOMAIN task_info |->
                            IF i \in lost
                            THEN [worker |-> w, data |-> [kind |-> "error", idx |-> i,
                                                          worker |-> w, epoch |-> epoch]]
                            ELSE task_info[i]]
         /\ tasks_outstanding' = tasks_outstanding - Cardinality(lost)
         /\ workers_status' = [workers_status EXCEPT ![w] = FALSE]
         /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = << >>]
         /\ UNCHANGED <<iter_state, shutdown, in_call, index_queues, workers_num_tasks>>

\* WorkerDeathRaises: the death is swallowed (nothing raised while another worker lives) and the
\* tasks the dead worker owed (every one not received: its pipe is closed, unread results with
\* it) are re-sent to a live one behind the user's back; the epoch goes on as if nothing
\* happened. Every batch is handed out once, so only the death's own property can tell (the
\* spec before issue 23 accepted it).
RECURSIVE Ascending(_)
Ascending(S) ==
    IF S = {} THEN << >>
    ELSE LET m == CHOOSE x \in S : \A y \in S : x <= y IN <<m>> \o Ascending(S \ {m})
Rescuers(w) == {v \in Workers : v # w /\ workers_status[v] /\ Alive(v)}
SwallowDeathRaised(w) == IF Rescuers(w) = {} THEN "death" ELSE failure
ResendOnWorkerFailure(w) ==
    IF Rescuers(w) = {} THEN FailStop
    ELSE LET v == CHOOSE x \in Rescuers(w) : TRUE
             owed == {i \in DOMAIN task_info :
                         task_info[i].worker = w /\ task_info[i].data = NoMsg}
             lost == Ascending(owed)
         IN /\ task_info' = [i \in DOMAIN task_info |->
                               IF i \in owed THEN [task_info[i] EXCEPT !.worker = v]
                               ELSE task_info[i]]
            /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = << >>]
            /\ index_queues' = [index_queues EXCEPT ![v] =
                                  @ \o [k \in 1 .. Len(lost) |->
                                          [kind |-> "task", idx |-> lost[k], epoch |-> epoch]]]
            /\ workers_num_tasks' = [workers_num_tasks EXCEPT ![w] = @ - Len(lost),
                                                              ![v] = @ + Len(lost)]
            /\ workers_status' = [workers_status EXCEPT ![w] = FALSE]
            /\ UNCHANGED <<iter_state, shutdown, in_call, tasks_outstanding>>

\* NoSilentLoss: the pin thread drops a batch it failed to pin and goes on (the exception caught,
\* the result never put): next() waits for it, for ever or until the timeout, which the spec
\* before issue 23 took for an answer.
LossyPinOutput == IF pin_msg.kind = "data" THEN data_queue ELSE Append(data_queue, pin_msg)

\* NoSilentLoss: the pin thread drops an IterableDataset's end-of-shard message (it pins only
\* batches and lets the rest fall through): next() waits for the end of that worker's shard, until
\* the timeout (the spec before issue 23's second round counted the task as retired by the
\* exhaustion already and accepted it: 374 distinct states, no violation).
LossyEndPinOutput ==
    IF pin_msg.kind = "exhausted" THEN data_queue ELSE Append(data_queue, pin_msg)

\* NoSilentLoss: a persistent worker restarts on _ResumeIteration but its acknowledgement never
\* reaches the main process: iter() waits for it, for ever or until the timeout.
BrokenSendsResumeAck == FALSE

\* NoSilentLoss: a persistent IterableDataset worker does not start its shard over on
\* _ResumeIteration (iteration_end kept): it skips every task of the next epoch, and next()
\* waits for them until the timeout.
BrokenResumeRestartsShard == FALSE

\* WorkerDeathRaises: no SIGCHLD handler and no liveness poll: a death goes unnoticed (with a
\* timeout set, the timeout fires instead of the death's error).
BrokenDetectsWorkerDeath == FALSE

\* IterationTerminates: the main process never notices that the pin thread died, and waits on
\* its queue for ever (torch checks is_alive() every 5 s).
BrokenDetectsPinDeath == FALSE

\* IterationTerminates: torch's worker loses a result it cannot pickle (the mp.Queue feeder
\* thread dies, pytorch#142884) and goes on; the main process waits for it for ever.
TorchOnPutError(w) ==
    /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
    /\ worker_state' = [worker_state EXCEPT ![w] = "idle"]

\* IterationTerminates: torch re-raises a failed read from next() but keeps iterating; the lost
\* message's task stays outstanding and a later next() waits for it for ever (pytorch#25691).
TorchOnRecvError == UNCHANGED <<iter_state, shutdown>>

\* FailStopAfterFatalError (SHOULD only): torch raises "timed out" and goes on; the late batch is
\* handed out by a later next() (B4, pytorch#21554). No MUST is violated: nothing is lost,
\* nothing handed out twice, and no wait outlives the next timeout.
TorchOnTimeout == UNCHANGED <<iter_state, shutdown, workers_done_event>>

\* PinThreadExitsFirst: PyTorch 1.0's _shutdown_workers (seeds/torch-dataloader-v1.0.txt, the
\* NOTE's [main process] steps a-c): "a. Set `done_event` (shared with `pin_memory_thread` and
\* workers)" comes first, so the workers are told to exit while the pin thread still reads
\* worker_result_queue; only then "b. Exit `pin_memory_thread`" and "c. Exit the workers". The
\* NOTE of torch 2.x splits the event in two and sets the workers' one after the pin thread is
\* joined. (Persistent workers reaped by atexit before the pin thread, FAILURE-MODES E2, fixed
\* by PR #72269, broke the same property.)
Torch10PinShutdownMayStart == workers_done_event
Torch10WorkersShutdownMayStart == TRUE

\* ShutdownCompletes, NoDeadlock: join() with no terminate() (before pytorch PR #39869).
BrokenTerminatesStragglers == FALSE

\* IterationTerminates: rcvd_idx is not stepped over a retired worker's empty slots.
BrokenSkippable(i) == i \notin DOMAIN task_info

\* NoOrphanWorkers: torch's ManagerWatchdog, checked only between tasks (idle in the loop).
TorchWatchdogStates == {"idle"}
\* --- issue 23: the NOTE's shutdown, and history beside the guard regression tests ---

\* NoFetchAfterDone (SHOULD only): the worker checks workers_done_event only when its get times
\* out, not on each index it gets, so the indices queued ahead of its sentinel are fetched
\* (and put) after the done event: the work the event exists to skip.
IgnoresDoneSkipsTask(w) == iteration_end[w]

\* ShutdownOrder (SHOULD only): the sentinels are put before workers_done_event is set (c.ii
\* before c.i); a worker may take its None and exit, or fetch what is queued, before it is told.
SentinelBeforeDoneMayGo == shutdown /\ WorkersShutdownMayStart

\* ShutdownOrder (SHOULD only): pin_memory_thread.join(timeout) returns and is_alive() is not
\* checked: the main process goes on as if the thread had ended. (The model follows the thread no
\* further; PinThreadExitsFirst, which reads what the thread did, cannot see this, ShutdownOrder
\* reads that the join returned before the thread ended.)
PinJoinTimesOutReturns == pin_state \in {"running", "holding", "exited", "dead"}

\* ShutdownCompletes: the done event is set but no sentinel is put; the loader relies on the
\* bounded join's terminate() for every worker (an idle worker loops on its empty queue until
\* killed). The spec before issue 23 made every terminate fair and accepted it.
NoSentinelSends == FALSE

\* NoDispatchAfterEnd: a prefetch left running after a break: a persistent loader's iterator,
\* broken off mid-epoch, keeps sending the rest of its epoch to the workers.
PrefetchAfterBreakMayDispatch ==
    parent_alive /\ ~shutdown /\ iter_state \in {"running", "dropped"}

\* FatalErrorShutsDown (SHOULD only): next() raises "timed out" and the iterator is failed (every
\* later next() raises it again), but its workers are left running until the iterator is
\* dropped (B4: "with timeout>0 the loader raises but leaves the stuck workers alive").
RaiseKeepWorkersOnTimeout ==
    /\ iter_state' = "failed"
    /\ UNCHANGED <<shutdown, workers_done_event>>

\* JoinAfterSentinels (SHOULD only): the workers are joined before their sentinels are put (the
\* c.iii loop ahead of c.ii): the join of a worker still waiting for its None can only time out,
\* and the healthy worker is terminated after a stall of the join's timeout (FAILURE-MODES A1:
\* "workers are told to stop instead of being waited out to the join timeout"; B6, a spurious
\* kill). Nothing is lost and shutdown completes: only the order of the steps tells.
JoinFirstMayStart == TRUE

\* --- issue 38: the designs every model accepted, and NothingLostOnTheWay's excuses ---------

\* StopIterationAfterShutdown: a non-persistent iterator raises StopIteration and leaves its
\* workers (and pin thread) running until the user drops the iterator; torch shuts them down
\* before the raise.
StopKeepsWorkers == FALSE

\* NoTaskToRetiredWorker: the round robin does not skip a retired (exhausted) worker: a task goes
\* to a worker whose shard has ended, which drops it; its slot is skipped.
SendsToRetired(w) == TRUE

\* PrefetchWindowFills (SHOULD only): a prefetch window per loader, prefetch_factor batches in
\* all, not prefetch_factor * num_workers; PrefetchBound (an upper bound) holds.
PerLoaderPrefetchRoom == Cardinality(DOMAIN task_info) < PrefetchFactor

\* NoSilentLoss: a persistent loader retires an exhausted worker as a non-persistent one does,
\* by sending it None: the worker exits, and the next epoch's _ResumeIteration, queued behind the
\* None, is never acknowledged; iter() waits until the timeout. The NothingLostOnTheWay before
\* issue 38 excused a worker that was not alive, whatever ended it, and accepted this.
PersistentRetireSendsNone == TRUE

\* --- issue 38, round two: bugs that take another path than the guard a property once restated;
\* each property reads `observed` (DataLoader's observer), so the path does not matter ---------

\* NoSilentLoss: a persistent loader retires an exhausted worker by killing it (terminate()): the
\* next epoch's _ResumeIteration is never acknowledged, and iter() times out. The worker was not
\* killed by a fault, so its death excuses nothing (the NothingLostOnTheWay before this round took
\* any "killed" worker for a death, and accepted it: MCBroken.NothingLostOnTheWayBeforeKill).
KillsOnRetire == TRUE

\* NoFetchAfterDone (SHOULD only): the worker's loop puts a result and takes its next index in one
\* go, checking the done event only at the loop's top (after a get that timed out): the indices
\* queued behind the done event are fetched. Not the SkipsTask guard WorkerIgnoresDone breaks:
\* WorkerFetch never runs for them, WorkerPut takes them.
PutTakesNextIndex == TRUE

\* ShutdownOrder (SHOULD only): the user's drop puts None into every worker's queue at once,
\* before _shutdown_workers sets the done event (c.ii before c.i); not the SentinelMayGo guard
\* SentinelBeforeDone breaks: MainPutSentinel never runs, the drop put them.
DropPutsNone == TRUE

\* NoDispatchAfterEnd: a persistent iterator, broken off mid-epoch, tops its window up on the way
\* out (one more task of the ended epoch); not the MayDispatch guard PrefetchAfterBreak breaks:
\* MainTryPutIndex never runs after the break, the break sent it.
BreakTopsUp == TRUE

\* PinThreadExitsFirst, ShutdownOrder (SHOULD only): on a timeout the loader tells the workers at
\* once (workers_done_event), before the pin thread is told and joined: the thread reads a
\* worker's channel after the event. Not the WorkersShutdownMayStart guard Torch10ShutdownOrder
\* replaces: MainSetWorkersDone never runs, the timeout's fail-stop set the event.
TellsWorkersOnTimeout ==
    /\ iter_state' = "failed"
    /\ shutdown' = TRUE
    /\ workers_done_event' = TRUE

\* A state constraint (cfg CONSTRAINT) for the variants whose mistake lets the state grow without
\* bound (a sampler never checked, a slot handed out again and again): TLC explores the states
\* up to one step past the correct model's bounds, which is where their violation shows.
Bounded == send_idx <= NumTasks + 1 /\ Len(delivered) <= NumTasks + 1

\* Always TRUE: prints the name of every invariant the state violates (and TLC's deadlock check
\* covers NoDeadlock). Checked as the only INVARIANT, it gives the full set of invariants a
\* variant violates in one run, without TLC stopping at (or printing a trace for) each one.
ViolationMonitor ==
    /\ ~TypeOK => PrintT(<<"VIOLATES", "TypeOK">>)
    /\ ~InOrderDelivery => PrintT(<<"VIOLATES", "InOrderDelivery">>)
    /\ ~NoDuplicateDelivery => PrintT(<<"VIOLATES", "NoDuplicateDelivery">>)
    /\ ~ExactlyOnce => PrintT(<<"VIOLATES", "ExactlyOnce">>)
    /\ ~NoSilentLoss => PrintT(<<"VIOLATES", "NoSilentLoss">>)
    /\ ~PrefetchBound => PrintT(<<"VIOLATES", "PrefetchBound">>)
    /\ ~NoDeliveryAfterShutdown => PrintT(<<"VIOLATES", "NoDeliveryAfterShutdown">>)
    /\ ~NoStaleEpochDelivery => PrintT(<<"VIOLATES", "NoStaleEpochDelivery">>)
    /\ ~PinThreadExitsFirst => PrintT(<<"VIOLATES", "PinThreadExitsFirst">>)
    /\ ~FailStopAfterFatalError => PrintT(<<"VIOLATES", "FailStopAfterFatalError">>)
    /\ ~NoDispatchAfterEnd => PrintT(<<"VIOLATES", "NoDispatchAfterEnd">>)
    /\ ~NoFetchAfterDone => PrintT(<<"VIOLATES", "NoFetchAfterDone">>)
    /\ ~ShutdownOrder => PrintT(<<"VIOLATES", "ShutdownOrder">>)
    /\ ~FatalErrorShutsDown => PrintT(<<"VIOLATES", "FatalErrorShutsDown">>)
    /\ ~JoinAfterSentinels => PrintT(<<"VIOLATES", "JoinAfterSentinels">>)
    /\ ~StopIterationAfterShutdown => PrintT(<<"VIOLATES", "StopIterationAfterShutdown">>)
    /\ ~NoTaskToRetiredWorker => PrintT(<<"VIOLATES", "NoTaskToRetiredWorker">>)

-----------------------------------------------------------------------------
(* Reachability witnesses, not broken loaders: tests/spec checks each as an invariant and    *)
(* expects TLC to report it violated, i.e. that the state it denies is reachable.           *)

\* Trace-check finding (docs/contracts.md): next() times out waiting for rcvd_idx's result
\* while later tasks' results are already buffered in order.
NoTimeoutWhileBuffered == ~(ENABLED MainTimeout /\ \E i \in DOMAIN task_info : Buffered(i))

\* NothingLostOnTheWay as it was before issue 38, a witness that it excused too much (tests/spec:
\* PersistentRetireSendsNone violates NoSilentLoss and holds this): a worker that was not alive,
\* whatever ended it, excused its task and its resume acknowledgement, and a message queued for
\* a worker that had exited (the loader sent it None) counted as on its way.
TaskOnItsWayBefore38(i) ==
    LET w == task_info[i].worker IN
    \/ QueuedFor(w, "task", i)
    \/ worker_state[w] = "busy" /\ worker_msg[w].idx = i /\ worker_msg[w].epoch = epoch
    \/ worker_state[w] = "hung"
    \/ \E m \in InFlight : m.kind # "resume" /\ m.idx = i /\ m.epoch = epoch
AckOnItsWayBefore38(w) ==
    \/ QueuedFor(w, "resume", NoIdx)
    \/ \E m \in InFlight : m.kind = "resume" /\ m.worker = w /\ m.epoch = epoch
NothingLostOnTheWayBefore38 ==
    (parent_alive /\ ~shutdown /\ pin_state # "dead") =>
        /\ iter_state = "running" =>
              \A i \in DOMAIN task_info :
                  (task_info[i].data = NoMsg /\ Alive(task_info[i].worker) /\ Awaited(i))
                      => TaskOnItsWayBefore38(i)
        /\ iter_state = "resuming" =>
              resume_iteration_cnt
                  <= Cardinality({w \in Workers : ~Alive(w) \/ AckOnItsWayBefore38(w)})

\* NothingLostOnTheWay as it was before a loader's own kill was told from a fault's, a witness
\* that it excused too much (tests/spec: RetireKillsWorker violates NoSilentLoss and holds this).
DiedBeforeKill(w) == worker_state[w] = "killed"
NothingLostOnTheWayBeforeKill ==
    (parent_alive /\ ~shutdown /\ pin_state # "dead") =>
        /\ iter_state = "running" =>
              \A i \in DOMAIN task_info :
                  (task_info[i].data = NoMsg /\ ~DiedBeforeKill(task_info[i].worker) /\ Awaited(i))
                      => TaskOnItsWay(i)
        /\ iter_state = "resuming" =>
              resume_iteration_cnt
                  <= Cardinality({w \in Workers : DiedBeforeKill(w) \/ AckOnItsWay(w)})

\* A worker blocked on a full result channel: it holds a result and there is no room.
NoBlockedPut == ~\E w \in Workers : worker_state[w] = "busy" /\ ~HasRoom(w)
=============================================================================
