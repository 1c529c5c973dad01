"""Checkpoint and resume (docs/checkpoint.md): what ``state_dict()`` returns and how a loaded
state starts the next iterator.

The decision (spec/DataLoaderCheckpoint.tla): a state describes what was handed out to the user,
never what was dispatched or prefetched; what was prefetched and not handed out is produced
again after a resume. The protocol core counts the hand-outs (``ProtocolCore.handed_out``);
this module turns them into a state and a state back into where the next epoch starts.

* Map-style: the epoch's sampler positions handed out (the lowest not handed out, plus the
  handed ones above it: with ``in_order=False`` at most the prefetch window) and the generator
  state the epoch's sampler order was drawn from. A resumed epoch draws the sampler again from
  that state and skips the positions handed out (indices only: no item is loaded twice).
* IterableDataset: per worker, how many of its batches were handed out and, when the dataset
  has ``state_dict``/``load_state_dict`` (torchdata's ``Stateful``), its state after the last
  of them (it travels with each batch); and whose batch comes next in the round-robin.

A state is plain data (ints, lists, dicts, a uint8 tensor, the dataset's own state): it
survives ``torch.save`` -> ``torch.load(weights_only=True)`` and ``pickle``, and its size does
not grow with the dataset. Knows no processes: the loader and its iterators call it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from loaderspec.reference.core import ProtocolCore

VERSION = 1
MAP, ITERABLE = "map", "iterable"
_KEYS = (
    "version",
    "dataset_kind",
    "num_workers",
    "epoch",
    "handed_below",
    "handed_above",
    "sampler_rng",
    "workers",
    "next_worker",
)


def is_stateful(obj: Any) -> bool:
    """torchdata's ``Stateful`` protocol: both methods, callable."""
    return callable(getattr(obj, "state_dict", None)) and callable(
        getattr(obj, "load_state_dict", None)
    )


def fresh_state(kind: str, num_workers: int, epoch: int = 0) -> dict[str, Any]:
    """The state of an epoch nothing of which was handed out yet."""
    return {
        "version": VERSION,
        "dataset_kind": kind,
        "num_workers": num_workers,
        "epoch": epoch,
        "handed_below": 0,
        "handed_above": [],
        "sampler_rng": None,
        "workers": [{"batches": 0, "state": None} for _ in range(max(num_workers, 1))]
        if kind == ITERABLE
        else [],
        "next_worker": 0,
    }


def check_state(state: Any, *, kind: str, num_workers: int) -> dict[str, Any]:
    """A copy of ``state`` once it is one this loader can resume from.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: a key is missing or of another version or dataset kind, or an
            IterableDataset's state was taken with another ``num_workers`` (its per-worker
            shards do not map onto these workers); each message names what and the fix.
    """
    if not isinstance(state, dict):
        raise TypeError(
            f"load_state_dict() expects the dict state_dict() returned, got {type(state).__name__}"
        )
    missing = [k for k in _KEYS if k not in state]
    if missing:
        raise ValueError(
            f"not a reference DataLoader state: it lacks {missing}; pass what"
            " reference.DataLoader.state_dict() returned"
        )
    if state["version"] != VERSION:
        raise ValueError(f"state version {state['version']!r} is not {VERSION}: take it again")
    if state["dataset_kind"] != kind:
        raise ValueError(
            f"the state is a {state['dataset_kind']}-style dataset's and this loader's dataset is"
            f" {kind}-style: load it into a loader of the same dataset"
        )
    if kind == ITERABLE and state["num_workers"] != num_workers:
        raise ValueError(
            f"this IterableDataset state was taken with num_workers={state['num_workers']} and"
            f" this loader has num_workers={num_workers}: each worker's shard resumes on its own"
            f" worker, so build the loader with num_workers={state['num_workers']}"
        )
    return copy.deepcopy(state)


def trace_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """A state as its trace record carries it (``loaderspec.vocabulary.CHECKPOINT_FIELDS``):
    the position it describes, without the generator state or a dataset's own state."""
    return {
        "epoch": state["epoch"],
        "handed_below": state["handed_below"],
        "handed_above": list(state["handed_above"]),
        "batches": [w["batches"] for w in state["workers"]],
        "next_worker": state["next_worker"],
    }


def rng_state(generator: torch.Generator | None) -> torch.Tensor:
    """The state the sampler's next draw starts from (the loader's generator, or torch's)."""
    return generator.get_state() if generator is not None else torch.get_rng_state()


