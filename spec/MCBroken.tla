------------------------------ MODULE MCBroken ------------------------------
(***************************************************************************)
(* Broken loaders: each definition below replaces one HOOK of DataLoader  *)
(* (`CONSTANT Hook <- Broken...` in a spec/broken/*.cfg), and TLC must    *)
(* report exactly the property that the mistake breaks. Several are what  *)
(* torch does or did; the comment names the release or the seed.          *)
(***************************************************************************)
EXTENDS DataLoader

\* TypeOK: the sampler's end is never checked, so send_idx runs past B.
BrokenSamplerHasNext == TRUE

\* PrefetchBound: off by one, one task more than prefetch_factor * num_workers in flight.
BrokenPrefetchRoom == tasks_outstanding <= MaxTasks

\* InOrderDelivery: no reorder buffer; whatever arrives is handed out, in_order or not.
BrokenMayHandOut(i) == TRUE

\* NoDuplicateDelivery: the slot is not popped after its batch is handed out.
BrokenAfterHandOut(i) == task_info

\* ExactlyOnce: StopIteration as soon as nothing is pending, without asking the sampler.
BrokenNothingLeft == rcvd_idx = send_idx

\* NoDeliveryAfterShutdown: buffered batches are still handed out after shutdown began.
BrokenHandOutGuard == parent_alive

\* NoStaleEpochDelivery: a new epoch starts without draining the resume acknowledgements,
\* so results of the epoch that was broken off are taken for the new epoch's tasks.
BrokenResumeAcksAwaited == 0

\* NoSilentLoss, FailStopAfterWorkerDeath: torch's reaction to a dead worker. _try_get_data
\* raises "exited unexpectedly" but only marks the worker unavailable; the iterator goes on
\* handing out other workers' batches and later skips the dead worker's slots as if exhausted.
TorchOnWorkerFailure(w) ==
    /\ workers_status' = [workers_status EXCEPT ![w] = FALSE]
    /\ UNCHANGED <<iter_state, shutdown>>

\* WorkerDeathRaises: no SIGCHLD handler and no liveness poll: a death goes unnoticed.
BrokenDetectsWorkerDeath == FALSE

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
-----------------------------------------------------------------------------
(* Reachability witnesses, not broken loaders: tests/spec checks each as an invariant and    *)
(* expects TLC to report it violated, i.e. that the state it denies is reachable.           *)

\* Trace-check finding (docs/contracts.md): next() times out waiting for rcvd_idx's result
\* while later tasks' results are already buffered in order.
NoTimeoutWhileBuffered == ~(ENABLED MainTimeout /\ \E i \in DOMAIN task_info : Buffered(i))
=============================================================================
