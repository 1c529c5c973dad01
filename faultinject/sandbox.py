"""Run a scenario in a child process of its own session, under a deadline; report and reap
everything it left behind.

`run(target, *args, deadline_s=..., **kwargs)` starts a child (forked from this process by
default, or a fresh interpreter with `start="spawn"`) that calls `os.setsid()`, so the scenario and
every process it starts share a session id equal to the child's pid, whoever becomes their parent
later. The harness waits for the child (bounded: startup, then `deadline_s`), then finds what is
left: session members still alive (and, for shared memory, every pid seen in the child's process
tree while it ran), waits up to `orphan_grace_s` for them to exit on their own (timing each
through a pidfd), SIGKILLs the rest by pid and reaps them.

Orphans: PID 1 may not reap (in this project's VMs it does not), and a process re-parented to it
stays a zombie forever. While a run is in progress the harness therefore makes itself a child
subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux): orphans of the scenario are re-parented to the
harness, which reaps them. It restores the previous setting when the run ends; during a run, an
orphan from anywhere else in this process's tree would also come to us, and is reaped only if it is
a member of the sandbox's session (other children are never waited for).

Fds and threads are measured by the child itself at target start (or at `mark_baseline()`) and
end (after dropping the return value and one `gc.collect()`, as torch's tests do); the processes
the target started get `linger_s` to exit, then the child counts its unreaped children as zombies
before anything could reap them (nothing in the child waits for them; the harness reaps only
after the child is gone). Inside the target, `note(payload)` streams a message to the harness at
once (`report.notes`), so a scenario that hangs past its deadline still leaves a record.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil
from loaderspec.faultinject import _child, _wire, processes

__all__ = [
    "SandboxError",
    "SandboxReport",
    "kill_self",
    "mark_baseline",
    "note",
    "run",
    "set_linger",
]

kill_self = _child.kill_self
note = _child.note
mark_baseline = _child.mark_baseline
set_linger = _child.set_linger

Outcome = Literal["returned", "raised", "deadline", "killed"]

SHM_DIR = Path("/dev/shm")
# How often the harness samples the child's process tree while waiting (for shm attribution and
# orphan detection); the wait itself wakes on the child's messages and exit, not on this.
_SAMPLE_S = 0.05
_CMD_MAX = 160  # a named process's command line, cut to this many characters
# Bounds for steps that should be instant; a breach is reported, never waited out.
_REAP_S = 5.0
_HELPER_EXIT_S = 2.0  # a resource tracker whose clients are gone cleans up in milliseconds
_STDERR_MAX = 64 << 10


class SandboxError(RuntimeError):
    """The sandbox itself could not run (the child never started, a bad target)."""


@dataclass
class SandboxReport:
    """What happened in one `run`, and what it left behind (all of it reaped since).

    outcome: "returned" (the target returned, the child exited within the deadline), "raised"
        (the target raised, `error` has the traceback; also a child that exited with no result),
        "deadline" (the target, or the child's exit after it, outlived `deadline_s`; the child and
        its session were SIGKILLed), "killed" (the child died by a signal, `killed_by_signal`,
        e.g. `kill_self()`).
    value: the target's return value (also with "deadline" if the target had returned).
    leftover_pids: processes of the session still alive after the child ended and
        `orphan_grace_s` passed (with "deadline": alive when the deadline passed); all SIGKILLed.
    zombies: exited, unreaped processes: the child's own zombie descendants at target end, and
        session members found as zombies afterwards (their parent never reaped them).
    orphans: session members alive when the child ended whose parent was no longer in the
        session (re-parented to init or to this harness).
    orphan_exit_s: pid -> seconds from the child's death to that process's exit, for every
        session member alive when the child ended (None: still alive after `orphan_grace_s`).
    leaked_shm: /dev/shm entries created during the run, named with a pid of the sandbox's
        process tree (torch's `torch_<pid>_...`; a process forked in the child counts however
        briefly it lived: it announced its pid at the fork) or seen mapped or open in one of its
        processes (`/proc/<pid>/maps`, `/proc/<pid>/fd`: Python's `psm_<hex>`, whose name has no
        pid), still there after reaping; removed afterwards unless `run(...,
        remove_leaked_shm=False)`.
    unattributed_shm: other new /dev/shm entries (neither named with a pid of the run nor seen
        in use by it: may be another test's).
    leaked_fds, leaked_threads: opened / started by the target and still open / alive at its end.
    lingering: processes the target started that were still alive `linger_s` after it returned
        (multiprocessing's helpers aside); they were then left to the child's exit and the orphan
        watch (`leftover_pids`, `orphan_exit_s`).
    notes: the payloads of the target's `note()` calls, in order.
    exit_s: seconds from the target's end to the child's exit (interpreter shutdown).
    named: pid -> one line saying what each process left behind was (`name`), so that a FAIL
        tells a leak from a flake: its command line, its parent, when it started, and which of
        the loader's workers it was, or that it was none.
    """

    outcome: Outcome
    value: Any = None
    error: str | None = None
    elapsed_s: float = 0.0
    leftover_pids: list[int] = field(default_factory=list)
    zombies: list[int] = field(default_factory=list)
    orphans: list[int] = field(default_factory=list)
    leaked_shm: list[str] = field(default_factory=list)
    leaked_fds: list[str] = field(default_factory=list)
    leaked_threads: list[str] = field(default_factory=list)
    killed_by_signal: int | None = None
    orphan_exit_s: dict[int, float | None] = field(default_factory=dict)
    exit_code: int | None = None
    exit_s: float | None = None
    pid: int = 0
    seen_pids: list[int] = field(default_factory=list)
    helpers: list[int] = field(default_factory=list)
    unattributed_shm: list[str] = field(default_factory=list)
    stderr: str = ""
    lingering: list[int] = field(default_factory=list)
    notes: list[Any] = field(default_factory=list)
    named: dict[int, str] = field(default_factory=dict)

    def name(self, pid: int) -> str:
        """What process `pid` was, in one line (`named`), or that the sandbox never saw it."""
        return self.named.get(pid, f"pid {pid}: never seen by the sandbox")

    @property
    def clean(self) -> bool:
        """Nothing left behind: no process, zombie, shm entry, fd or thread."""
        return not (
            self.leftover_pids
            or self.lingering
            or self.zombies
            or self.leaked_shm
            or self.leaked_fds
            or self.leaked_threads
        )

    def leftovers(self) -> str:
        """One line naming what was left behind ("" when clean), for assertion messages."""
        parts = [
            f"{name}={value}"
            for name, value in (
                ("leftover_pids", self.leftover_pids),
                ("lingering", self.lingering),
                ("zombies", self.zombies),
                ("leaked_shm", self.leaked_shm),
                ("leaked_fds", self.leaked_fds),
                ("leaked_threads", self.leaked_threads),
            )
            if value
        ]
        return ", ".join(parts)


# --------------------------------------------------------------------------- process helpers


def _default_hooks() -> None:
    """Give a forked child the interpreter's default exception hooks: a harness such as pytest
    replaces them to collect errors, and the child's must reach its stderr, as in a script."""
    sys.excepthook = sys.__excepthook__
    sys.unraisablehook = sys.__unraisablehook__
    threading.excepthook = threading.__excepthook__


def _session(sid: int) -> dict[int, psutil.Process]:
    """Every process whose session id is `sid` (zombies included)."""
    out = {}
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid:
                out[p.pid] = p
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out


def _wait_child(pid: int, pidfd: int, timeout_s: float) -> int | None:
    """Reap our child `pid`, waiting at most `timeout_s` for it to exit; its status, or None."""
    select.select([pidfd], [], [], timeout_s)
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    return status if done == pid else None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_zombie(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except OSError:
        return set()


def _shm_users(pids: list[int]) -> set[str]:
    """Names of the /dev/shm entries that processes `pids` hold open or map."""
    prefix = f"{SHM_DIR}/"
    out: set[str] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith(prefix):
                        out.add(link[len(prefix) :].removesuffix(" (deleted)"))
        with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                at = line.find(prefix)
                if at >= 0:
                    out.add(line[at + len(prefix) :].rstrip("\n").removesuffix(" (deleted)"))
    return out


# A pid in a /dev/shm name is a whole token of digits (torch's `torch_<pid>_<n>_<k>`), never
# digits inside a random hex token (Python's `psm_51aeb826`, whose 51 or 826 may be any pid).
_INT = re.compile(r"(?<![0-9A-Za-z])\d+(?![0-9A-Za-z])")


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Identity:
    """A process of the run as first seen: enough to say later what it was."""

    pid: int
    ppid: int
    started: float  # psutil's create_time (seconds since the epoch)
    cmdline: str


def _identity(p: psutil.Process) -> Identity | None:
    try:
        with p.oneshot():
            return Identity(p.pid, p.ppid(), p.create_time(), " ".join(p.cmdline()))
    except psutil.Error:
        return None


def _role(ident: Identity | None, ids: dict[int, Identity], loader_pid: int) -> str:
    """Which process of the loader `ident` was: its own, worker k (the k-th process the loader's
    process started, helpers aside, by start time), a worker's child, a helper, or none."""
    if ident is None:
        return "not a worker of this loader: never seen in the loader's process tree"
    if ident.pid == loader_pid:
        return "the loader's process itself"
    if processes.is_mp_helper_command(ident.cmdline):
        return "a multiprocessing helper (resource tracker or fork server), not a worker"
    if ident.ppid == loader_pid:
        started = sorted(
            (i.started, i.pid)
            for i in ids.values()
            if i.ppid == loader_pid and not processes.is_mp_helper_command(i.cmdline)
        )
        k = [pid for _, pid in started].index(ident.pid)
        return f"worker {k} of this loader (process {k + 1} of {len(started)} it started)"
    if ident.ppid in ids:
        parent = _role(ids[ident.ppid], ids, loader_pid)
        return f"started by {ident.ppid} ({parent}), not a worker itself"
    return f"not a worker of this loader (its parent {ident.ppid} was never in its tree)"


def _named(ident: Identity | None, pid: int, ids: dict[int, Identity], r: _Run) -> str:
    role = _role(ident, ids, r.pid)
    if ident is None:
        return f"pid {pid}: {role}"
    clock = time.strftime("%H:%M:%S", time.gmtime(ident.started))
    # Against the loader's process's own start: the same clock (the boot time psutil adds).
    loader = ids.get(r.pid)
    since = (
        ""
        if loader is None
        else f" ({ident.started - loader.started:+.2f} s after the loader's process)"
    )
    cmd = ident.cmdline if len(ident.cmdline) <= _CMD_MAX else ident.cmdline[:_CMD_MAX] + " …"
    return (
        f"pid {pid}: {role}; parent {ident.ppid}; started {clock} UTC{since};"
        f" command: {cmd or '(none)'}"
    )


class _Run:
    """One sandbox run, harness side. Holds the pipes, the child and what was seen."""

    def __init__(
        self, deadline_s: float, startup_s: float, orphan_grace_s: float, linger_s: float
    ) -> None:
        self.deadline_s = deadline_s
        self.first_note_s: float | None = None  # run(first_note_s=...)
        self.startup_s = startup_s
        self.orphan_grace_s = orphan_grace_s
        self.linger_s = linger_s
        self.returned_at: float | None = None
        self.reader = _wire.ReceiveBuffer()
        self.seen: dict[int, psutil.Process] = {}
        self.ids: dict[int, Identity] = {}  # each process as first seen (`Identity`)
        self.shm_known: set[str] = set()  # /dev/shm entries at the start or at a last look
        self.shm_used: set[str] = set()  # new /dev/shm entries a process of the run used
        self.forked: set[int] = set()  # pids the run's processes forked, as each announced itself
        self.watch: dict[int, int] = {}  # pid -> pidfd, opened on kill_self
        self.started_at: float | None = None
        self.result: tuple[Any, ...] | None = None
        self.result_at: float | None = None
        self.status: int | None = None
        self.child_died_at: float | None = None
        self.notes: list[Any] = []

    # ---- starting

    def start(self, job: _child.Job, start: str) -> None:
        self.msg_r, msg_w = os.pipe()
        ack_r, self.ack_w = os.pipe()
        # Each process forked in the child announces its pid here (`_child.announce_forks`);
        # never blocking it: a full pipe only loses that announcement, not the worker's time.
        self.forked_r, forked_w = os.pipe()
        os.set_blocking(forked_w, False)
        # Closed in close(); the child (and its workers) write their stderr here.
        self.stderr = tempfile.TemporaryFile(prefix="faultinject-stderr-")  # noqa: SIM115
        if start == "fork":
            pickled = pickle.dumps(job)  # fail here, in the harness, on a bad target
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child; it never returns
                code = 70
                try:
                    # What the child inherited is the harness's to finalize: a loader iterator
                    # left in a reference cycle there would, collected by the child's gc, run its
                    # shutdown against the harness's workers (queues and events are shared).
                    gc.freeze()
                    os.setsid()
                    os.close(self.msg_r)
                    os.close(self.ack_w)
                    os.close(self.forked_r)
                    os.dup2(self.stderr.fileno(), 2)
                    # The harness's sys.stderr may not write to fd 2 (pytest's capture); the
                    # child's Python-level writes (tracebacks of threads, warnings) must.
                    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                    _default_hooks()
                    code = _child.run_job(msg_w, ack_r, forked_w, pickle.loads(pickled))
                finally:
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()
                        sys.stderr.flush()
                    os._exit(code)
            self.pid = pid
        else:
            cmd = [
                sys.executable,
                "-c",
                "from loaderspec.faultinject._child import spawn_main; spawn_main()",
            ]
            proc = subprocess.Popen(
                [*cmd, str(msg_w), str(ack_r), str(forked_w)],
                pass_fds=(msg_w, ack_r, forked_w),
                start_new_session=True,
                stderr=self.stderr,
                close_fds=True,
            )
            self.pid = proc.pid
            # Popen's object must not reap the child behind our back: we waitpid ourselves.
            proc.returncode = 0
            _wire.send(self.ack_w, (list(sys.path), pickle.dumps(job)))
        os.close(msg_w)
        os.close(ack_r)
        os.close(forked_w)
        os.set_blocking(self.msg_r, False)
        os.set_blocking(self.forked_r, False)
        self.pidfd = os.pidfd_open(self.pid)
        self.t0 = time.monotonic()
        with contextlib.suppress(psutil.Error):
            self.saw(psutil.Process(self.pid))

    def saw(self, p: psutil.Process) -> None:
        """Keep `p` (first sight wins) and what it was then: its identity is read while it runs
        (an exiting process has no command line left)."""
        self.seen.setdefault(p.pid, p)
        if p.pid not in self.ids and (ident := _identity(p)) is not None:
            self.ids[p.pid] = ident

    def name_all(self, pids: Iterable[int]) -> dict[int, str]:
        return {pid: _named(self.ids.get(pid), pid, self.ids, self) for pid in sorted(set(pids))}

    # ---- waiting

    def _sample(self) -> None:
        for pid in processes.descendant_pids(self.pid):
            if pid not in self.seen:
                with contextlib.suppress(psutil.Error):
                    self.saw(psutil.Process(pid))
        # Who uses /dev/shm entries is read only when a new one appeared (cheap otherwise): a
        # name without a pid is the run's when one of its processes maps it or holds it open.
        now = _shm_entries()
        if now - self.shm_known:
            self.shm_known |= now
            self.shm_used |= _shm_users([*self.seen, self.pid])

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "started":
            self.started_at = time.monotonic()
        elif kind == "kill_self":
            for pid in msg[2]:
                with contextlib.suppress(OSError):
                    self.watch.setdefault(pid, os.pidfd_open(pid))
                with contextlib.suppress(psutil.Error):
                    self.saw(psutil.Process(pid))
            with contextlib.suppress(OSError):
                os.write(self.ack_w, b"k")
        elif kind == "note":
            self.notes.append(msg[2])
        elif kind == "returned":
            self.returned_at = time.monotonic()
        elif kind == "result":
            self.result = msg
            self.result_at = time.monotonic()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.msg_r, 1 << 16)
            except BlockingIOError:
                return
            if not data:
                return
            for msg in self.reader.feed(data):
                self._handle(msg)

    def drain_forked(self) -> None:
        """Read the pids announced so far. Every write is one 4-byte record, atomic on a pipe,
        and a read asks for a multiple of 4: a read never ends inside a record."""
        while self.forked_r >= 0:
            try:
                data = os.read(self.forked_r, 1 << 16)
            except BlockingIOError:
                return
            if not data:  # every process that could announce is gone
                os.close(self.forked_r)
                self.forked_r = -1
                return
            self.forked.update(pid for (pid,) in _child.PID_RECORD.iter_unpack(data))

    def _deadline(self) -> float:
        if self.started_at is None:
            return self.t0 + self.startup_s
        if self.first_note_s is not None and not self.notes and self.returned_at is None:
            return self.started_at + min(self.deadline_s, self.first_note_s)
        if self.returned_at is not None:
            # The target is done: what is left is its measuring (linger_s) and the child's exit.
            after = self.returned_at + self.linger_s + _REAP_S
            return max(self.started_at + self.deadline_s, after)
        return self.started_at + self.deadline_s

    def wait(self) -> bool:
        """Wait for the child to exit; False if the deadline (or the startup bound) passed."""
        while True:
            left = self._deadline() - time.monotonic()
            if left <= 0:
                self._drain()
                return False
            fds = [self.msg_r, self.pidfd, *([self.forked_r] if self.forked_r >= 0 else [])]
            ready, _, _ = select.select(fds, [], [], min(left, _SAMPLE_S))
            if self.msg_r in ready:
                self._drain()
            if self.forked_r in ready:
                self.drain_forked()
            self._sample()
            if self.pidfd in ready:
                self.child_died_at = time.monotonic()
                _, self.status = os.waitpid(self.pid, 0)
                self._drain()
                return True

    # ---- cleaning up

    def kill_all(self, pids: set[int]) -> None:
        """SIGKILL `pids` and whatever else is in the session, until nothing is (bounded).

        multiprocessing's helpers go last. A resource tracker unlinks the named semaphores and
        segments it tracks once every process holding its pipe is gone, and a SIGKILL in the
        same round would stop it: each killed run of a spawn-context loader left its
        semaphores in /dev/shm (unnamed by pid, so nobody's leak to grade). The others are
        killed first; the helpers get `_HELPER_EXIT_S` to finish on their own."""
        deadline = time.monotonic() + _REAP_S
        first_round = True
        while time.monotonic() < deadline:
            session = _session(self.pid)
            members = {pid for pid, p in session.items() if _alive(p)}
            targets = members | {pid for pid in pids if pid in self.seen and _alive(self.seen[pid])}
            if not targets:
                # Dead members are reparented to us (a subreaper while the scenario runs) once
                # their parent has exited: reaped here, or they would outlive the scenario as
                # zombies (a killed rank's worker, in 2 of 6 runs of a hung 2-rank group). One
                # whose parent is still exiting is not ours yet: look again shortly.
                unreaped = [pid for pid in session if not processes.reap(pid)]
                if not unreaped:
                    return
                select.select([], [], [], 0.005)
                continue
            spared = {pid for pid in targets if first_round and processes.is_mp_helper(pid)}
            first_round = False
            processes.kill(targets - spared, signal.SIGKILL, action=None)
            processes.wait_gone(targets - spared, _REAP_S)
            processes.wait_gone(spared, _HELPER_EXIT_S)  # the next round kills what is left
            pids = targets
            for pid in targets:
                processes.reap(pid)

    def close(self) -> None:
        for fd in (self.msg_r, self.ack_w, self.forked_r, self.pidfd, *self.watch.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.stderr.close()


def _wait_exits(
    watch: dict[int, int | None], t_ref: float, grace_s: float
) -> dict[int, float | None]:
    """Time each pid's exit relative to `t_ref`, for up to `grace_s`; reap those that are ours."""
    exits: dict[int, float | None] = dict.fromkeys(watch)
    deadline = time.monotonic() + grace_s
    pending = dict(watch)
    while pending:
        for pid in list(pending):
            if processes.is_gone(pid):
                exits[pid] = max(0.0, time.monotonic() - t_ref)
                pending.pop(pid)
                processes.reap(pid)
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        fds = [fd for fd in pending.values() if fd is not None]
        timeout = left if len(fds) == len(pending) else min(left, 0.005)
        select.select(fds, [], [], timeout)
    return exits


def run(
    target: Callable[..., Any],
    *args: Any,
    deadline_s: float,
    orphan_grace_s: float = 1.0,
    start: Literal["fork", "spawn"] = "fork",
    startup_s: float = 60.0,
    remove_leaked_shm: bool = True,
    linger_s: float = 1.0,
    subreaper: bool = False,
    first_note_s: float | None = None,
    **kwargs: Any,
) -> SandboxReport:
    """Run `target(*args, **kwargs)` in a sandbox child; see the module docstring.

    Args:
        target: a module-level callable (it is pickled by reference); its return value is
            pickled back.
        deadline_s: seconds the target may take, counted from the moment it is called; the
            leak count after it (up to `linger_s`) and the child's exit are bounded apart
            (`linger_s` + 5 s after the target returned), so a target that returned in time
            never reads as past its deadline because of what it left behind.
        orphan_grace_s: how long processes left when the child ended may take to exit on their
            own before they count as leftovers (the run returns as soon as all have exited).
        start: "fork" (fast; a copy of this process; the child ends with `os._exit`, so the
            interpreter's exit is not exercised) or "spawn" (a fresh interpreter that imports the
            target and exits normally, running atexit handlers like a user's script).
        startup_s: bound on the child becoming ready (a spawn child imports torch).
        remove_leaked_shm: unlink the /dev/shm entries reported in `leaked_shm`.
        linger_s: how long the processes the target started may take to exit after it returned
            before they count as `lingering` (the run goes on as soon as all have exited).
        subreaper: make the child a child subreaper, so that what the target's processes
            orphan (even in sessions of their own: a test suite run inside) stays the child's
            descendant and is counted as `lingering`.
        first_note_s: seconds the target may take to send its first note (`note`); past
            them with none sent, the run ends as past its deadline (a scenario stuck before
            its first step is told in that time, not in the whole `deadline_s`).
        **kwargs: passed to `target` (so `target` cannot take the names above).

    Raises:
        SandboxError: the child did not start within `startup_s` (it is killed and reaped) or
            the target cannot be pickled (nothing was started).
    """
    if start not in ("fork", "spawn"):
        raise ValueError(f"start must be 'fork' or 'spawn', got {start!r}")
    job = _child.Job(target, args, kwargs, linger_s, subreaper)
    try:
        pickle.dumps(job)
    except Exception as exc:
        msg = f"sandbox.run: cannot pickle the target or its arguments: {exc!r}"
        raise SandboxError(msg) from exc
    shm_before = _shm_entries()
    r = _Run(deadline_s, startup_s, orphan_grace_s, linger_s)
    r.first_note_s = first_note_s
    r.shm_known = set(shm_before)
    with processes.subreaper():
        r.start(job, start)
        # Hold SIGCHLD in the harness until the sandbox's processes are reaped: a loader's
        # handler installed here (torch's, by an earlier in-process loader) checks the pids it
        # registered with waitid(WNOWAIT); were one of them reused by a sandbox process that
        # died by a signal, it would raise "DataLoader worker ... killed by signal" in the
        # harness. Reaped first, such a pid is gone by the time the handler looks. (After the
        # fork: the child must not inherit the mask or the swapped handler.)
        with processes.sigchld_deferred():
            try:
                return _finish(r, r.wait(), shm_before, remove_leaked_shm)
            finally:
                if r.status is None:  # interrupted (a test timeout, KeyboardInterrupt) or failed
                    r.kill_all({r.pid})
                    _wait_child(r.pid, r.pidfd, _REAP_S)
                r.close()


def _finish(r: _Run, exited: bool, shm_before: set[str], remove_shm: bool) -> SandboxReport:
    report = SandboxReport(outcome="deadline", pid=r.pid)
    if not exited and r.started_at is None:
        r.kill_all({r.pid})
        raise SandboxError(f"sandbox child {r.pid} did not start within {r.startup_s} s")
    if r.result is not None:
        _, t_end, payload, error, fds, threads, zombies, descendants, lingering = r.result
        report.error = error
        report.value = pickle.loads(payload) if payload is not None else None
        report.leaked_fds, report.leaked_threads = fds, threads
        report.zombies = list(zombies)
        report.lingering = list(lingering)
        for pid in descendants:
            with contextlib.suppress(psutil.Error):
                r.saw(psutil.Process(pid))
        report.elapsed_s = t_end - (r.started_at or r.t0)
    if not exited:
        # The deadline passed: everything alive in the session is a leftover; kill it all.
        members = _session(r.pid)
        alive = [pid for pid, proc in members.items() if pid != r.pid and _alive(proc)]
        report.leftover_pids = sorted(alive)
        r.kill_all(set(members) | {r.pid})
        status = _wait_child(r.pid, r.pidfd, _REAP_S)
        r.status = 0 if status is None else status
        report.zombies = sorted(set(report.zombies) | set(_stray_zombies(r.pid)))
        report.elapsed_s = time.monotonic() - (r.started_at or r.t0)
        report.error = report.error or f"deadline of {r.deadline_s} s passed"
    else:
        _after_exit(r, report)
    report.notes = r.notes
    report.seen_pids = sorted(r.seen)
    report.named = r.name_all(
        [*report.leftover_pids, *report.lingering, *report.zombies, *report.orphan_exit_s]
    )
    r.drain_forked()
    # Named with a pid the run forked, even one that lived too briefly to be sampled (a worker
    # killed at its second batch, its segment left, under load: missed in 2 of 18 runs).
    report.leaked_shm, report.unattributed_shm = _new_shm(
        shm_before, set(r.seen) | r.forked | {r.pid}, r.shm_used
    )
    if remove_shm:
        for name in report.leaked_shm:
            with contextlib.suppress(OSError):
                (SHM_DIR / name).unlink()
    r.stderr.seek(0)
    report.stderr = r.stderr.read(_STDERR_MAX).decode(errors="replace")
    return report


def _after_exit(r: _Run, report: SandboxReport) -> None:
    """The child exited: classify it, time and reap what it left."""
    status = r.status or 0
    if os.WIFSIGNALED(status):
        report.outcome = "killed"
        report.killed_by_signal = os.WTERMSIG(status)
    else:
        report.exit_code = os.WEXITSTATUS(status)
        if r.result is None:
            report.outcome = "raised"
            report.error = f"the child exited with status {report.exit_code} and no result"
        else:
            report.outcome = "returned" if report.error is None else "raised"
    if r.result_at is not None and r.child_died_at is not None:
        report.exit_s = r.child_died_at - r.result_at
    if r.started_at is not None and r.result is None:
        report.elapsed_s = (r.child_died_at or time.monotonic()) - r.started_at
    members = _session(r.pid)
    for p in members.values():
        r.saw(p)
    # Alive when the child ended: the session's members, and kill_self's list (those may have
    # left the session with setsid, but they were the child's descendants).
    alive = {pid: p for pid, p in members.items() if _alive(p)}
    for pid in r.watch:
        if pid in r.seen and _alive(r.seen[pid]):
            alive[pid] = r.seen[pid]
    report.orphans = sorted(pid for pid, p in alive.items() if _parent_outside(p, set(members)))
    # Classification only (never used to pick what to kill).
    report.helpers = sorted(pid for pid, p in alive.items() if processes.is_mp_helper(p))
    watch: dict[int, int | None] = {}
    for pid in set(alive) | set(r.watch):
        watch[pid] = r.watch.get(pid)
        if watch[pid] is None:
            with contextlib.suppress(OSError):
                watch[pid] = r.watch[pid] = os.pidfd_open(pid)
    report.orphan_exit_s = _wait_exits(watch, r.child_died_at or time.monotonic(), r.orphan_grace_s)
    report.leftover_pids = sorted(pid for pid, t in report.orphan_exit_s.items() if t is None)
    # Zombies whose parent is still alive (and is not this harness): a leftover that never reaps.
    unreaped = [
        pid for pid, p in _session(r.pid).items() if _is_zombie(p) and _parent_alive_elsewhere(p)
    ]
    r.kill_all(set(report.leftover_pids))
    report.zombies = sorted(set(report.zombies) | set(unreaped) | set(_stray_zombies(r.pid)))


def _parent_alive_elsewhere(p: psutil.Process) -> bool:
    """True if `p`'s parent is a live process other than this harness."""
    try:
        ppid = p.ppid()
        return ppid not in (0, 1, os.getpid()) and _alive(psutil.Process(ppid))
    except psutil.Error:
        return False


def _stray_zombies(sid: int) -> list[int]:
    """Reap the session's zombies that are ours (orphans re-parented to this subreaper); return
    those that are not ours to reap (re-parented to an init that does not reap, for instance)."""
    return [pid for pid, p in _session(sid).items() if _is_zombie(p) and not processes.reap(pid)]


def _parent_outside(p: psutil.Process, session: set[int]) -> bool:
    try:
        return p.ppid() not in session
    except psutil.Error:
        return False


def _new_shm(before: set[str], pids: set[int], used: set[str]) -> tuple[list[str], list[str]]:
    """New /dev/shm entries, split into the run's (named with one of `pids`, or in `used`: seen
    mapped or open by one of its processes) and the others."""
    new = sorted(_shm_entries() - before)
    mine = [n for n in new if n in used or any(int(m) in pids for m in _INT.findall(n))]
    return mine, [n for n in new if n not in mine]