def next_epoch_rng(generator: torch.Generator | None, persistent: bool) -> torch.Tensor | None:
    """The generator state the next epoch's sampler order will be drawn from, taken right after
    an epoch ended: a new iterator draws its workers' base seed first, persistent workers do
    not. None without a generator (torch's global generator is the user's to advance)."""
    if generator is None:
        return None
    state = generator.get_state()
    if persistent:
        return state
    ahead = torch.Generator()
    ahead.set_state(state)
    torch.empty((), dtype=torch.int64).random_(generator=ahead)  # BaseIter's base_seed draw
    return ahead.get_state()


class SamplerCursor(Iterator[Any]):
    """The epoch's sampler iterator, positions counted: it records the generator state the
    first draw starts from, or sets it (a resumed epoch), and skips positions handed out."""

    def __init__(
        self,
        sampler_iter: Iterator[Any],
        generator: torch.Generator | None,
        start: dict[str, Any] | None,
    ) -> None:
        self._it = sampler_iter
        self._generator = generator
        self.rng: torch.Tensor | None = None if start is None else start["sampler_rng"]
        self._set_rng = self.rng is not None
        self._below = 0 if start is None else start["handed_below"]
        self._above = frozenset(() if start is None else start["handed_above"])
        self._pos = 0
        self._first = True

    def _first_draw(self) -> Any:
        self._first = False
        if not self._set_rng or self.rng is None:
            self.rng = rng_state(self._generator)
            return next(self._it)
        if self._generator is not None:
            self._generator.set_state(self.rng)
            return next(self._it)
        # torch's global generator: only the sampler's first draw uses it (RandomSampler seeds
        # its own generator from it); the user's stream is left as it was.
        saved = torch.get_rng_state()
        torch.set_rng_state(self.rng)
        try:
            return next(self._it)
        finally:
            torch.set_rng_state(saved)

    def __next__(self) -> Any:
        while True:
            item = self._first_draw() if self._first else next(self._it)
            pos = self._pos
            self._pos = pos + 1
            if pos >= self._below and pos not in self._above:
                return item


