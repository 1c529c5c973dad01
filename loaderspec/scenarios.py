"""Fault scenarios generated from the spec, replayed against a loader, and spec action coverage.

Owns: the small models whose state graphs TLC dumps (``-dump dot,actionlabels``), choosing
behaviours in them (for every spec action, the shortest behaviour that takes it; plus seeded
random walks), turning each behaviour into a ``Schedule`` (which worker dies at which task,
when the iterator is dropped or the loader's process killed, how many epochs run), replaying
schedules through the conformance suite's driver against the reference loader or any other
loader class (``replay_scenarios``), which of the suite's property checks apply to a replay
(``violations``: the suite's oracle, not a second one), and the coverage figure: the share of
spec actions, fault actions included, that the runs' validated traces exercised.

The translation from a spec behaviour to a schedule reads each step's parameters off the two
states it joins (TLC labels steps with the action's name only). It is faithful where the
loader's observable moves are concerned (the task a fault hits, the number of ``next()`` calls
before a break or a kill, the epochs, the shards' lengths); interleavings inside the loader are
the loader's, so which actions a replay really exercised is read off its trace, not assumed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from loaderspec.faultinject.events import Error
from loaderspec.faultinject.faults import Hang
from loaderspec.manifest import default_constants, spec_dir
from loaderspec.replay import HANG_S, REFERENCE, TIMEOUT_S, Replay, Schedule, play
from loaderspec.stategraph import Edge, Graph, dump_graph, random_walk, shortest_path_taking
from loaderspec.tlavalues import parse
from loaderspec.tracecompile import BASE_SPEC
from loaderspec.traces import IteratorTrace
from loaderspec.vocabulary import CONFIG_CONSTANT, Action

# The models (small enough that TLC dumps each graph in seconds); together they reach every
# action. Each is the manifest's defaults (every fault off) with what it needs switched on.
MODELS: dict[str, dict[str, str]] = {
    "faults": default_constants(
        NumTasks=1,
        WithKillWorker=True,
        WithKillParent=True,
        WithHang=True,
        WithFetchError=True,
        WithTimeout=True,
    ),
    "pin": default_constants(NumWorkers=1, NumTasks=1, PinMemory=True, WithPinDeath=True),
    "errors": default_constants(NumWorkers=1, NumTasks=1, WithPutError=True, WithRecvError=True),
    "iterable": default_constants(NumTasks=2, Iterable=True),
    "persistent": default_constants(NumWorkers=1, NumTasks=1, Persistent=True, NumEpochs=2),
}
ALL_ACTIONS: frozenset[str] = frozenset(a.value for a in Action)
# The steps that end a next() call: it returned a batch, or raised.
A = Action
_ENDS_A_CALL = frozenset(
    {
        A.MAIN_PROCESS_DATA,
        A.MAIN_DETECT_WORKER_FAILURE,
        A.MAIN_DETECT_PIN_FAILURE,
        A.MAIN_TIMEOUT,
        A.FAULT_RECV_ERROR,
    }
)


@dataclass(frozen=True)
class Scenario:
    """A behaviour of a model and the schedule that replays it."""

    model: str
    actions: tuple[str, ...]  # the behaviour's steps, by action name
    schedule: Schedule


@cache
def graph(model: str) -> Graph:
    """The state graph of one of ``MODELS`` (dumped once per process)."""
    return dump_graph(spec_dir() / f"{BASE_SPEC}.tla", MODELS[model])


def _moved(before: dict[str, Any], after: dict[str, Any], var: str) -> list[Any]:
    """The keys of the function ``var`` whose value changed in a step."""
    old, new = before[var], after[var]
    return [k for k in new if old.get(k) != new[k]] if isinstance(new, dict) else []


def _head_task(state: dict[str, Any], worker: Any) -> int | None:
    queue = state["index_queues"][worker]
    return queue[0]["idx"] if queue and queue[0]["kind"] == "task" else None


def schedule_of(model: str, path: Sequence[Edge], name: str) -> Schedule:
    """The schedule that replays a behaviour of ``model`` (see the module docstring)."""
    g, consts = graph(model), MODELS[model]
    num_tasks = int(consts["NumTasks"])
    # The loader's arguments, by torch's names (and ``iterable``).
    loader = {field: parse(consts[constant]) for field, constant in CONFIG_CONSTANT.items()}
    num_workers: int = loader["num_workers"]
    faults: list[Any] = []
    epochs, nexts = 1, 0
    drop_at = kill_parent_at = None
    timeout = 0.0
    fetched = [0] * num_workers
    shards: list[int | None] = [None] * num_workers
    for step in path:
        before, after = g.state(step.source), g.state(step.target)
        action = Action(step.action)
        running = before["iter_state"] == "running"
        if action in _ENDS_A_CALL:
            nexts += 1  # one next() returned a batch, or raised
        if action is A.MAIN_RESUME_ITERATION:
            epochs, nexts = epochs + 1, 0
        elif action is A.MAIN_DROP_ITERATOR and drop_at is None and running:
            drop_at = (epochs - 1, nexts)
        elif action is A.FAULT_KILL_PARENT and kill_parent_at is None:
            kill_parent_at = (epochs - 1, nexts)
        elif action is A.WORKER_FETCH:
            (w,) = _moved(before, after, "worker_state")
            if after["worker_msg"][w]["kind"] == "exhausted" and shards[w] is None:
                shards[w] = fetched[w]
            fetched[w] += 1
        elif action in (A.FAULT_KILL_WORKER, A.FAULT_HANG_WORKER, A.FAULT_FETCH_ERROR):
            (w,) = _moved(before, after, "worker_state")
            faults.append(_fault(action, before, w))
            if action is A.FAULT_HANG_WORKER:
                timeout = TIMEOUT_S  # a hang must not stall the replay
        elif action is A.FAULT_PUT_ERROR:
            (w,) = _moved(before, after, "worker_msg")
            faults.append(_item_fault(action, before["worker_msg"][w]["idx"]))
        elif action in (A.FAULT_RECV_ERROR, A.FAULT_PIN_DEATH):
            (w,) = _moved(before, after, "worker_result_queue")
            faults.append(_item_fault(action, before["worker_result_queue"][w][0]["idx"]))
        if action is A.MAIN_TIMEOUT:
            timeout = TIMEOUT_S
            if not any(isinstance(f, Hang) for f in faults):
                faults.append(_slow(before["rcvd_idx"]))
    iterable: bool = loader["iterable"]
    return Schedule(
        name=name,
        num_workers=num_workers,
        num_items=num_tasks,
        shard_lengths=tuple(n if n is not None else num_tasks for n in shards)
        if iterable
        else None,
        prefetch_factor=loader["prefetch_factor"],
        in_order=loader["in_order"],
        persistent_workers=loader["persistent_workers"],
        pin_memory=loader["pin_memory"],
        epochs=epochs,
        timeout=timeout,
        faults=tuple(faults),
        drop_at=drop_at,
        kill_parent_at=kill_parent_at,
        # The loader's own thread decides how workers learn of its death (reference/worker.py:
        # PDEATHSIG follows the forking thread); from another thread, the watchdog's exit is
        # logged (WorkerWatchdogExit), where the kernel's SIGKILL cannot be.
        in_thread=kill_parent_at is not None,
        note=f"{model}: " + " ".join(s.action for s in path),
    )


def _fault(action: Action, before: dict[str, Any], worker: Any) -> Any:
    """The faultinject fault for a fault step of ``worker``: at the task it takes next, or (an
    idle worker with nothing queued, or one busy putting) at the task it holds / got first."""
    from loaderspec.faultinject.faults import Die, DiePoint, Raise

    task = _head_task(before, worker)
    point: DiePoint = "before_fetch"
    if task is None and before["worker_state"][worker] == "busy":
        task, point = before["worker_msg"][worker]["idx"], "after_fetch"
    if task is None or task < 0:
        task = 0
    if action is A.FAULT_KILL_WORKER:
        return Die(at=task, point=point, once=True)
    if action is A.FAULT_HANG_WORKER:
        return Hang(at=task, seconds=HANG_S, once=True)
    return Raise(at=task)


def _item_fault(action: Action, task: int) -> Any:
    """The faultinject fault whose item makes the put (FaultPutError) or the read
    (FaultRecvError, FaultPinDeath) of task ``task``'s result fail."""
    from loaderspec.faultinject.faults import Unloadable, Unpicklable

    return Unpicklable(at=task) if action is A.FAULT_PUT_ERROR else Unloadable(at=task)


