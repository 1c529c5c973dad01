----------------------------- MODULE MCInductive -----------------------------
(***************************************************************************)
(* An inductive invariant of DataLoader, checked by TLC (docs/spec.md,     *)
(* "Any number of workers"). IndInv describes a state by where each task   *)
(* of the window is: per worker, its tasks (sampler order, round robin) are *)
(* a run of handed-over results in the reorder buffer, a run in its result *)
(* channel, at most one being fetched (or lost with the worker, if it was  *)
(* killed), a run dropped after the done event, and a run still queued.    *)
(* IndSpec starts from every state of IndInv (TLC enumerates them: IndInv  *)
(* is written so that each variable is chosen, or computed, before it is   *)
(* read) and takes Next's steps: TLC checking IndInv (and every invariant  *)
(* of the vocabulary) from there checks IndInv /\ Next => IndInv' and     *)
(* IndInv => the safety properties, for the model's constants.             *)
(* The shape it covers (ASSUME): map-style, in order, not persistent, no   *)
(* pin thread, channels without a bound; a worker may be killed and a      *)
(* timeout may fire (the fatal errors whose fail-stop it states).          *)
(***************************************************************************)
EXTENDS DataLoader

ASSUME /\ NumWorkers <= 3 /\ ~Iterable /\ InOrder /\ ~Persistent /\ ~PinMemory /\ ResultCapacity = 0
       /\ ~WithKillParent /\ ~WithHang /\ ~WithFetchError /\ ~WithPutError /\ ~WithRecvError
       /\ ~WithPinDeath

\* Worker w's tasks of the window (rcvd_idx .. send_idx - 1), in sampler order: the round robin
\* of in-order map-style sends task i to worker i % NumWorkers.
First(w) == rcvd_idx + ((w - rcvd_idx) % NumWorkers)
Own(w) == [k \in 1 .. IF First(w) < send_idx THEN (send_idx - 1 - First(w)) \div NumWorkers + 1
                      ELSE 0 |-> First(w) + (k - 1) * NumWorkers]

\* A worker's view: how many of its tasks are buffered (b), in its channel (c), held by the fetch
\* (f: being fetched, or lost with the killed worker), dropped after the done event (s); the rest
\* are queued. Its life: "live" (idle or busy), "exited" (took its None), "killed", or joined
\* after either; sentinel: its None was put.
Lives == {"live", "exited", "killed", "joined exited", "joined killed"}
View == [b : 0 .. PrefetchFactor, c : 0 .. PrefetchFactor, f : 0 .. 1, s : 0 .. PrefetchFactor,
         life : Lives, sentinel : BOOLEAN]
Queued(v, n) == n - v.b - v.c - v.f - v.s
\* The views worker w may have, given the done event, whether every None was put, and its own.
\* A worker is killed by a fault (WithKillWorker) or by the bounded join's terminate().
Views(w, done, allsent, sent) ==
    LET n == Len(Own(w)) IN
    {v \in View :
        /\ v.sentinel = sent
        /\ Queued(v, n) >= 0
        /\ v.s > 0 => done /\ v.f = 0
        /\ v.life \in {"exited", "joined exited"} => sent /\ Queued(v, n) = 0 /\ v.f = 0
        /\ v.life \in {"joined exited", "joined killed"} => allsent
        /\ v.life \in {"killed", "joined killed"} => WithKillWorker \/ (done /\ allsent)}
\* The same for a worker the model does not have (NumWorkers < 3): one placeholder view.
ViewsOf(w, done, allsent, sent) ==
    IF w < NumWorkers THEN Views(w, done, allsent, sent)
    ELSE {[b |-> 0, c |-> 0, f |-> 0, s |-> 0, life |-> "live", sentinel |-> FALSE]}

DataMsg(i) == [kind |-> "data", idx |-> i, worker |-> i % NumWorkers, epoch |-> 0]
Task(i) == [kind |-> "task", idx |-> i, epoch |-> 0]
Sentinel == [kind |-> "sentinel", idx |-> NoIdx, epoch |-> 0]
\* The k-th .. l-th tasks of w's window, as a sequence of f(i).
Run(w, k, l, f(_)) == [j \in 1 .. l - k + 1 |-> f(First(w) + (k + j - 2) * NumWorkers)]
InBuffer(i, view) ==
    LET w == i % NumWorkers IN (i - First(w)) \div NumWorkers + 1 <= view[w].b

\* The state's fields, given the views.
QueueOf(w, v) ==
    LET n == Len(Own(w)) IN
    Run(w, n - Queued(v, n) + 1, n, Task)
    \o (IF v.sentinel /\ v.life \notin {"exited", "joined exited"} THEN <<Sentinel>> ELSE << >>)
StateOf(w, v) ==
    CASE v.life = "live" -> IF v.f = 1 THEN "busy" ELSE "idle"
      [] v.life = "exited" -> "exited"
      [] v.life = "killed" -> "killed"
      [] OTHER -> "joined"

IndInv ==
    /\ send_idx \in 0 .. NumTasks
    /\ rcvd_idx \in 0 .. send_idx
    /\ send_idx - rcvd_idx <= MaxTasks
    /\ iter_state \in {"running", "stopped", "failed", "dropped"}
    /\ iter_state = "stopped" => rcvd_idx = NumTasks
    /\ shutdown = (iter_state # "running")
    /\ failure \in IF iter_state = "failed"
                   THEN (IF WithKillWorker THEN {"death"} ELSE {})
                        \cup (IF WithTimeout THEN {"timeout"} ELSE {})
                   ELSE {"none"}
    /\ epoch_over = (iter_state \in {"stopped", "dropped"})
    /\ workers_done_event \in IF shutdown THEN BOOLEAN ELSE {FALSE}
    /\ sentinel_sent \in IF workers_done_event THEN [Workers -> BOOLEAN]
                         ELSE {[w \in Workers |-> FALSE]}
    /\ LET done == workers_done_event
           allsent == \A w \in Workers : sentinel_sent[w]
           Sent(w) == w < NumWorkers /\ sentinel_sent[w]
       IN
       \E v0 \in ViewsOf(0, done, allsent, Sent(0)), v1 \in ViewsOf(1, done, allsent, Sent(1)),
          v2 \in ViewsOf(2, done, allsent, Sent(2)) :
        LET view == [w \in Workers |-> CASE w = 0 -> v0 [] w = 1 -> v1 [] OTHER -> v2] IN
        /\ index_queues = [w \in Workers |-> QueueOf(w, view[w])]
        /\ worker_result_queue =
              [w \in Workers |-> Run(w, view[w].b + 1, view[w].b + view[w].c, DataMsg)]
        /\ worker_state = [w \in Workers |-> StateOf(w, view[w])]
        /\ worker_msg = [w \in Workers |->
                           IF worker_state[w] = "busy"
                           THEN DataMsg(Own(w)[view[w].b + view[w].c + 1]) ELSE NoMsg]
        /\ task_info = [i \in rcvd_idx .. send_idx - 1 |->
                          [worker |-> i % NumWorkers,
                           data |-> IF InBuffer(i, view) THEN DataMsg(i) ELSE NoMsg]]
    /\ in_call \in BOOLEAN
    /\ in_call => iter_state = "running" \/ (iter_state = "stopped" /\ ShutdownDone)
    /\ tasks_outstanding = Cardinality({i \in DOMAIN task_info : task_info[i].data = NoMsg})
    /\ workers_status = [w \in Workers |-> TRUE]
    /\ workers_num_tasks = [w \in Workers |-> Len(Own(w))]
    /\ worker_queue_idx = send_idx % NumWorkers
    /\ epoch = 0 /\ resume_iteration_cnt = 0 /\ parent_alive = TRUE
    /\ data_queue = << >> /\ pin_memory_thread_done_event = FALSE
    /\ iteration_end = [w \in Workers |-> FALSE] /\ pin_state = "none" /\ pin_msg = NoMsg
    /\ delivered = [k \in 1 .. rcvd_idx |-> [idx |-> k - 1, epoch |-> 0,
                                             worker |-> (k - 1) % NumWorkers]]
    /\ assigned = [i \in 0 .. send_idx - 1 |-> i % NumWorkers]
    /\ exhausted_at = [w \in Workers |-> NoIdx]
    /\ retired = [w \in Workers |-> FALSE]
    /\ sent_to_retired = FALSE /\ acted_on_live_stop = FALSE
    /\ observed = [NothingObserved EXCEPT !.sentinel_seen = sentinel_sent]

IndSpec == IndInv /\ [][Next]_vars

\* For tests/spec (the check must be able to fail): the window one task larger, the off-by-one of
\* MCBroken's BrokenPrefetchRoom. From a state of IndInv with a full window, MainTryPutIndex then
\* leaves IndInv.
WindowOneLarger == Cardinality(DOMAIN task_info) <= MaxTasks
=============================================================================