class EpochProgress:
    """One epoch of one iterator as a checkpoint describes it, kept by the loader (so that
    ``state_dict()`` works after the iterator is gone) and fed by the iterator.

    Multi-process: the protocol core's hand-outs (``core``, task idx -> sampler position through
    the positions the start skipped). Single process: ``count()`` per batch handed out.
    """

    def __init__(
        self,
        *,
        kind: str,
        num_workers: int,
        epoch: int,
        start: dict[str, Any] | None,
        generator: torch.Generator | None,
        persistent: bool,
    ) -> None:
        self.kind = kind
        self.num_workers = num_workers
        self.epoch = epoch
        self.start = start or fresh_state(kind, num_workers, epoch)
        self.resumed = start is not None  # began from a loaded state
        # A resumed IterableDataset's workers: slot j runs shard (j + rotation) % num_workers,
        # so that the protocol's round-robin, which begins at slot 0, begins at the shard whose
        # batch comes next in the uninterrupted stream.
        self.rotation = self.start["next_worker"] if self.resumed and num_workers else 0
        self.generator = generator
        self.persistent = persistent
        self.core: ProtocolCore | None = None
        self.cursor: SamplerCursor | None = None
        self.ended = False  # StopIteration was raised
        slots = max(num_workers, 1)
        self._single_below = 0  # single process: batches handed out, in order
        self._stateful_states: list[Any] = [None] * slots  # came with this epoch's batches
        self._next_rng: torch.Tensor | None = None  # once ended: the next epoch's

    @property
    def arranged(self) -> bool:
        """Whether the iterator's workers and tasks were arranged for a loaded state (positions
        skipped, shards rotated): it then serves this epoch only, the next is a new iterator's."""
        start = self.start
        return self.resumed and bool(
            start["handed_below"] or start["handed_above"] or self.rotation
        )

    @property
    def resumed_start(self) -> dict[str, Any] | None:
        """The loaded state this epoch began from, or None."""
        return self.start if self.resumed else None

    def tasks_left(self, total: int) -> int:
        """Map-style: the tasks this epoch sends, of the sampler's ``total``."""
        below: int = self.start["handed_below"]
        return total - below - len(self.start["handed_above"])

    # ------------------------------------------------------------ fed by the iterator ------
    def end(self) -> None:
        """StopIteration was raised: the state is now the next epoch's, whole."""
        if not self.ended and self.kind == MAP:
            self._next_rng = next_epoch_rng(self.generator, self.persistent)
        self.ended = True

    def count(self) -> None:
        """Single process: one more batch handed out."""
        self._single_below += 1

    def dataset_state(self, worker: int, state: Any) -> None:
        """The dataset's state after the last batch of worker slot ``worker`` handed out."""
        self._stateful_states[self._shard(worker)] = state

    def _shard(self, slot: int) -> int:
        return (slot + self.rotation) % max(self.num_workers, 1)

    # ------------------------------------------------------------------- the state ---------
    def _handed_map(self) -> tuple[int, list[int]]:
        """The epoch's sampler positions handed out, as (lowest not handed, handed above)."""
        if self.core is not None:
            below_t, above_t = self.core.handed_out()
        else:
            below_t, above_t = self._single_below, []
        below0: int = self.start["handed_below"]
        skipped: list[int] = sorted(self.start["handed_above"])
        if not skipped and not above_t:  # in order, nothing skipped: the common case
            return below0 + below_t, []

        def position(idx: int) -> int:  # the idx-th position the cursor did not skip
            pos = below0 + idx
            for s in skipped:
                if s <= pos:
                    pos += 1
            return pos

        handed = set(skipped) | {position(i) for i in above_t}
        below = max(below0, position(below_t - 1) + 1) if below_t else below0
        while below in handed:
            below += 1
        return below, sorted(p for p in handed if p > below)

    def _sampler_rng(self) -> torch.Tensor | None:
        """The generator state this epoch's sampler order is, or will be, drawn from."""
        cursor = self.cursor
        if cursor is None:  # no iterator yet: the state this epoch was loaded with, if any
            loaded: torch.Tensor | None = self.start["sampler_rng"]
            return loaded
        if cursor.rng is None:
            # Not drawn yet (one process draws at the first next(), workers at iter()): nothing
            # draws from the generator before that, so its state now is the one the order comes
            # from. None here restarted a later epoch from the new loader's generator, in the
            # first epoch's order.
            return rng_state(self.generator)
        return cursor.rng

    def _workers(self) -> tuple[list[dict[str, Any]], int]:
        start = self.start
        slots = max(self.num_workers, 1)
        if self.core is not None:
            counts = [0] * slots
            for slot, n in enumerate(self.core.handed_per_worker):
                counts[self._shard(slot)] = n
            last_slot = self.core.last_handed_worker
            last = None if last_slot is None else self._shard(last_slot)
        else:
            counts, last = [self._single_below], (0 if self._single_below else None)
        workers = []
        for w in range(slots):
            state = self._stateful_states[w]
            if state is None:
                state = start["workers"][w]["state"]
            workers.append({"batches": start["workers"][w]["batches"] + counts[w], "state": state})
        nxt = start["next_worker"] if last is None else (last + 1) % slots
        return workers, nxt

    def state(self) -> dict[str, Any]:
        """What ``state_dict()`` returns: a new object, never changed afterwards."""
        if self.ended:
            state = fresh_state(self.kind, self.num_workers, self.epoch + 1)
            state["sampler_rng"] = None if self._next_rng is None else self._next_rng.clone()
            return state
        state = fresh_state(self.kind, self.num_workers, self.epoch)
        if self.kind == MAP:
            below, above = self._handed_map()
            state["handed_below"], state["handed_above"] = below, above
            rng = self._sampler_rng()
            state["sampler_rng"] = None if rng is None else rng.clone()
        else:
            workers, state["next_worker"] = self._workers()
            # Built afresh here but the datasets' own states, which are copied (bench: a
            # deepcopy of the whole state was most of state_dict()'s cost).
            for worker in workers:
                if worker["state"] is not None:
                    worker["state"] = copy.deepcopy(worker["state"])
            state["workers"] = workers
        return state


def worker_starts(
    start: dict[str, Any] | None, *, stateful: bool, items_per_batch: int, num_workers: int
) -> tuple[Any, ...] | None:
    """What each worker of a resumed IterableDataset does before its first fetch:
    ``("state", s)`` load its dataset's state, ``("skip", n)`` fast-forward n items, or None."""
    if start is None or start["dataset_kind"] != ITERABLE:
        return None
    starts: list[Any] = []
    for w in range(max(num_workers, 1)):
        worker = start["workers"][w]
        if stateful and worker["state"] is not None:
            starts.append(("state", worker["state"]))
        elif worker["batches"]:
            starts.append(("skip", worker["batches"] * items_per_batch))
        else:
            starts.append(None)
    return tuple(starts)


def start_fetcher(make_fetcher: Any, dataset: Any, start: Any) -> Any:
    """A worker's first fetcher of a resumed epoch: the dataset's state loaded before
    ``iter(dataset)``, or the items already handed out drawn and dropped (a fast-forward: the
    dataset's iterator runs over them again, nothing is collated)."""
    if start is not None and start[0] == "state":
        dataset.load_state_dict(start[1])
    fetcher = make_fetcher()
    if start is not None and start[0] == "skip":
        for _ in range(start[1]):
            try:
                next(fetcher.dataset_iter)
            except StopIteration:
                fetcher.ended = True
                break
    return fetcher