def _slow(task: int) -> Any:
    """A fetch that outlasts the timeout (a timeout without a hang)."""
    from loaderspec.faultinject.faults import Sleep

    return Sleep(at=max(0, task), seconds=TIMEOUT_S * 1.5, once=True)


def covering_scenarios(actions: Iterable[str] = sorted(ALL_ACTIONS)) -> list[Scenario]:
    """For every action, the shortest behaviour (of the first model that has one) taking it;
    behaviours whose schedules coincide are replayed once."""
    out: list[Scenario] = []
    seen: set[Schedule] = set()
    for action in actions:
        for model in MODELS:
            path = shortest_path_taking(graph(model), action)
            if path is None:
                continue
            schedule = schedule_of(model, path, f"spec/{model}/{action}")
            key = replace(schedule, name="", note="")
            if key not in seen:
                seen.add(key)
                out.append(Scenario(model, tuple(s.action for s in path), schedule))
            break
    return out


def random_scenarios(seed: int, count: int) -> list[Scenario]:
    """``count`` seeded random behaviours, round robin over the models."""
    rng = random.Random(seed)
    out = []
    models = list(MODELS)
    for i in range(count):
        model = models[i % len(models)]
        path = random_walk(graph(model), rng)
        name = f"spec/{model}/walk{seed}-{i}"
        out.append(Scenario(model, tuple(s.action for s in path), schedule_of(model, path, name)))
    return out


