----------------------------- MODULE DataLoader -----------------------------
(***************************************************************************)
(* The multi-process DataLoader protocol of PyTorch (torch 2.13,          *)
(* torch/utils/data/dataloader.py, _utils/worker.py, _utils/pin_memory.py) *)
(* as a correct loader must run it: prefetch, reorder buffer, IterableDataset *)
(* exhaustion, persistent workers across epochs, the pin-memory thread,    *)
(* the user's calls (inside next() or between calls), and the shutdown     *)
(* order of the NOTE "Data Loader Multiprocessing Shutdown Logic", with    *)
(* faults as nondeterministic actions.                                     *)
(*                                                                         *)
(* Actions (one per loaderspec.vocabulary.Action, named exactly):          *)
(*   main process                                                          *)
(*     MainCallNext                 the user calls next(): a call begins   *)
(*     MainTryPutIndex              send task send_idx to the next worker  *)
(*     MainGetData                  take one message off the data queue    *)
(*     MainProcessData(i)           hand out task i (reraise an error)     *)
(*     MainSkipExhausted            step rcvd_idx over an empty slot       *)
(*     MainMarkWorkerUnavailable(w) retire w after its exhaustion message  *)
(*     MainStopIteration            raise StopIteration                    *)
(*     MainDetectWorkerFailure(w)   w died: raise RuntimeError, fail-stop  *)
(*     MainDetectPinFailure         the pin thread died: raise, fail-stop  *)
(*     MainTimeout                  `timeout` expired: raise, fail-stop    *)
(*     MainResumeIteration          persistent: new epoch, resume to each  *)
(*     MainDrainResume              read acks, dropping old-epoch results  *)
(*     MainDropIterator             the user breaks off / drops the loader *)
(*     MainSetPinDone               pin done event (+ wake-up put)         *)
(*     MainJoinPinThread            the pin thread is gone: join returns   *)
(*     MainSetWorkersDone           workers_done_event.set()               *)
(*     MainPutSentinel(w)           None into w's index queue              *)
(*     MainJoinWorker(w)            w has exited: join returns             *)
(*     MainTerminateWorker(w)       bounded join timed out: terminate w    *)
(*   workers                                                               *)
(*     WorkerFetch(w)               get (idx, index), fetch: data|exhausted*)
(*     WorkerPut(w)                 put (idx, data) on w's result channel  *)
(*     WorkerAckResume(w)           _ResumeIteration: ack, reset the fetcher*)
(*     WorkerSkipIndex(w)           done event or iteration_end: drop index*)
(*     WorkerExit(w)                got None: exit cleanly                 *)
(*     WorkerWatchdogExit(w)        the parent is gone: exit, from any state*)
(*   pin-memory thread                                                     *)
(*     PinGetResult                 take a result off a worker's channel   *)
(*     PinPutData                   put it on the data queue               *)
(*     PinExit                      the pin done event is set: thread ends *)
(*   faults (each switched by a constant)                                  *)
(*     FaultKillWorker(w)           SIGKILL of w, at any point             *)
(*     FaultKillParent              SIGKILL of the loader's process        *)
(*     FaultHangWorker(w)           w takes its next task and never returns*)
(*     FaultFetchError(w)           w's fetch raises: an ExceptionWrapper  *)
(*     FaultPutError(w)             w's result cannot be sent (pickling)   *)
(*     FaultRecvError(w)            the main process's read of w's channel *)
(*                                  fails (fd exhaustion, unpickling)      *)
(*     FaultPinDeath(w)             the pin thread dies reading w's channel*)
(* A worker blocked on a full result channel is not an action but a state: *)
(* ResultCapacity bounds each channel, and a worker holding a result with  *)
(* no room waits until the reader takes one (only a reader inside a call,  *)
(* or the pin thread, reads).                                              *)
(* Plus Terminated, the stuttering step of a run that has ended, so that  *)
(* TLC's deadlock check is exactly NoDeadlock.                             *)
(* Every action ends with Observe(actor): the observer writes what the    *)
(* step did into `observed`, which the history properties read ("The      *)
(* observer" below). A fair action X is XStep /\ Observe(actor), and the  *)
(* fairness is stated over XStep.                                          *)
(*                                                                         *)
(* Broken variants (spec/MCBroken.tla, tables of spec/models.toml) replace *)
(* the "hook" definitions marked HOOK below (`substitute.Hook = "Broken"`, *)
(* the cfg's `Hook <- Broken`); the hooks are the decisions a loader can   *)
(* get wrong.                                                              *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    NumWorkers,     \* num_workers (> 0: this is the multi-process iterator)
    NumTasks,       \* B: the sampler's length (the model cuts an IterableDataset's at B too)
    PrefetchFactor, \* prefetch_factor: at most PrefetchFactor * NumWorkers batches ahead
    InOrder,        \* in_order: hand batches out in sampler order (reorder buffer)
    Iterable,       \* an IterableDataset: a worker's fetch may end its shard (exhaustion)
    Persistent,     \* persistent_workers: workers survive the epoch, _ResumeIteration restarts
    NumEpochs,      \* epochs the user may start with persistent workers (1 otherwise)
    PinMemory,      \* pin_memory: a pin thread between worker_result_queue and data_queue
    ResultCapacity, \* messages a worker's result channel holds (a pipe's buffer); 0: unbounded
    WithKillWorker, \* fault: a worker may be SIGKILLed at any point
    WithKillParent, \* fault: the loader's process may be SIGKILLed
    WithHang,       \* fault: a worker's fetch may never return
    WithFetchError, \* fault: a fetch may raise (delivered as an error in its turn)
    WithTimeout,    \* timeout > 0: waiting for data may time out
    WithPutError,   \* fault: a worker's result may fail to be sent (it cannot be pickled)
    WithRecvError,  \* fault: the main process's read of a result may fail
    WithPinDeath    \* fault: the pin thread may die (an exception escapes its loop)

ASSUME /\ NumWorkers \in Nat \ {0}
       /\ NumTasks \in Nat
       /\ PrefetchFactor \in Nat \ {0}
       /\ NumEpochs \in Nat \ {0}
       /\ ResultCapacity \in Nat
       /\ Persistent \/ NumEpochs = 1
       /\ \A flag \in {InOrder, Iterable, Persistent, PinMemory, WithKillWorker,
                       WithKillParent, WithHang, WithFetchError, WithTimeout, WithPutError,
                       WithRecvError, WithPinDeath} : flag \in BOOLEAN

Workers == 0 .. NumWorkers - 1
MaxTasks == PrefetchFactor * NumWorkers   \* torch: max_tasks in _try_put_index
NoIdx == -1
Epochs == 0 .. NumEpochs - 1
Failures == {"none", "death", "timeout", "recv", "pin"}

(* Messages. Every message carries the epoch it was sent in: a ghost tag  *)
(* for NoStaleEpochDelivery (torch's messages do not carry it).            *)
IndexMsg == [kind : {"task", "resume", "sentinel"}, idx : {NoIdx} \cup (0 .. NumTasks - 1),
             epoch : Epochs]
ResultKinds == {"data", "error", "exhausted", "resume"}
ResultMsg == [kind : ResultKinds, idx : {NoIdx} \cup (0 .. NumTasks - 1),
              worker : Workers, epoch : Epochs]
NoMsg == [kind |-> "none", idx |-> NoIdx, worker |-> 0, epoch |-> 0]

VARIABLES
    \* --- the main process (torch's _MultiProcessingDataLoaderIter fields) ---
    send_idx,          \* index of the next task to send
    rcvd_idx,          \* index of the next task to hand out (in order)
    task_info,         \* task idx -> [worker, data]: data = NoMsg while outstanding
    tasks_outstanding, \* tasks sent and not yet received
    workers_status,    \* worker -> still active in this epoch (not exhausted)
    workers_num_tasks, \* worker -> tasks sent to it and not yet handed out
    worker_queue_idx,  \* the round-robin cursor (_worker_queue_idx_cycle)
    epoch,             \* epochs started by this iterator, minus one
    shutdown,          \* _shutdown: _shutdown_workers has started
    iter_state,        \* "running" | "resuming" | "stopped" | "failed" | "dropped"
    in_call,           \* the main thread is inside next() (or iter() of a persistent loader)
    resume_iteration_cnt, \* resume acks still awaited by _reset
    sentinel_sent,     \* worker -> None was put into its index queue
    parent_alive,      \* the loader's process lives
    \* --- queues and events ---
    index_queues,      \* worker -> FIFO of IndexMsg
    worker_result_queue, \* worker -> FIFO of ResultMsg (no order across workers)
    data_queue,        \* the pin thread's output FIFO (unused without pin memory)
    workers_done_event,
    pin_memory_thread_done_event,
    \* --- workers and pin thread ---
    worker_state,      \* "idle" | "busy" | "hung" | "exited" | "killed" | "joined"
    worker_msg,        \* worker -> the result it fetched and will put (busy)
    iteration_end,     \* worker -> its shard is exhausted (torch's iteration_end)
    pin_state,         \* "none" | "running" | "holding" | "exited" | "dead" | "joined"
    pin_msg,           \* the result the pin thread holds
    \* --- history, for the properties only (no guard reads it) ---
    delivered,         \* this epoch's hand-outs: [idx, epoch, worker]
    assigned,          \* this epoch: task idx -> the worker it was sent to
    exhausted_at,      \* this epoch: worker -> idx of its exhausted fetch, or NoIdx
    epoch_over,        \* this epoch raised StopIteration or was broken off
    failure,           \* the fatal error this iterator raised: "none" | "death" | ...
    retired,           \* this epoch: worker -> its shard's end retired it (the main process acted
                       \* on its end-of-shard message)
    sent_to_retired,   \* a task was sent to a worker after the epoch had retired it
    acted_on_live_stop, \* the user acted after a non-persistent StopIteration with a worker or
                       \* the pin thread still there (StopIteration reached the user too soon)
    \* --- what the observer saw (Observe: every step, whichever action took it) ---
    observed           \* the record ObservedRec: what happened, and when, read off each step

main_vars == <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
               workers_num_tasks, worker_queue_idx, epoch, shutdown, iter_state, in_call,
               resume_iteration_cnt, sentinel_sent, parent_alive>>
queue_vars == <<index_queues, worker_result_queue, data_queue, workers_done_event,
                pin_memory_thread_done_event>>
actor_vars == <<worker_state, worker_msg, iteration_end, pin_state, pin_msg>>
past_vars == <<delivered, assigned, exhausted_at, epoch_over, failure, retired, sent_to_retired,
               acted_on_live_stop>>
history_vars == past_vars
\* `observed` is written by Observe only, at every step (see "The observer" below).
vars == <<main_vars, queue_vars, actor_vars, history_vars, observed>>

DeliveryRec == [idx : 0 .. NumTasks - 1, epoch : Epochs, worker : Workers]
\* What the observer records, each field FALSE until the step that makes it TRUE (so that a
\* correct model's state count is the same with it or without it), except sentinel_seen.
ObservedRec == [fetch_after_done : BOOLEAN, sent_after_end : BOOLEAN,
                handed_after_end : BOOLEAN, handed_after_failure : BOOLEAN,
                stopped_after_failure : BOOLEAN,
                pin_read_after_done : BOOLEAN, pin_joined_running : BOOLEAN,
                told_before_pin_joined : BOOLEAN, sentinel_before_told : BOOLEAN,
                joined_before_sentinels : BOOLEAN, sentinel_seen : [Workers -> BOOLEAN],
                loader_killed : [Workers -> BOOLEAN]]
NothingObserved ==
    [fetch_after_done |-> FALSE, sent_after_end |-> FALSE, handed_after_end |-> FALSE,
     handed_after_failure |-> FALSE, stopped_after_failure |-> FALSE,
     pin_read_after_done |-> FALSE, pin_joined_running |-> FALSE,
     told_before_pin_joined |-> FALSE, sentinel_before_told |-> FALSE,
     joined_before_sentinels |-> FALSE, sentinel_seen |-> [w \in Workers |-> FALSE],
     loader_killed |-> [w \in Workers |-> FALSE]]
TaskRec == [worker : Workers, data : ResultMsg \cup {NoMsg}]

TypeOK ==
    /\ send_idx \in 0 .. NumTasks
    /\ rcvd_idx \in 0 .. send_idx
    /\ DOMAIN task_info \subseteq rcvd_idx .. send_idx - 1
    /\ \A i \in DOMAIN task_info : task_info[i] \in TaskRec
    /\ tasks_outstanding \in 0 .. NumTasks
    /\ workers_status \in [Workers -> BOOLEAN]
    /\ workers_num_tasks \in [Workers -> 0 .. NumTasks]
    /\ worker_queue_idx \in Workers
    /\ epoch \in Epochs
    /\ shutdown \in BOOLEAN
    /\ iter_state \in {"running", "resuming", "stopped", "failed", "dropped"}
    /\ in_call \in BOOLEAN
    /\ resume_iteration_cnt \in 0 .. NumWorkers
    /\ sentinel_sent \in [Workers -> BOOLEAN]
    /\ parent_alive \in BOOLEAN
    /\ index_queues \in [Workers -> Seq(IndexMsg)]
    /\ worker_result_queue \in [Workers -> Seq(ResultMsg)]
    /\ data_queue \in Seq(ResultMsg)
    /\ workers_done_event \in BOOLEAN
    /\ pin_memory_thread_done_event \in BOOLEAN
    /\ worker_state \in [Workers -> {"idle", "busy", "hung", "exited", "killed", "joined"}]
    /\ worker_msg \in [Workers -> ResultMsg \cup {NoMsg}]
    /\ iteration_end \in [Workers -> BOOLEAN]
    /\ pin_state \in {"none", "running", "holding", "exited", "dead", "joined"}
    /\ pin_msg \in ResultMsg \cup {NoMsg}
    /\ delivered \in Seq(DeliveryRec)
    /\ DOMAIN assigned = 0 .. send_idx - 1
    /\ \A i \in DOMAIN assigned : assigned[i] \in Workers
    /\ exhausted_at \in [Workers -> {NoIdx} \cup (0 .. NumTasks - 1)]
    /\ epoch_over \in BOOLEAN
    /\ failure \in Failures
    /\ retired \in [Workers -> BOOLEAN]
    /\ sent_to_retired \in BOOLEAN
    /\ acted_on_live_stop \in BOOLEAN
    /\ observed \in ObservedRec

Init ==
    /\ send_idx = 0
    /\ rcvd_idx = 0
    /\ task_info = << >>
    /\ tasks_outstanding = 0
    /\ workers_status = [w \in Workers |-> TRUE]
    /\ workers_num_tasks = [w \in Workers |-> 0]
    /\ worker_queue_idx = 0
    /\ epoch = 0
    /\ shutdown = FALSE
    /\ iter_state = "running"
    /\ in_call = FALSE
    /\ resume_iteration_cnt = 0
    /\ sentinel_sent = [w \in Workers |-> FALSE]
    /\ parent_alive = TRUE
    /\ index_queues = [w \in Workers |-> << >>]
    /\ worker_result_queue = [w \in Workers |-> << >>]
    /\ data_queue = << >>
    /\ workers_done_event = FALSE
    /\ pin_memory_thread_done_event = FALSE
    /\ worker_state = [w \in Workers |-> "idle"]
    /\ worker_msg = [w \in Workers |-> NoMsg]
    /\ iteration_end = [w \in Workers |-> FALSE]
    /\ pin_state = IF PinMemory THEN "running" ELSE "none"
    /\ pin_msg = NoMsg
    /\ delivered = << >>
    /\ assigned = << >>
    /\ exhausted_at = [w \in Workers |-> NoIdx]
    /\ epoch_over = FALSE
    /\ failure = "none"
    /\ retired = [w \in Workers |-> FALSE]
    /\ sent_to_retired = FALSE
    /\ acted_on_live_stop = FALSE
    /\ observed = NothingObserved

-----------------------------------------------------------------------------
(* Helpers *)

\* task_info without entry i (torch: del / pop).
Drop(f, i) == [j \in DOMAIN f \ {i} |-> f[j]]
Gone(s) == s \in {"exited", "killed", "joined"}
Alive(w) == worker_state[w] \in {"idle", "busy", "hung"}
Buffered(i) == i \in DOMAIN task_info /\ task_info[i].data # NoMsg
ActiveCount == Cardinality({w \in Workers : workers_status[w]})
\* The epoch runs: not ended, failed or shut down (the main thread may be inside a call or not).
Iterating == parent_alive /\ iter_state = "running" /\ ~shutdown
\* Inside next() and iterating: the main thread reads results and hands them out.
Serving == in_call /\ Iterating
\* A worker's result channel has room for one more message (a pipe's buffer).
HasRoom(w) == ResultCapacity = 0 \/ Len(worker_result_queue[w]) < ResultCapacity

HeadIs(w, kind) == index_queues[w] # << >> /\ Head(index_queues[w]).kind = kind

AllWorkersGone == \A w \in Workers : Gone(worker_state[w])
PinGone == pin_state \in {"none", "joined"}
ShutdownDone == shutdown /\ PinGone /\ \A w \in Workers : worker_state[w] = "joined"

\* Where the main process reads results: the pin thread's data queue, or (without pin memory)
\* any worker's result channel: neither torch's mp.Queue nor per-worker pipes order across workers.
Sources == IF PinMemory THEN {-1} ELSE Workers
SourceReady(s) == IF s = -1 THEN data_queue # << >> ELSE worker_result_queue[s] # << >>
SourceHead(s) == IF s = -1 THEN Head(data_queue) ELSE Head(worker_result_queue[s])
PopSource(s) ==
    IF s = -1 THEN data_queue' = Tail(data_queue) /\ UNCHANGED worker_result_queue
    ELSE worker_result_queue' = [worker_result_queue EXCEPT ![s] = Tail(@)]
         /\ UNCHANGED data_queue
InputEmpty == \A s \in Sources : ~SourceReady(s)

\* Messages on their way to the main process.
Msgs(q) == {q[k] : k \in DOMAIN q}
InFlight == UNION {Msgs(worker_result_queue[w]) : w \in Workers} \cup Msgs(data_queue)
            \cup {pin_msg}

\* History: a step of the user's (a next() call, a break) after a non-persistent iterator raised
\* StopIteration, with a worker not yet joined or the pin thread not yet joined: torch raises
\* StopIteration only once _shutdown_workers has returned.
LiveAfterStop ==
    /\ iter_state = "stopped" /\ ~Persistent
    /\ ~(PinGone /\ \A w \in Workers : worker_state[w] = "joined")
NoteUserAct == acted_on_live_stop' = (acted_on_live_stop \/ LiveAfterStop)

\* torch's _reset: the per-epoch fields of the main process and the history of one epoch.
ResetEpoch ==
    /\ send_idx' = 0
    /\ rcvd_idx' = 0
    /\ task_info' = << >>
    /\ tasks_outstanding' = 0
    /\ workers_status' = [w \in Workers |-> TRUE]
    /\ workers_num_tasks' = [w \in Workers |-> 0]
    /\ worker_queue_idx' = 0
    /\ delivered' = << >>
    /\ assigned' = << >>
    /\ exhausted_at' = [w \in Workers |-> NoIdx]
    /\ retired' = [w \in Workers |-> FALSE]

-----------------------------------------------------------------------------
(* HOOKS: the decisions a loader can get wrong. A broken variant replaces one. *)

\* The sampler has another index (torch: _next_index raises StopIteration at the end).
SamplerHasNext == send_idx < NumTasks
\* When a task may be sent: torch refills only after a hand-out (or an exhaustion), so at most
\* MaxTasks tasks are sent and not yet handed out or retired (the reorder window).
PrefetchRoom == Cardinality(DOMAIN task_info) < MaxTasks
\* A task may go to worker w: only an active one (not retired by its shard's end, not dead).
MaySendTo(w) == workers_status[w]
\* Task i may be handed out now: with in_order only task rcvd_idx (the reorder buffer).
MayHandOut(i) == InOrder => i = rcvd_idx
\* Whether a buffered result is handed out only while the iterator runs.
HandOutGuard == Iterating
\* Whether a task may be sent: only while the epoch runs (no prefetch for an ended epoch).
MayDispatch == Iterating
\* Handing out task i removes it (no second hand-out).
AfterHandOut(i) == Drop(task_info, i)
\* rcvd_idx may step over slot i: delivered already, or its worker was retired with no result.
\* (IF, not \/: TLC explores both disjuncts of an action.)
Skippable(i) ==
    IF i \notin DOMAIN task_info THEN TRUE
    ELSE task_info[i].data = NoMsg /\ ~workers_status[task_info[i].worker]
\* StopIteration: nothing received is pending and no task can be sent any more.
NothingLeft == rcvd_idx = send_idx /\ (~SamplerHasNext \/ ActiveCount = 0)
\* Without persistent workers, StopIteration shuts the workers down (torch: _shutdown_workers()
\* before the raise); persistent workers wait for the next iter().
StopShutsDown == ~Persistent
\* Retiring an exhausted worker tells it to exit (None) only without persistent workers: a
\* persistent worker serves the next epoch.
RetireSendsSentinel == ~Persistent
\* Retiring an exhausted worker never kills it (the loader's own kill is not a fault's death).
RetireKills == FALSE
\* A user's break leaves the window as it is: nothing is sent on the way out.
DropRefills == FALSE
\* A user's drop starts the shutdown and puts no sentinel itself (_shutdown_workers does, c.ii).
DropSendsNone == FALSE
\* A next() after StopIteration raises StopIteration again; a broken loader starts over.
RestartsAfterEnd == FALSE
\* Acks _reset waits for before the new epoch starts (one per worker).
ResumeAcksAwaited == NumWorkers
\* The main process keeps a message it read as the result of an outstanding task (torch's
\* messages carry no epoch: the drained acks are what keeps an old epoch's results out).
TakesResult(m) == m.kind # "resume" /\ m.idx \in DOMAIN task_info /\ task_info[m.idx].data = NoMsg
\* What the main process does on learning that worker w died: raise, then fail-stop.
\* (Sets iter_state, shutdown, in_call, workers_status, task_info, tasks_outstanding,
\* index_queues, workers_num_tasks, worker_result_queue.)
FailStop ==
    /\ iter_state' = "failed"
    /\ shutdown' = TRUE
    /\ in_call' = FALSE
    /\ UNCHANGED <<workers_status, task_info, tasks_outstanding, index_queues, workers_num_tasks,
                   worker_result_queue>>
OnWorkerFailure(w) == FailStop
\* The error next() raises on learning of w's death (the history records what was raised).
DeathRaised(w) == "death"
\* The main process learns of worker deaths (SIGCHLD, liveness poll, torn message).
DetectsWorkerDeath == TRUE
\* The main process learns that the pin thread died (its liveness, a marker it leaves).
DetectsPinDeath == TRUE
\* What the main process does when reading a result fails: raise, then fail-stop.
OnRecvError ==
    /\ iter_state' = "failed"
    /\ shutdown' = TRUE
\* What the main process does when `timeout` expires: raise, then fail-stop (torch resumes).
\* (Sets iter_state, shutdown, workers_done_event: the workers are told by _shutdown_workers.)
OnTimeout ==
    /\ iter_state' = "failed"
    /\ shutdown' = TRUE
    /\ UNCHANGED workers_done_event
\* What a worker does when its result cannot be sent: send the error in its place.
OnPutError(w) ==
    /\ worker_msg' = [worker_msg EXCEPT ![w].kind = "error"]
    /\ UNCHANGED worker_state
\* Shutdown order from the NOTE: the pin thread first, then the workers; the done event
\* before the sentinels ("set these done_events and then [send] the corresponding ... a None").
PinShutdownMayStart == TRUE
WorkersShutdownMayStart == ~PinMemory \/ pin_state = "joined"
SentinelMayGo == workers_done_event
\* The workers are joined (and stragglers terminated) once every sentinel is out (c.iii after
\* c.ii): a join before a worker's None can only time out, and the worker be killed.
AllSentinelsSent == \A v \in Workers : sentinel_sent[v]
JoinMayStart == AllSentinelsSent
\* The sentinel is put into the worker's index queue (so it can exit on its own).
SendsSentinel == TRUE
\* A worker that has put its result goes back to the top of its loop (where it checks the done
\* event) before it takes its next index.
PutTakesNext == FALSE
\* pin_memory_thread.join() returns once the thread has ended (told to, or dead).
PinJoinReturns == pin_state \in {"exited", "dead"}
\* A worker drops the index it got instead of fetching it: the done event is set ("If set,
\* continue to next iteration"), or its shard has ended.
SkipsTask(w) == workers_done_event \/ iteration_end[w]
\* The bounded join is followed by terminate() for stragglers.
TerminatesStragglers == TRUE
\* States from which a worker notices that its parent died (correct: any, e.g. PDEATHSIG).
WatchdogStates == {"idle", "busy", "hung"}
\* What the pin thread's put leaves on the data queue: the result it holds, appended.
PinOutput == Append(data_queue, pin_msg)
\* _ResumeIteration: the worker acknowledges it, and starts its shard over (iteration_end).
SendsResumeAck == TRUE
ResumeRestartsShard == TRUE

-----------------------------------------------------------------------------
(* The observer. Observe(actor) is the last conjunct of every action (actor: "main",        *)
(* "worker", "pin" or "fault", who takes the step): it writes `observed` from what the step   *)
(* changed, not from what the action meant to do. No action reads `observed` and no hook      *)
(* writes it, so a property over it is broken by a loader bug whatever path the bug takes: a  *)
(* task that appears in an index queue is a send, whether MainTryPutIndex, a restart or a     *)
(* break put it there; a worker that takes a task off its queue and holds it has begun a      *)
(* fetch, whatever loop it runs. Each field is FALSE until the step that breaks its property  *)
(* (sentinel_seen apart: it is sentinel_sent, seen in the queues), so a correct model has the *)
(* state count it has without the observer.                                                   *)

\* A fetch began: w took a task off its index queue and holds it (or hangs in it).
FetchBegan(w) ==
    /\ HeadIs(w, "task")
    /\ Len(index_queues'[w]) < Len(index_queues[w])
    /\ worker_state'[w] \in {"busy", "hung"}
\* A task of epoch e was sent to some worker, by whatever action: it appears at the end of the
\* worker's index queue (a FIFO: every put appends, several at once for a re-send).
TaskSent(e) ==
    \E w \in Workers :
        /\ Len(index_queues'[w]) > Len(index_queues[w])
        /\ \E k \in Len(index_queues[w]) + 1 .. Len(index_queues'[w]) :
              index_queues'[w][k].kind = "task" /\ index_queues'[w][k].epoch = e
\* A None was put into w's queue (nothing is put behind a None: it is the last message).
SentinelPut(w) ==
    /\ Len(index_queues'[w]) > Len(index_queues[w])
    /\ index_queues'[w][Len(index_queues'[w])].kind = "sentinel"
\* The user got a batch (or its error); the user got StopIteration (a call ended, stopped).
HandedOut == Len(delivered') > Len(delivered)
StopRaised == in_call /\ ~in_call' /\ iter_state' = "stopped"
\* The pin thread took a message off a worker's channel.
PinRead(actor) ==
    actor = "pin" /\ \E w \in Workers : Len(worker_result_queue'[w]) < Len(worker_result_queue[w])
\* The pin thread's join returned (it is "joined") while the thread had not ended.
PinJoinedRunning == pin_state' = "joined" /\ pin_state \notin {"exited", "dead", "joined"}
\* The workers were told (workers_done_event set) while the pin thread was not yet joined.
ToldBeforePinJoined ==
    PinMemory /\ ~workers_done_event /\ workers_done_event' /\ pin_state # "joined"
\* A None was put at shutdown while the workers had not been told.
SentinelBeforeTold == shutdown' /\ ~workers_done_event' /\ \E w \in Workers : SentinelPut(w)
\* w's join returned (w is "joined"); w was killed (SIGKILL or terminate()).
Joined(w) == worker_state[w] # "joined" /\ worker_state'[w] = "joined"
Killed(w) == worker_state[w] # "killed" /\ worker_state'[w] = "killed"

Observe(actor) ==
    LET o == observed
        queued == index_queues' # index_queues
        fetch == workers_done_event /\ \E w \in Workers : FetchBegan(w)
        sent == (epoch_over \/ epoch_over') /\ queued /\ epoch' = epoch /\ TaskSent(epoch)
        handed_end == epoch_over /\ HandedOut
        handed_failure == failure # "none" /\ HandedOut
        stopped_failure == failure # "none" /\ StopRaised
        pin_read == workers_done_event /\ PinRead(actor)
        sentinel_told == queued /\ SentinelBeforeTold
        new_sentinel == queued /\ \E w \in Workers : ~o.sentinel_seen[w] /\ SentinelPut(w)
        seen == [w \in Workers |-> o.sentinel_seen[w] \/ (queued /\ SentinelPut(w))]
        lives == worker_state' # worker_state
        joined_early ==
            lives /\ (\E w \in Workers : Joined(w)) /\ (\E v \in Workers : ~seen[v])
        kill == actor = "main" /\ ~shutdown /\ lives /\ \E w \in Workers : Killed(w)
    IN observed' =
        \* (The record is rebuilt only at a step that changes it: TLC evaluates every action's
        \* Observe for ENABLED too, so the common case must be cheap.)
        IF \/ fetch \/ sent \/ handed_end \/ handed_failure \/ stopped_failure \/ pin_read
           \/ PinJoinedRunning \/ ToldBeforePinJoined \/ sentinel_told \/ new_sentinel
           \/ joined_early \/ kill
        THEN [fetch_after_done |-> o.fetch_after_done \/ fetch,
              sent_after_end |-> o.sent_after_end \/ sent,
              handed_after_end |-> o.handed_after_end \/ handed_end,
              handed_after_failure |-> o.handed_after_failure \/ handed_failure,
              stopped_after_failure |-> o.stopped_after_failure \/ stopped_failure,
              pin_read_after_done |-> o.pin_read_after_done \/ pin_read,
              pin_joined_running |-> o.pin_joined_running \/ PinJoinedRunning,
              told_before_pin_joined |-> o.told_before_pin_joined \/ ToldBeforePinJoined,
              sentinel_before_told |-> o.sentinel_before_told \/ sentinel_told,
              joined_before_sentinels |-> o.joined_before_sentinels \/ joined_early,
              sentinel_seen |-> seen,
              loader_killed |->
                 [w \in Workers |-> o.loader_killed[w] \/ (kill /\ Killed(w))]]
        ELSE o

-----------------------------------------------------------------------------
(* The user's calls *)

\* The user calls next() on the iterator: a call begins (it ends when an action returns or
\* raises). On a failed iterator next() raises its error again at once, reading and waiting for
\* nothing: that is not a step (the trace spec takes its record as a stutter). After the end,
\* next() raises StopIteration again (MainStopIteration), once the shutdown has finished.
MainCallNext ==
    /\ parent_alive /\ ~in_call
    /\ \/ iter_state = "running" /\ ~shutdown
       \/ iter_state = "stopped" /\ (~shutdown \/ ShutdownDone)
    /\ in_call' = TRUE
    /\ IF RestartsAfterEnd /\ iter_state = "stopped" /\ ~shutdown
       THEN /\ ResetEpoch  \* a new epoch nobody asked for: no iter(), no resume
            /\ iter_state' = "running"
            /\ UNCHANGED <<epoch, shutdown, resume_iteration_cnt, sentinel_sent, parent_alive>>
            /\ UNCHANGED <<epoch_over, failure, sent_to_retired>>
       ELSE UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                        workers_num_tasks, worker_queue_idx, epoch, shutdown, iter_state,
                        resume_iteration_cnt, sentinel_sent, parent_alive, delivered,
                        assigned, exhausted_at, epoch_over, failure,
                        retired, sent_to_retired>>
    /\ NoteUserAct
    /\ UNCHANGED <<queue_vars, actor_vars>>
    /\ Observe("main")

-----------------------------------------------------------------------------
(* The main process: prefetch and reorder (torch: _try_put_index, _next_data) *)

\* The next active worker from the cursor; with in_order=False also one with capacity.
Eligible(w) ==
    /\ MaySendTo(w)
    /\ InOrder \/ workers_num_tasks[w] < MaxTasks \div ActiveCount
Candidates == {k \in 0 .. NumWorkers - 1 : Eligible((worker_queue_idx + k) % NumWorkers)}
NextWorker == (worker_queue_idx + CHOOSE k \in Candidates : \A j \in Candidates : k <= j)
              % NumWorkers

\* torch calls _try_put_index in _reset's priming loop, after each hand-out and after an
\* exhaustion; here it may happen whenever the window has room (in or between calls).
\* Send task send_idx to the next eligible worker (the variables it sets: SendVars).
MaySend == SamplerHasNext /\ PrefetchRoom /\ Candidates # {}
SendTask ==
    /\ LET w == NextWorker IN
        /\ index_queues' = [index_queues EXCEPT ![w] =
                              Append(@, [kind |-> "task", idx |-> send_idx, epoch |-> epoch])]
        /\ task_info' = task_info @@ (send_idx :> [worker |-> w, data |-> NoMsg])
        /\ workers_num_tasks' = [workers_num_tasks EXCEPT ![w] = @ + 1]
        /\ worker_queue_idx' = (w + 1) % NumWorkers
        /\ assigned' = assigned @@ (send_idx :> w)
        /\ sent_to_retired' = (sent_to_retired \/ retired[w])
    /\ tasks_outstanding' = tasks_outstanding + 1
    /\ send_idx' = send_idx + 1
SendVars == <<index_queues, task_info, workers_num_tasks, worker_queue_idx, assigned,
              sent_to_retired, tasks_outstanding, send_idx>>

MainTryPutIndexStep ==
    /\ MayDispatch
    /\ MaySend
    /\ SendTask
    /\ UNCHANGED <<rcvd_idx, workers_status, epoch, shutdown, iter_state, in_call,
                   resume_iteration_cnt, sentinel_sent, parent_alive>>
    /\ UNCHANGED <<worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event>>
    /\ UNCHANGED <<actor_vars, delivered, exhausted_at, epoch_over, failure,
                   retired, acted_on_live_stop>>
MainTryPutIndex == MainTryPutIndexStep /\ Observe("main")

\* Receive one message: store it in its task's slot (handed out by MainProcessData, or retired
\* by MainMarkWorkerUnavailable). A message matching no outstanding task (a resume ack, or a
\* result of an earlier epoch in a broken loader) is dropped.
MainGetDataStep ==
    /\ Serving
    /\ \E s \in Sources :
        /\ SourceReady(s)
        /\ PopSource(s)
        /\ LET m == SourceHead(s) IN
            IF TakesResult(m)
            THEN /\ task_info' = [task_info EXCEPT ![m.idx].data = m]
                 /\ tasks_outstanding' = tasks_outstanding - 1
            ELSE UNCHANGED <<task_info, tasks_outstanding>>
    /\ UNCHANGED <<send_idx, rcvd_idx, workers_status, workers_num_tasks, worker_queue_idx,
                   epoch, shutdown, iter_state, in_call, resume_iteration_cnt, sentinel_sent,
                   parent_alive>>
    /\ UNCHANGED <<index_queues, workers_done_event, pin_memory_thread_done_event>>
    /\ UNCHANGED <<actor_vars, history_vars>>
MainGetData == MainGetDataStep /\ Observe("main")

\* Hand out task i (its data, or reraise its error): in order, or any with in_order=False.
\* The call returns.
MainProcessDataStep(i) ==
    /\ in_call /\ HandOutGuard
    /\ Buffered(i)
    /\ task_info[i].data.kind \in {"data", "error"}
    /\ MayHandOut(i)
    /\ LET m == task_info[i].data IN
        /\ delivered' = Append(delivered, [idx |-> i, epoch |-> m.epoch, worker |-> m.worker])
        /\ workers_num_tasks' = [workers_num_tasks EXCEPT ![task_info[i].worker] = @ - 1]
    /\ task_info' = AfterHandOut(i)
    /\ rcvd_idx' = IF i = rcvd_idx THEN rcvd_idx + 1 ELSE rcvd_idx
    /\ in_call' = FALSE
    /\ UNCHANGED <<send_idx, tasks_outstanding, workers_status, worker_queue_idx, epoch,
                   shutdown, iter_state, resume_iteration_cnt, sentinel_sent, parent_alive>>
    /\ UNCHANGED <<queue_vars, actor_vars, assigned, exhausted_at, epoch_over, failure, retired,
                   sent_to_retired, acted_on_live_stop>>
MainProcessData(i) == MainProcessDataStep(i) /\ Observe("main")

\* Step rcvd_idx over a slot with nothing to hand out: handed out already (in_order=False) or
\* owned by a retired (exhausted) worker that will send nothing for it.
MainSkipExhaustedStep ==
    /\ Serving
    /\ rcvd_idx < send_idx
    /\ Skippable(rcvd_idx)
    /\ rcvd_idx' = rcvd_idx + 1
    /\ IF rcvd_idx \in DOMAIN task_info
       THEN /\ task_info' = Drop(task_info, rcvd_idx)
            /\ tasks_outstanding' = tasks_outstanding - 1
       ELSE UNCHANGED <<task_info, tasks_outstanding>>
    /\ UNCHANGED <<send_idx, workers_status, workers_num_tasks, worker_queue_idx, epoch,
                   shutdown, iter_state, in_call, resume_iteration_cnt, sentinel_sent,
                   parent_alive>>
    /\ UNCHANGED <<queue_vars, actor_vars, history_vars>>
MainSkipExhausted == MainSkipExhaustedStep /\ Observe("main")

\* An _IterableDatasetStopIteration from w arrived: send w no more tasks this epoch; without
\* persistent workers also tell it to exit (torch: _mark_worker_as_unavailable puts None).
MainMarkWorkerUnavailableStep(w) ==
    /\ Serving
    /\ \E i \in DOMAIN task_info :
        /\ Buffered(i)
        /\ task_info[i].data.kind = "exhausted"
        /\ task_info[i].worker = w
        /\ task_info' = Drop(task_info, i)
    /\ workers_status' = [workers_status EXCEPT ![w] = FALSE]
    /\ IF ~RetireSendsSentinel
       THEN UNCHANGED <<index_queues, sentinel_sent>>
       ELSE /\ index_queues' = [index_queues EXCEPT ![w] =
                                  Append(@, [kind |-> "sentinel", idx |-> NoIdx,
                                             epoch |-> epoch])]
            /\ sentinel_sent' = [sentinel_sent EXCEPT ![w] = TRUE]
    /\ retired' = [retired EXCEPT ![w] = TRUE]
    /\ IF RetireKills /\ Alive(w)
       THEN /\ worker_state' = [worker_state EXCEPT ![w] = "killed"]
            /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
       ELSE UNCHANGED <<worker_state, worker_msg>>
    /\ UNCHANGED <<send_idx, rcvd_idx, tasks_outstanding, workers_num_tasks, worker_queue_idx,
                   epoch, shutdown, iter_state, in_call, resume_iteration_cnt, parent_alive>>
    /\ UNCHANGED <<worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event>>
    /\ UNCHANGED <<iteration_end, pin_state, pin_msg, delivered, assigned, exhausted_at,
                   epoch_over, failure, sent_to_retired, acted_on_live_stop>>
MainMarkWorkerUnavailable(w) == MainMarkWorkerUnavailableStep(w) /\ Observe("main")

\* Nothing left to hand out: raise StopIteration; without persistent workers, shut down. A next()
\* after the end raises StopIteration again.
MainStopIterationStep ==
    /\ in_call /\ parent_alive
    /\ \/ Iterating /\ NothingLeft
       \/ iter_state = "stopped"
    /\ iter_state' = "stopped"
    /\ in_call' = FALSE
    /\ shutdown' = IF iter_state = "stopped" THEN shutdown ELSE StopShutsDown
    /\ epoch_over' = TRUE
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, resume_iteration_cnt,
                   sentinel_sent, parent_alive>>
    /\ UNCHANGED <<queue_vars, actor_vars, delivered, assigned, exhausted_at, failure, retired,
                   sent_to_retired, acted_on_live_stop>>
MainStopIteration == MainStopIterationStep /\ Observe("main")

\* The iterator depends on worker w and w died (not by our own terminate at shutdown).
DependsOnDead(w) ==
    /\ parent_alive
    /\ worker_state[w] = "killed"
    /\ workers_status[w]
    /\ iter_state \in {"running", "resuming"}
    /\ ~shutdown

\* SIGCHLD / the liveness poll, seen inside a call: raise RuntimeError naming w ("exited
\* unexpectedly").
MainDetectWorkerFailureStep(w) ==
    /\ DetectsWorkerDeath
    /\ in_call
    /\ DependsOnDead(w)
    /\ failure' = DeathRaised(w)
    /\ OnWorkerFailure(w)
    /\ UNCHANGED <<send_idx, rcvd_idx, worker_queue_idx, epoch, resume_iteration_cnt,
                   sentinel_sent, parent_alive>>
    /\ UNCHANGED <<data_queue, workers_done_event, pin_memory_thread_done_event>>
    /\ UNCHANGED <<actor_vars, delivered, assigned, exhausted_at, epoch_over,
                   retired, sent_to_retired, acted_on_live_stop>>
MainDetectWorkerFailure(w) == MainDetectWorkerFailureStep(w) /\ Observe("main")

\* Waiting on the pin thread's queue, the main process finds the thread dead (torch: "Pin memory
\* thread exited unexpectedly"): raise, fail-stop.
MainDetectPinFailureStep ==
    /\ DetectsPinDeath
    /\ in_call /\ parent_alive /\ ~shutdown
    /\ iter_state \in {"running", "resuming"}
    /\ pin_state = "dead"
    /\ data_queue = << >>
    /\ iter_state' = "failed"
    /\ shutdown' = TRUE
    /\ in_call' = FALSE
    /\ failure' = "pin"
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, resume_iteration_cnt,
                   sentinel_sent, parent_alive>>
    /\ UNCHANGED <<queue_vars, actor_vars, delivered, assigned, exhausted_at, epoch_over, retired,
                   sent_to_retired, acted_on_live_stop>>
MainDetectPinFailure == MainDetectPinFailureStep /\ Observe("main")

\* next() waits in _get_data: in order, for rcvd_idx's result (its slot outstanding at an active
\* worker, whatever later results are buffered); with in_order=False, for any result while none
\* is buffered; or, in _reset, for the resume acks.
WaitsForData ==
    \/ iter_state = "resuming"
    \/ /\ iter_state = "running"
       /\ IF InOrder
          THEN /\ rcvd_idx \in DOMAIN task_info
               /\ task_info[rcvd_idx].data = NoMsg
               /\ workers_status[task_info[rcvd_idx].worker]
          ELSE /\ tasks_outstanding > 0
               /\ \A i \in DOMAIN task_info : task_info[i].data = NoMsg

\* `timeout` seconds with nothing received while waiting: raise RuntimeError, fail-stop. torch
\* checks for dead workers before it reports a timeout: a death it can see wins.
MainTimeoutStep ==
    /\ WithTimeout
    /\ in_call /\ parent_alive /\ ~shutdown
    /\ WaitsForData
    /\ InputEmpty
    /\ ~(DetectsWorkerDeath /\ \E w \in Workers : DependsOnDead(w))
    /\ OnTimeout
    /\ in_call' = FALSE
    /\ failure' = "timeout"
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, resume_iteration_cnt,
                   sentinel_sent, parent_alive>>
    /\ UNCHANGED <<index_queues, worker_result_queue, data_queue, pin_memory_thread_done_event,
                   actor_vars, delivered, assigned, exhausted_at, epoch_over, retired,
                   sent_to_retired, acted_on_live_stop>>
MainTimeout == MainTimeoutStep /\ Observe("main")

\* Persistent workers, a new iter(loader) after StopIteration or a break: _reset sends
\* _ResumeIteration to every worker and waits, inside iter(), for as many acks.
MainResumeIteration ==
    /\ Persistent
    /\ parent_alive /\ ~shutdown /\ ~in_call
    /\ iter_state \in {"stopped", "dropped"}
    /\ epoch + 1 < NumEpochs
    /\ epoch' = epoch + 1
    /\ index_queues' = [w \in Workers |->
                          Append(index_queues[w], [kind |-> "resume", idx |-> NoIdx,
                                                   epoch |-> epoch + 1])]
    /\ ResetEpoch
    /\ resume_iteration_cnt' = ResumeAcksAwaited
    /\ iter_state' = IF ResumeAcksAwaited = 0 THEN "running" ELSE "resuming"
    /\ in_call' = (ResumeAcksAwaited > 0)
    /\ epoch_over' = FALSE
    /\ UNCHANGED <<shutdown, sentinel_sent, parent_alive, failure,
                   sent_to_retired, acted_on_live_stop>>
    /\ UNCHANGED <<worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event>>
    /\ UNCHANGED actor_vars
    /\ Observe("main")

\* _reset's loop: read one message; a resume ack counts, anything else (a result of the epoch
\* that was broken off) is dropped. The last ack starts the epoch and iter() returns.
MainDrainResumeStep ==
    /\ in_call /\ parent_alive /\ ~shutdown
    /\ iter_state = "resuming"
    /\ \E s \in Sources :
        /\ SourceReady(s)
        /\ PopSource(s)
        /\ LET ack == SourceHead(s).kind = "resume"
               left == IF ack THEN resume_iteration_cnt - 1 ELSE resume_iteration_cnt
           IN /\ resume_iteration_cnt' = left
              /\ iter_state' = IF left = 0 THEN "running" ELSE "resuming"
              /\ in_call' = (left > 0)
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, shutdown, sentinel_sent,
                   parent_alive>>
    /\ UNCHANGED <<index_queues, workers_done_event, pin_memory_thread_done_event>>
    /\ UNCHANGED <<actor_vars, history_vars>>
MainDrainResume == MainDrainResumeStep /\ Observe("main")

\* The user breaks off between calls (break, del it, an exception in the loop body) or drops
\* the loader. Persistent workers survive a break mid-epoch; everything else starts the shutdown
\* (a failed iterator has started it already, unless a broken loader raised without it).
MainDropIterator ==
    /\ parent_alive /\ ~shutdown /\ ~in_call
    /\ iter_state \in {"running", "stopped", "dropped", "failed"}
    /\ IF Persistent /\ iter_state = "running"
       THEN /\ iter_state' = "dropped"
            /\ UNCHANGED <<shutdown, sentinel_sent>>
            /\ IF DropRefills /\ MaySend THEN SendTask ELSE UNCHANGED SendVars
       ELSE /\ shutdown' = TRUE
            /\ iter_state' = IF iter_state = "running" THEN "dropped" ELSE iter_state
            /\ IF DropSendsNone
               THEN /\ index_queues' =
                          [w \in Workers |->
                             IF sentinel_sent[w] THEN index_queues[w]
                             ELSE Append(index_queues[w], [kind |-> "sentinel", idx |-> NoIdx,
                                                           epoch |-> epoch])]
                    /\ sentinel_sent' = [w \in Workers |-> TRUE]
               ELSE UNCHANGED <<index_queues, sentinel_sent>>
            /\ UNCHANGED <<task_info, workers_num_tasks, worker_queue_idx, assigned,
                           sent_to_retired, tasks_outstanding, send_idx>>
    /\ epoch_over' = TRUE
    /\ NoteUserAct
    /\ UNCHANGED <<rcvd_idx, workers_status, epoch, in_call, resume_iteration_cnt, parent_alive>>
    /\ UNCHANGED <<worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, actor_vars, delivered, exhausted_at, failure,
                   retired>>
    /\ Observe("main")

-----------------------------------------------------------------------------
(* The main process: shutdown, in the NOTE's order (torch: _shutdown_workers) *)

MainSetPinDoneStep ==
    /\ parent_alive /\ shutdown /\ PinMemory
    /\ ~pin_memory_thread_done_event
    /\ PinShutdownMayStart
    /\ pin_memory_thread_done_event' = TRUE
    /\ UNCHANGED <<main_vars, index_queues, worker_result_queue, data_queue,
                   workers_done_event, actor_vars, history_vars>>
MainSetPinDone == MainSetPinDoneStep /\ Observe("main")

\* The pin thread has ended (told to, or dead): join returns.
MainJoinPinThreadStep ==
    /\ parent_alive /\ pin_memory_thread_done_event
    /\ PinJoinReturns
    /\ pin_state' = "joined"
    /\ UNCHANGED <<main_vars, queue_vars, worker_state, worker_msg, iteration_end, pin_msg,
                   past_vars>>
MainJoinPinThread == MainJoinPinThreadStep /\ Observe("main")

MainSetWorkersDoneStep ==
    /\ parent_alive /\ shutdown
    /\ ~workers_done_event
    /\ WorkersShutdownMayStart
    /\ workers_done_event' = TRUE
    /\ UNCHANGED <<main_vars, index_queues, worker_result_queue, data_queue,
                   pin_memory_thread_done_event, actor_vars, past_vars>>
MainSetWorkersDone == MainSetWorkersDoneStep /\ Observe("main")

MainPutSentinelStep(w) ==
    /\ parent_alive /\ SentinelMayGo
    /\ ~sentinel_sent[w]
    /\ index_queues' = [index_queues EXCEPT ![w] =
                          IF SendsSentinel
                          THEN Append(@, [kind |-> "sentinel", idx |-> NoIdx, epoch |-> epoch])
                          ELSE @]
    /\ sentinel_sent' = [sentinel_sent EXCEPT ![w] = TRUE]
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, shutdown, iter_state, in_call,
                   resume_iteration_cnt, parent_alive>>
    /\ UNCHANGED <<worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, actor_vars, past_vars>>
MainPutSentinel(w) == MainPutSentinelStep(w) /\ Observe("main")

MainJoinWorkerStep(w) ==
    /\ parent_alive /\ workers_done_event /\ JoinMayStart
    /\ worker_state[w] \in {"exited", "killed"}
    /\ worker_state' = [worker_state EXCEPT ![w] = "joined"]
    /\ UNCHANGED <<main_vars, queue_vars, worker_msg, iteration_end, pin_state, pin_msg,
                   past_vars>>
MainJoinWorker(w) == MainJoinWorkerStep(w) /\ Observe("main")

\* w.join(timeout) returned with w alive (slow, stuck, hung, or blocked on a full channel that
\* nobody reads any more): w.terminate().
MainTerminateWorkerStep(w) ==
    /\ TerminatesStragglers
    /\ parent_alive /\ workers_done_event /\ JoinMayStart
    /\ Alive(w)
    /\ worker_state' = [worker_state EXCEPT ![w] = "killed"]
    /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
    /\ UNCHANGED <<main_vars, queue_vars, iteration_end, pin_state, pin_msg, history_vars>>
MainTerminateWorker(w) == MainTerminateWorkerStep(w) /\ Observe("main")

-----------------------------------------------------------------------------
(* Workers (torch: _worker_loop) *)

PopIndex(w) == index_queues' = [index_queues EXCEPT ![w] = Tail(@)]
Fetchable(w) ==
    /\ worker_state[w] = "idle"
    /\ HeadIs(w, "task")
    /\ ~SkipsTask(w)

\* Run the fetcher on the next task: data, or (IterableDataset) the end of w's shard.
WorkerFetchStep(w) ==
    /\ Fetchable(w)
    /\ PopIndex(w)
    /\ LET t == Head(index_queues[w]) IN
        \E kind \in IF Iterable THEN {"data", "exhausted"} ELSE {"data"} :
            /\ worker_msg' = [worker_msg EXCEPT ![w] =
                                [kind |-> kind, idx |-> t.idx, worker |-> w, epoch |-> t.epoch]]
            /\ IF kind = "exhausted"
               THEN /\ iteration_end' = [iteration_end EXCEPT ![w] = TRUE]
                    /\ exhausted_at' = IF t.epoch = epoch
                                       THEN [exhausted_at EXCEPT ![w] = t.idx]
                                       ELSE exhausted_at
               ELSE UNCHANGED <<iteration_end, exhausted_at>>
    /\ worker_state' = [worker_state EXCEPT ![w] = "busy"]
    /\ UNCHANGED <<main_vars, worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, pin_state, pin_msg, delivered, assigned,
                   epoch_over, failure, retired, sent_to_retired,
                   acted_on_live_stop>>
WorkerFetch(w) == WorkerFetchStep(w) /\ Observe("worker")

\* Put the result on w's channel; with the channel full, w waits (blocked in the pipe write).
WorkerPutStep(w) ==
    /\ worker_state[w] = "busy"
    /\ HasRoom(w)
    /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = Append(@, worker_msg[w])]
    /\ IF PutTakesNext /\ HeadIs(w, "task")
       THEN /\ PopIndex(w)
            /\ worker_msg' = [worker_msg EXCEPT ![w] =
                                [kind |-> "data", idx |-> Head(index_queues[w]).idx,
                                 worker |-> w, epoch |-> Head(index_queues[w]).epoch]]
            /\ UNCHANGED worker_state
       ELSE /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
            /\ worker_state' = [worker_state EXCEPT ![w] = "idle"]
            /\ UNCHANGED index_queues
    /\ UNCHANGED <<main_vars, data_queue, workers_done_event,
                   pin_memory_thread_done_event, iteration_end, pin_state, pin_msg,
                   history_vars>>
WorkerPut(w) == WorkerPutStep(w) /\ Observe("worker")

WorkerAckResumeStep(w) ==
    /\ worker_state[w] = "idle"
    /\ HeadIs(w, "resume")
    /\ HasRoom(w)
    /\ PopIndex(w)
    /\ worker_result_queue' = IF SendsResumeAck
                              THEN [worker_result_queue EXCEPT ![w] =
                                      Append(@, [kind |-> "resume", idx |-> NoIdx, worker |-> w,
                                                 epoch |-> Head(index_queues[w]).epoch])]
                              ELSE worker_result_queue
    /\ iteration_end' = [iteration_end EXCEPT ![w] = IF ResumeRestartsShard THEN FALSE ELSE @]
    /\ UNCHANGED <<main_vars, data_queue, workers_done_event, pin_memory_thread_done_event,
                   worker_state, worker_msg, pin_state, pin_msg, history_vars>>
WorkerAckResume(w) == WorkerAckResumeStep(w) /\ Observe("worker")

WorkerSkipIndexStep(w) ==
    /\ worker_state[w] = "idle"
    /\ HeadIs(w, "task")
    /\ SkipsTask(w)
    /\ PopIndex(w)
    /\ UNCHANGED <<main_vars, worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, actor_vars, history_vars>>
WorkerSkipIndex(w) == WorkerSkipIndexStep(w) /\ Observe("worker")

WorkerExitStep(w) ==
    /\ worker_state[w] = "idle"
    /\ HeadIs(w, "sentinel")
    /\ PopIndex(w)
    /\ worker_state' = [worker_state EXCEPT ![w] = "exited"]
    /\ UNCHANGED <<main_vars, worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, worker_msg, iteration_end, pin_state,
                   pin_msg, history_vars>>
WorkerExit(w) == WorkerExitStep(w) /\ Observe("worker")

\* The parent is gone: exit on our own, whatever we were doing (a correct loader: PDEATHSIG
\* or a watchdog thread; torch's ManagerWatchdog only checks between tasks).
WorkerWatchdogExitStep(w) ==
    /\ ~parent_alive
    /\ worker_state[w] \in WatchdogStates
    /\ worker_state' = [worker_state EXCEPT ![w] = "exited"]
    /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
    /\ UNCHANGED <<main_vars, queue_vars, iteration_end, pin_state, pin_msg, history_vars>>
WorkerWatchdogExit(w) == WorkerWatchdogExitStep(w) /\ Observe("worker")

-----------------------------------------------------------------------------
(* The pin-memory thread (torch: _pin_memory_loop) *)

PinGetResultStep ==
    /\ parent_alive
    /\ pin_state = "running"
    /\ ~pin_memory_thread_done_event
    /\ \E w \in Workers :
        /\ worker_result_queue[w] # << >>
        /\ pin_msg' = Head(worker_result_queue[w])
        /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = Tail(@)]
    /\ pin_state' = "holding"
    /\ UNCHANGED <<main_vars, index_queues, data_queue, workers_done_event,
                   pin_memory_thread_done_event, worker_state, worker_msg, iteration_end,
                   delivered, assigned, exhausted_at, epoch_over, failure, retired, sent_to_retired,
                   acted_on_live_stop>>
PinGetResult == PinGetResultStep /\ Observe("pin")

PinPutDataStep ==
    /\ parent_alive
    /\ pin_state = "holding"
    /\ ~pin_memory_thread_done_event
    /\ data_queue' = PinOutput
    /\ pin_msg' = NoMsg
    /\ pin_state' = "running"
    /\ UNCHANGED <<main_vars, index_queues, worker_result_queue, workers_done_event,
                   pin_memory_thread_done_event, worker_state, worker_msg, iteration_end,
                   history_vars>>
PinPutData == PinPutDataStep /\ Observe("pin")

\* The done event is set: the loop ends (a held result is dropped; the wake-up put and the
\* get timeout only bound how soon the thread notices).
PinExitStep ==
    /\ parent_alive
    /\ pin_state \in {"running", "holding"}
    /\ pin_memory_thread_done_event
    /\ pin_state' = "exited"
    /\ pin_msg' = NoMsg
    /\ UNCHANGED <<main_vars, queue_vars, worker_state, worker_msg, iteration_end,
                   past_vars>>
PinExit == PinExitStep /\ Observe("pin")

-----------------------------------------------------------------------------
(* Faults, each switched by its constant *)

FaultKillWorker(w) ==
    /\ WithKillWorker
    /\ Alive(w)
    /\ worker_state' = [worker_state EXCEPT ![w] = "killed"]
    /\ worker_msg' = [worker_msg EXCEPT ![w] = NoMsg]
    /\ UNCHANGED <<main_vars, queue_vars, iteration_end, pin_state, pin_msg, history_vars>>
    /\ Observe("fault")

\* SIGKILL of the loader's process: the main thread and the pin thread are gone at once.
FaultKillParent ==
    /\ WithKillParent
    /\ parent_alive
    /\ parent_alive' = FALSE
    /\ pin_state' = IF pin_state \in {"running", "holding"} THEN "exited" ELSE pin_state
    /\ pin_msg' = NoMsg
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, shutdown, iter_state, in_call,
                   resume_iteration_cnt, sentinel_sent>>
    /\ UNCHANGED <<queue_vars, worker_state, worker_msg, iteration_end, history_vars>>
    /\ Observe("fault")

\* w takes its next task and its fetch never returns.
FaultHangWorker(w) ==
    /\ WithHang
    /\ Fetchable(w)
    /\ PopIndex(w)
    /\ worker_state' = [worker_state EXCEPT ![w] = "hung"]
    /\ UNCHANGED <<main_vars, worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, worker_msg, iteration_end, pin_state,
                   pin_msg, past_vars>>
    /\ Observe("fault")

\* w's fetch raises: the worker wraps it (ExceptionWrapper) and goes on.
FaultFetchError(w) ==
    /\ WithFetchError
    /\ Fetchable(w)
    /\ PopIndex(w)
    /\ LET t == Head(index_queues[w]) IN
        worker_msg' = [worker_msg EXCEPT ![w] =
                         [kind |-> "error", idx |-> t.idx, worker |-> w, epoch |-> t.epoch]]
    /\ worker_state' = [worker_state EXCEPT ![w] = "busy"]
    /\ UNCHANGED <<main_vars, worker_result_queue, data_queue, workers_done_event,
                   pin_memory_thread_done_event, iteration_end, pin_state, pin_msg,
                   past_vars>>
    /\ Observe("fault")

\* w's fetched batch cannot be sent (it does not pickle; torch's feeder thread dies on it,
\* pytorch#142884): what the worker does instead is OnPutError.
FaultPutError(w) ==
    /\ WithPutError
    /\ worker_state[w] = "busy"
    /\ worker_msg[w].kind = "data"
    /\ OnPutError(w)
    /\ UNCHANGED <<main_vars, queue_vars, iteration_end, pin_state, pin_msg, history_vars>>
    /\ Observe("fault")

\* Inside a call, the main process's read of w's channel fails (fd exhaustion: "received 0
\* items of ancdata"; a result that cannot be unpickled): the message is lost, next() raises.
FaultRecvError(w) ==
    /\ WithRecvError /\ ~PinMemory
    /\ in_call /\ parent_alive /\ ~shutdown
    /\ iter_state \in {"running", "resuming"}
    /\ worker_result_queue[w] # << >>
    /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = Tail(@)]
    /\ OnRecvError
    /\ in_call' = FALSE
    /\ failure' = "recv"
    /\ UNCHANGED <<send_idx, rcvd_idx, task_info, tasks_outstanding, workers_status,
                   workers_num_tasks, worker_queue_idx, epoch, resume_iteration_cnt,
                   sentinel_sent, parent_alive>>
    /\ UNCHANGED <<index_queues, data_queue, workers_done_event, pin_memory_thread_done_event,
                   actor_vars, delivered, assigned, exhausted_at, epoch_over,
                   retired, sent_to_retired, acted_on_live_stop>>
    /\ Observe("fault")

\* The pin thread's read of w's channel raises and the exception escapes its loop (torch F4: a
\* shared-memory rebuild error): the message is lost, the thread is dead.
FaultPinDeath(w) ==
    /\ WithPinDeath
    /\ parent_alive
    /\ pin_state = "running"
    /\ ~pin_memory_thread_done_event
    /\ worker_result_queue[w] # << >>
    /\ worker_result_queue' = [worker_result_queue EXCEPT ![w] = Tail(@)]
    /\ pin_state' = "dead"
    /\ UNCHANGED <<main_vars, index_queues, data_queue, workers_done_event,
                   pin_memory_thread_done_event, worker_state, worker_msg, iteration_end,
                   pin_msg, past_vars>>
    /\ Observe("fault")

-----------------------------------------------------------------------------
(* The end of a run, and the specification *)

\* Nothing is left to do: shut down completely, or the parent died and its workers with it.
Ended == (parent_alive /\ ShutdownDone /\ ~in_call) \/ (~parent_alive /\ AllWorkersGone)

Terminated == Ended /\ UNCHANGED vars

MainNext ==
    \/ MainCallNext
    \/ MainTryPutIndex \/ MainGetData \/ \E i \in 0 .. NumTasks - 1 : MainProcessData(i)
    \/ MainSkipExhausted \/ \E w \in Workers : MainMarkWorkerUnavailable(w)
    \/ MainStopIteration \/ \E w \in Workers : MainDetectWorkerFailure(w)
    \/ MainDetectPinFailure
    \/ MainTimeout \/ MainResumeIteration \/ MainDrainResume \/ MainDropIterator
    \/ MainSetPinDone \/ MainJoinPinThread \/ MainSetWorkersDone
    \/ \E w \in Workers : MainPutSentinel(w) \/ MainJoinWorker(w) \/ MainTerminateWorker(w)

WorkerNext(w) ==
    \/ WorkerFetch(w) \/ WorkerPut(w) \/ WorkerAckResume(w) \/ WorkerSkipIndex(w)
    \/ WorkerExit(w) \/ WorkerWatchdogExit(w)

PinNext == PinGetResult \/ PinPutData \/ PinExit

FaultNext ==
    \/ FaultKillParent
    \/ \E w \in Workers : FaultKillWorker(w) \/ FaultHangWorker(w) \/ FaultFetchError(w)
    \/ \E w \in Workers : FaultPutError(w) \/ FaultRecvError(w) \/ FaultPinDeath(w)

\* Every step but the stuttering of an ended run.
Progress == MainNext \/ (\E w \in Workers : WorkerNext(w)) \/ PinNext \/ FaultNext

Next == Progress \/ Terminated

(* Fairness: every step of the loader's own code that stays possible is eventually taken.     *)
(* The user's choices (MainCallNext, MainDropIterator, MainResumeIteration) and the faults are *)
(* not fair: a user may stop calling next() at any point. The bounded join may time out on any *)
(* worker (MainTerminateWorker is enabled for every live one: a loaded machine), but it is     *)
(* fair only for a stuck worker: one that cannot get to its sentinel by itself, hung in a fetch *)
(* or blocked writing to a channel nobody reads any more. A worker that can exit must be able  *)
(* to: ShutdownCompletes does not follow from killing it.                                      *)
Stuck(w) ==
    \/ worker_state[w] = "hung"
    \/ worker_state[w] = "busy" /\ ~HasRoom(w)
    \/ worker_state[w] = "idle" /\ HeadIs(w, "resume") /\ ~HasRoom(w)

\* The fair steps are the actions without their Observe (the XStep definitions): ENABLED and
\* <<A>>_v, which TLC evaluates at every state and edge for each condition, then skip the
\* observer, and `observed` is left out of the subscript (it changes only with the rest). On a
\* behaviour of Spec every step satisfies Observe, so the fairness is the actions'.
fair_vars == <<main_vars, queue_vars, actor_vars, history_vars>>
WorkerStep(w) ==
    \/ WorkerFetchStep(w) \/ WorkerPutStep(w) \/ WorkerAckResumeStep(w) \/ WorkerSkipIndexStep(w)
    \/ WorkerExitStep(w) \/ WorkerWatchdogExitStep(w)
Fairness ==
    /\ WF_fair_vars(MainTryPutIndexStep) /\ WF_fair_vars(MainGetDataStep)
    /\ WF_fair_vars(\E i \in 0 .. NumTasks - 1 : MainProcessDataStep(i))
    /\ WF_fair_vars(MainSkipExhaustedStep)
    /\ WF_fair_vars(\E w \in Workers : MainMarkWorkerUnavailableStep(w))
    /\ WF_fair_vars(MainStopIterationStep) /\ WF_fair_vars(MainTimeoutStep)
    /\ WF_fair_vars(MainDrainResumeStep)
    /\ \A w \in Workers : WF_fair_vars(MainDetectWorkerFailureStep(w))
    /\ WF_fair_vars(MainDetectPinFailureStep)
    /\ WF_fair_vars(MainSetPinDoneStep) /\ WF_fair_vars(MainJoinPinThreadStep)
    /\ WF_fair_vars(MainSetWorkersDoneStep)
    /\ \A w \in Workers : WF_fair_vars(MainPutSentinelStep(w))
    /\ \A w \in Workers : WF_fair_vars(MainJoinWorkerStep(w))
    /\ \A w \in Workers : WF_fair_vars(MainTerminateWorkerStep(w) /\ Stuck(w))
    /\ \A w \in Workers : WF_fair_vars(WorkerStep(w))
    /\ WF_fair_vars(PinGetResultStep) /\ WF_fair_vars(PinPutDataStep) /\ WF_fair_vars(PinExitStep)

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants (loaderspec.vocabulary.PROPERTIES, Check.INVARIANT): each a consequence of     *)
(* several actions read off the history, not a restatement of one action's guard.            *)

DeliveredIdx == {delivered[k].idx : k \in DOMAIN delivered}
Deliveries(i) == Cardinality({k \in DOMAIN delivered : delivered[k].idx = i})
\* Task i was retired by IterableDataset exhaustion: its worker's shard had ended by then.
Retired(i) == exhausted_at[assigned[i]] # NoIdx /\ i >= exhausted_at[assigned[i]]

\* "with in_order=True, batches are handed out in sampler order"
InOrderDelivery ==
    InOrder => \A j, k \in DOMAIN delivered : j < k => delivered[j].idx < delivered[k].idx

\* No task is handed out twice within an epoch, in either ordering mode.
NoDuplicateDelivery ==
    \A j, k \in DOMAIN delivered : j # k => delivered[j].idx # delivered[k].idx

\* An epoch that ended in StopIteration handed out every task once, except those retired by
\* exhaustion; a map-style epoch sent the whole sampler; an IterableDataset epoch ended only
\* once every shard had ended (unless a worker's death was reported, or at the model's cut of
\* the sampler, which torch's infinite sampler never reaches).
ExactlyOnce ==
    iter_state = "stopped" =>
        /\ ~Iterable => send_idx = NumTasks
        /\ (Iterable /\ SamplerHasNext /\ failure = "none") =>
              \A w \in Workers : exhausted_at[w] # NoIdx
        /\ \A i \in 0 .. send_idx - 1 : Deliveries(i) = IF Retired(i) THEN 0 ELSE 1

\* Where the main process's wait for task i of this epoch can still end: the task queued for
\* its worker, being fetched (or hung in the fetch), or its result on the way (a channel, the pin
\* thread, the data queue).
QueuedFor(w, kind, i) ==
    \E k \in DOMAIN index_queues[w] :
        index_queues[w][k].kind = kind /\ index_queues[w][k].idx = i
        /\ index_queues[w][k].epoch = epoch
\* A message queued for a worker that has exited (the loader sent it None) is never read: it is
\* not on its way.
QueuedForLive(w, kind, i) == QueuedFor(w, kind, i) /\ ~Gone(worker_state[w])
TaskOnItsWay(i) ==
    LET w == task_info[i].worker IN
    \/ QueuedForLive(w, "task", i)
    \/ worker_state[w] = "busy" /\ worker_msg[w].idx = i /\ worker_msg[w].epoch = epoch
    \/ worker_state[w] = "hung"
    \/ \E m \in InFlight : m.kind # "resume" /\ m.idx = i /\ m.epoch = epoch
\* The same for worker w's acknowledgement of this epoch's _ResumeIteration.
AckOnItsWay(w) ==
    \/ QueuedForLive(w, "resume", NoIdx)
    \/ \E m \in InFlight : m.kind = "resume" /\ m.worker = w /\ m.epoch = epoch
\* The main process awaits a message for task i: its result, or (the task at which the worker's
\* shard ended) its end-of-shard message; not one the worker dropped after its shard ended.
Awaited(i) == ~Retired(i) \/ i = exhausted_at[task_info[i].worker]
\* Nothing the epoch waits for is lost on its way unless the worker that held it died (killed) or
\* the pin thread died (a death that is raised); a worker's hang holds its task (TaskOnItsWay).
\* A worker that exited because the loader sent it None excuses nothing, and a message queued for
\* it is not on its way: a lost task, result, end-of-shard message or resume acknowledgement is
\* a violation here, whatever a timeout would later make of the wait.
\* Died: killed by a fault (SIGKILL, the OOM killer): not by the loader itself before its
\* shutdown (observed.loader_killed: a kill in a step of the main process's), which excuses nothing.
Died(w) == worker_state[w] = "killed" /\ ~observed.loader_killed[w]
NothingLostOnTheWay ==
    (parent_alive /\ ~shutdown /\ pin_state # "dead") =>
        /\ iter_state = "running" =>
              \A i \in DOMAIN task_info :
                  (task_info[i].data = NoMsg /\ ~Died(task_info[i].worker) /\ Awaited(i))
                      => TaskOnItsWay(i)
        /\ iter_state = "resuming" =>
              resume_iteration_cnt <= Cardinality({w \in Workers : Died(w) \/ AckOnItsWay(w)})

\* No task is passed over: every task rcvd_idx has moved past was handed out (its batch or its
\* error) or retired by its worker's exhaustion. Holds at every step, not only at the end. And
\* none is lost on its way (NothingLostOnTheWay): a timeout does not excuse a loss.
NoSilentLoss ==
    /\ \A i \in 0 .. rcvd_idx - 1 : i \in DeliveredIdx \/ Retired(i)
    /\ NothingLostOnTheWay

\* torch's docs: "prefetch_factor: number of batches loaded in advance by each worker ... a
\* total of 2 * num_workers batches prefetched across all workers": at most that many batches
\* exist at any time, counted wherever they are (held by a worker, in a channel, at the pin
\* thread, in the data queue, in the reorder buffer), whatever their epoch or task: a batch of a
\* past epoch, of a task nobody waits for or a second batch of one task takes memory too.
IsBatch(m) == m.kind \in {"data", "error"}
BatchesIn(q) == Cardinality({k \in DOMAIN q : IsBatch(q[k])})
RECURSIVE ChannelBatches(_)
ChannelBatches(n) ==  \* in the channels of workers 0 .. n - 1
    IF n = 0 THEN 0 ELSE BatchesIn(worker_result_queue[n - 1]) + ChannelBatches(n - 1)
BatchesThatExist ==
    Cardinality({i \in DOMAIN task_info : Buffered(i) /\ IsBatch(task_info[i].data)})
    + Cardinality({w \in Workers : worker_state[w] = "busy" /\ IsBatch(worker_msg[w])})
    + ChannelBatches(NumWorkers) + BatchesIn(data_queue) + (IF IsBatch(pin_msg) THEN 1 ELSE 0)
PrefetchBound == BatchesThatExist <= MaxTasks

\* Nothing is handed out in an epoch after it ended in StopIteration or was broken off: next()
\* after the end raises StopIteration again until a new iter() starts the next epoch. Read off
\* the observed hand-outs (delivered growing, by whatever path) after the user's end.
NoDeliveryAfterShutdown == ~observed.handed_after_end

\* A batch fetched for an earlier epoch is never handed out in a later one.
NoStaleEpochDelivery == \A k \in DOMAIN delivered : delivered[k].epoch = epoch

\* SHOULD: "Exit pin_memory_thread first because exiting workers may leave corrupted data in
\* worker_result_queue which pin_memory_thread reads from" - the NOTE calls the other order
\* "slow", not wrong: the pin thread never takes a message off a worker's channel after
\* workers_done_event, in any of its steps (observed, whatever told the workers).
PinThreadExitsFirst == ~observed.pin_read_after_done

\* SHOULD: after next() raised a fatal error (a worker's death, a timeout, a failed read, the pin
\* thread's death), every later next() raises: nothing is handed out, no StopIteration. Read off
\* the observed hand-outs and StopIterations after the error (`failure`, what was raised). The
\* MUST beside it says what a drained error loses: the dead worker's tasks (NoSilentLoss).
FailStopAfterFatalError == ~observed.handed_after_failure /\ ~observed.stopped_after_failure

\* Nothing is sent for an epoch that has ended (StopIteration or a break), by any path: a task of
\* that epoch appearing in an index queue (observed), whether MainTryPutIndex, a restart or a
\* break put it there. A prefetch left running after a break breaks it.
NoDispatchAfterEnd == ~observed.sent_after_end

\* SHOULD: "workers_done_event ... After it is set, they will not send processed data to queues
\* anymore, and only wait for the final None before exiting" - "it allows us to skip wasting
\* resources processing indices already in index_queue": no worker takes a new index to fetch
\* after the done event, in whatever loop it runs (observed: a task taken off its queue and
\* held); a fetch under way may finish and be put.
NoFetchAfterDone == ~observed.fetch_after_done

\* SHOULD: the NOTE's order of _shutdown_workers, read off the steps as they happened (observed,
\* whichever action took them): the pin thread's join returns only once the thread has ended
\* (b.iii); with a pin thread, the workers are told only after it was joined ((c) after (b));
\* and no None is put at shutdown before the done event is set ("set these done_events and then
\* [send] a None", c.i before c.ii).
ShutdownOrder ==
    ~observed.pin_joined_running /\ ~observed.told_before_pin_joined
    /\ ~observed.sentinel_before_told

\* SHOULD: the workers are joined only after every sentinel went out (c.iii after c.ii): a join
\* of a worker still waiting for its None can only time out, and the worker is then killed,
\* a healthy one, after a stall of the join's timeout (FAILURE-MODES A1, B6). Read off the
\* steps as they happened: no join returned before a None had appeared in every worker's queue.
JoinAfterSentinels == ~observed.joined_before_sentinels

\* SHOULD, a guard regression test (the fail-stop hooks set `shutdown`): once next() raised a
\* fatal error, the iterator has started its shutdown (and ShutdownCompletes ends it): a loader
\* that raises and leaves its workers running until the iterator is dropped breaks it (B4).
\* NoWorkerOutlivesFailure (MUST, temporal) is its partner, read off the workers themselves.
FatalErrorShutsDown == failure # "none" => shutdown

\* MUST (torch's _next_data calls _shutdown_workers() and then raises StopIteration): a
\* non-persistent iterator's StopIteration reaches the user only once its workers and its pin
\* thread are joined. Read off the user's steps: no next() and no break after such a
\* StopIteration found a worker or the pin thread not yet joined (a loader that leaves them
\* running until the iterator is dropped breaks it).
StopIterationAfterShutdown == ~acted_on_live_stop

\* No task is sent to a worker the epoch has retired (its end-of-shard message arrived and was
\* acted on): read off the sends and the retirements as they happened (retired, recorded where
\* the end-of-shard message is acted on, not the workers_status the round robin reads). Such a
\* task is dropped by its worker, its slot skipped: a slot of the window spent on nothing.
NoTaskToRetiredWorker == ~sent_to_retired

\* TLC's deadlock check (Check.DEADLOCK): Terminated is the only step of an ended run, so a
\* state without successors is one that is stuck before its end. As a formula:
NoDeadlock == Ended \/ ENABLED Progress

-----------------------------------------------------------------------------
(* Temporal properties (Check.TEMPORAL), checked under Fairness *)

\* Every next() (and iter() of a persistent loader) returns, raises StopIteration or raises an
\* error, unless a worker hangs and no timeout is set (the user asked for no bound).
IterationTerminates ==
    (WithHang /\ ~WithTimeout) \/ (in_call ~> (~in_call \/ ~parent_alive))

\* The part of WorkerDeathRaises that holds at every step (TLC names its violation by this name:
\* <Property>Always, which loaderspec.tlc reads as the property's). A death is never hidden: a
\* worker is retired only by the end of its shard or after its death
\* was raised (never swallowed), and every batch handed out is the batch of the worker its task
\* was sent to (a dead worker's task is never re-sent to another behind the user's back: it is
\* raised, or raised in its turn as an error).
WorkerDeathRaisesAlways ==
    /\ \A w \in Workers : ~workers_status[w] => exhausted_at[w] # NoIdx \/ failure = "death"
    /\ \A k \in DOMAIN delivered :
          delivered[k].idx \in DOMAIN assigned => delivered[k].worker = assigned[delivered[k].idx]

\* A next() during which a worker the iterator depends on is dead does not hang and does not
\* end in a timeout: it returns, or raises an error that is not a timeout (the worker's death,
\* or another fatal error found first), unless the worker turns out to have finished its shard
\* (retired by its exhaustion message). A timeout does not discharge a death; nor is the death
\* hidden (WorkerDeathRaisesAlways, at every step).
WorkerDeathRaises ==
    /\ []WorkerDeathRaisesAlways
    /\ \A w \in Workers :
          (in_call /\ DependsOnDead(w))
              ~> (failure \notin {"none", "timeout"} \/ ~parent_alive \/ ~workers_status[w]
                  \/ (~in_call /\ iter_state # "failed"))

\* SHOULD: "prefetch_factor: number of batches loaded in advance by each worker" - the window
\* is prefetch_factor * num_workers, and it fills: between the user's calls (when nothing is
\* handed out), while the epoch runs, the sampler has indices and an active worker can take one,
\* tasks are sent until the window is full. PrefetchBound is the upper bound; this is the lower.
WindowHasRoom == Cardinality(DOMAIN task_info) < MaxTasks
PrefetchWindowFills ==
    (~in_call /\ Iterating /\ SamplerHasNext /\ Candidates # {} /\ WindowHasRoom)
        ~> (in_call \/ ~Iterating \/ ~SamplerHasNext \/ Candidates = {} \/ ~WindowHasRoom)

\* Once shutdown starts, every worker and the pin thread are eventually gone.
ShutdownCompletes == shutdown ~> (ShutdownDone \/ ~parent_alive)

\* MUST: the workers of an iterator that failed (every later next() raises its error) are
\* eventually gone, though the user keeps the iterator and never calls it again: read off the
\* workers, not off `shutdown`. What is lost otherwise: the worker processes, their shared
\* memory and every batch they fetched or go on fetching (up to the window), held for nobody
\* until the iterator is dropped; a hung worker's fetch is never reclaimed (B4).
NoWorkerOutlivesFailure == iter_state = "failed" ~> (AllWorkersGone \/ ~parent_alive)

\* After the loader's process dies, every worker exits, busy, blocked and hung ones included.
NoOrphanWorkers == (~parent_alive) ~> AllWorkersGone

(* PromptFaultHandling (SHOULD, Check.MEASURED) is a wall-clock bound: the conformance suite *)
(* measures it; TLC has no clock, so it has no formula here.                                *)
=============================================================================