def replay_scenarios(
    scenarios: Sequence[Scenario],
    loader: str | type = REFERENCE,
    *,
    trace_root: Path | None = None,
    deadline_s: float = 60.0,
) -> list[Replay]:
    """Replay each scenario against a loader class (or "pkg.mod:Class"), black-box; with
    ``trace_root`` each run traces into its own folder below it (the reference loader)."""
    replays = []
    for i, scenario in enumerate(scenarios):
        trace_dir = None if trace_root is None else trace_root / f"scenario{i:03d}"
        replays.append(play(scenario.schedule, loader, trace_dir=trace_dir, deadline_s=deadline_s))
    return replays


def _expected_items(s: Schedule) -> set[int]:
    """The items a map-style epoch of ``s`` hands out when it ends in StopIteration: all but the
    batches whose fetch raised an injected error, or whose put failed and sent its error in
    their place (sequential sampler)."""
    from loaderspec.faultinject.faults import Raise, RaiseUnrebuildable, Unpicklable

    raised = {
        f.at // s.batch_size
        for f in s.faults
        if isinstance(f, Raise | RaiseUnrebuildable | Unpicklable)
        and getattr(f, "point", "in_fetch") == "in_fetch"
    }
    return {i for i in range(s.num_items) if i // s.batch_size not in raised}


def violations(replay: Replay) -> list[str]:
    """What a correct loader must show on this replay and did not (empty: all good).

    Graded by the conformance suite's own property checks (``conformance.harness.checks``),
    those that apply to the schedule: the run ends (IterationTerminates) and leaves nothing
    behind (ShutdownCompletes); workers outlive a killed parent by a bounded time
    (NoOrphanWorkers); a worker death is raised (WorkerDeathRaises); a map-style epoch that ran
    to StopIteration handed out every item once (ExactlyOnce, NoDuplicateDelivery), in order
    where asked (InOrderDelivery), injected errors raised in their place. SHOULD-level
    deviations (NON-STRICT) are not violations.
    """
    from loaderspec.conformance.harness import checks
    from loaderspec.conformance.harness.grading import Grade
    from loaderspec.faultinject.faults import Die

    s, r = replay.schedule, replay.run
    grade = Grade(collect=True)
    checks.ended(grade, r)
    if s.kill_parent_at is not None:
        checks.orphans_exit(grade, r, "workers")
        return grade.violations
    checks.nothing_left(grade, r)
    for epoch in range(s.epochs):
        if not s.iterable:
            checks.each_once(grade, r, _expected_items(s), epoch)
            if s.in_order:
                checks.in_order(grade, r, epoch)
    if any(isinstance(f, Die) for f in s.faults) and s.drop_at is None:
        injected = {"InjectedError"}  # Raise's default type: the scenario's, not the death's
        deaths = (e.epoch for e in r.of(None, Error) if e.type not in injected)
        died = next((epoch for epoch in deaths if epoch is not None), 0)
        checks.death_reported(grade, r, died, ignore=injected)
    return grade.violations


def _spec_step(record: Any) -> str:
    if record.action == Action.WORKER_FETCH.value and record.kind == "error":
        return Action.FAULT_FETCH_ERROR.value
    return record.action


def coverage(runs: Iterable[IteratorTrace]) -> tuple[frozenset[str], float]:
    """The spec actions that the (validated) runs' records exercised, and their share. A
    ``WorkerFetch`` of kind "error" is the spec's ``FaultFetchError`` step (the fault's own
    record, when it announces it, is dropped: ``loaderspec.traces.normalise``)."""
    seen = frozenset(_spec_step(r) for run in runs for r in run.records) & ALL_ACTIONS
    return seen, len(seen) / len(ALL_ACTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loaderspec.scenarios [--loader pkg.mod:Class] [--random SEED COUNT]``: replay
    the spec's scenarios against a loader, black-box, and print what each one broke. Exit 0 iff
    nothing was broken. Against the reference loader the traces are validated too, and the spec
    action coverage is printed."""
    import argparse
    import tempfile

    from loaderspec import tracecheck

    parser = argparse.ArgumentParser(prog="python -m loaderspec.scenarios")
    parser.add_argument("--loader", default=REFERENCE, help=f"default {REFERENCE}")
    parser.add_argument("--random", nargs=2, type=int, metavar=("SEED", "COUNT"))
    args = parser.parse_args(argv)
    found = covering_scenarios()
    if args.random:
        found += random_scenarios(*args.random)
    failed: set[str] = set()
    traced = args.loader == REFERENCE
    with tempfile.TemporaryDirectory(prefix="loaderspec-scenarios-") as tmp:
        replays = replay_scenarios(found, args.loader, trace_root=Path(tmp) if traced else None)
        for replay in replays:
            problems = violations(replay)
            if problems:
                failed.add(replay.schedule.name)
            print(f"{'FAIL' if problems else 'ok  '} {replay.schedule.name} ({replay.outcome})")
            for problem in problems:
                print(f"       {problem}")
        if traced:
            runs = tracecheck.runs_of([r.trace_dir for r in replays if r.trace_dir is not None])
            verdicts = tracecheck.check_runs(runs)
            for verdict in verdicts:
                if not verdict.ok:
                    failed.add(verdict.run.name)
                    print(verdict.explain())
            seen, share = coverage(v.run for v in verdicts if v.ok)
            print(f"spec action coverage: {len(seen)}/{len(ALL_ACTIONS)} ({share:.0%})")
    print(f"{len(found)} scenarios against {args.loader}: {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
