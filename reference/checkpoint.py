"""Checkpoint and resume (docs/checkpoint.md): what ``state_dict()`` returns and how a loaded
state starts the next iterator.

The decision (spec/DataLoaderCheckpoint.tla): a state describes what was handed out to the user,
never what was dispatched or prefetched; what was prefetched and not handed out is produced
again after a resume. The protocol core counts the hand-outs (``ProtocolCore.handed_out``);
this module turns them into a state and a state back into where the next epoch starts.

* Map-style: the epoch's sampler positions handed out (the lowest not handed out, plus the
  handed ones above it: with ``in_order=False`` at most the prefetch window) and the generator
  state the epoch's sampler order was drawn from (the loader's ``generator``, or torch's global
  one). A resumed epoch draws the sampler again from that state and skips the positions handed
  out (indices only: no item is loaded twice).
* IterableDataset: per worker, how many of its batches were handed out; and whose batch comes
  next in the round-robin.
* The user's own state, torchdata's ``Stateful`` protocol as StatefulDataLoader applies it: per
  worker (one slot without workers), the dataset's ``state_dict()`` and that of the iterator
  ``iter(dataset)`` returned, after the worker's last batch handed out (they travel with each
  batch; without workers they are asked when the state is); a dataset that is its own iterator
  is saved as the iterator. At a resume the dataset's state is loaded, then ``iter(dataset)``,
  then the iterator's state (so ``iter()`` rewinding a dataset undoes nothing). A Stateful
  sampler's own state as the epoch's order began; the workers' base seed.

A state is plain data (ints, strings, lists, dicts and the user's own states): it survives
``json``, ``pickle`` and ``torch.save`` -> ``torch.load(weights_only=True)``, and its size does not
grow with the dataset. Knows no processes: the loader and its iterators call it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data._utils import HAS_NUMPY

if TYPE_CHECKING:
    from loaderspec.reference.core import ProtocolCore

try:  # torchdata's own protocol, where it is installed; the reference works without it
    from torchdata.stateful_dataloader import Stateful
except ImportError:  # pragma: no cover - depends on the environment
    Stateful = None

VERSION = 2
MAP, ITERABLE = "map", "iterable"
_KEYS = (
    "version",
    "dataset_kind",
    "num_workers",
    "dataset_len",
    "batch_size",
    "sampler",
    "epoch",
    "handed_below",
    "handed_above",
    "sampler_rng",
    "sampler_state",
    "base_seed",
    "workers",
    "next_worker",
)
_RNG_BYTES = torch.Generator().get_state().numel()  # a CPU generator's state


_STATEFUL_TYPES: dict[type, bool] = {}  # is_stateful per class: asked for every batch


def is_stateful(obj: Any) -> bool:
    """torchdata's ``Stateful`` protocol: both methods, callable (its ``runtime_checkable``
    Protocol where torchdata is installed, the same structural check where it is not). Decided
    once per class: the Protocol's ``isinstance`` takes tens of microseconds, and the workers
    ask for every batch."""
    cls = type(obj)
    known = _STATEFUL_TYPES.get(cls)
    if known is None:
        known = callable(getattr(obj, "state_dict", None)) and callable(
            getattr(obj, "load_state_dict", None)
        )
        if Stateful is not None:
            known = known and isinstance(obj, Stateful)
        _STATEFUL_TYPES[cls] = known
    return known


def encode_rng(state: torch.Tensor) -> str:
    """A generator's state as plain text (a ``uint8`` tensor is not JSON)."""
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def decode_rng(text: str) -> torch.Tensor:
    """The generator state ``encode_rng`` wrote.

    Raises:
        ValueError: not such a text (``check_state`` names the field).
    """
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError(f"not base64: {exc}") from None
    if len(raw) != _RNG_BYTES:
        raise ValueError(f"{len(raw)} bytes where a CPU generator's state has {_RNG_BYTES}")
    state = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    try:
        torch.Generator().set_state(state)
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    return state


def rng_state(generator: torch.Generator | None) -> torch.Tensor:
    """The state the sampler's next draw starts from (the loader's generator, or torch's)."""
    return generator.get_state() if generator is not None else torch.get_rng_state()


def set_rng(generator: torch.Generator | None, text: str) -> None:
    """Put the loader's generator (without one, torch's global generator, which is then the
    loader's: its sampler and its workers' seeds draw from it) where the state says."""
    state = decode_rng(text)
    if generator is not None:
        generator.set_state(state)
    else:
        torch.set_rng_state(state)


def draw_base_seed(generator: torch.Generator | None) -> int:
    """torch's ``_BaseDataLoaderIter`` draw of the workers' base seed."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def fresh_state(shape: dict[str, Any], epoch: int = 0) -> dict[str, Any]:
    """The state of an epoch nothing of which was handed out yet, for a loader of ``shape``
    (``LoaderShape``: its dataset kind, ``num_workers``, dataset length, ``batch_size``,
    sampler)."""
    return {
        "version": VERSION,
        "dataset_kind": shape["dataset_kind"],
        "num_workers": shape["num_workers"],
        "dataset_len": shape["dataset_len"],
        "batch_size": shape["batch_size"],
        "sampler": shape["sampler"],
        "epoch": epoch,
        "handed_below": 0,
        "handed_above": [],
        "sampler_rng": None,
        "sampler_state": None,
        "base_seed": None,
        "workers": [_slot() for _ in range(max(shape["num_workers"], 1))],
        "next_worker": 0,
    }


_SLOT_KEYS = {"batches", "dataset", "iterator", "ended", "rng"}


def _slot(batches: int = 0) -> dict[str, Any]:
    """One worker's part: its batches handed out, its dataset's and its iterator's state,
    whether its iterator ran dry (a last, short batch was handed out: the next fetch ends the
    shard; StatefulDataLoader's ``fetcher_ended``), and the worker process's RNGs where a
    persistent worker began or ended an epoch (``worker_rng``), else None."""
    return {"batches": batches, "dataset": None, "iterator": None, "ended": False, "rng": None}


def worker_rng() -> dict[str, Any]:
    """This worker process's RNGs, the ones torch seeds in a worker (torch's, ``random``'s,
    numpy's), as plain data."""
    version, internal, gauss = random.getstate()
    rng: dict[str, Any] = {
        "torch": encode_rng(torch.get_rng_state()),
        "random": [version, list(internal), gauss],
    }
    if HAS_NUMPY:
        import numpy as np

        state: Any = np.random.get_state()  # (legacy: a tuple; typed as a union)
        name, keys, pos, has_gauss, cached = state
        rng["numpy"] = [name, keys.tolist(), pos, has_gauss, cached]
    return rng


def set_worker_rng(rng: dict[str, Any]) -> None:
    """Put this worker process's RNGs where ``worker_rng`` found them."""
    torch.set_rng_state(decode_rng(rng["torch"]))
    version, internal, gauss = rng["random"]
    random.setstate((version, tuple(internal), gauss))
    if HAS_NUMPY and rng.get("numpy") is not None:
        import numpy as np

        name, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def _refuse(field: str, got: Any, want: str, fix: str) -> ValueError:
    return ValueError(f"state_dict()[{field!r}] is {got!r}, {want}: {fix}")


_RETAKE = "pass what this loader's state_dict() returned, unchanged"


def _int(state: dict[str, Any], field: str, low: int, high: int | None = None) -> int:
    value = state[field]
    if type(value) is not int or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"{low} or more"
        raise _refuse(field, value, f"expected an int {bound}", _RETAKE)
    return value


def check_state(state: Any, shape: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` once it is one a loader of ``shape`` can resume from: every field
    checked now, so that a foreign or damaged state never becomes an empty or shortened epoch
    or an error at ``iter()``.

    Raises:
        TypeError: ``state`` is not a dict.
        ValueError: a key is missing, or a field is malformed or is another loader's (another
            version, dataset kind or length, ``batch_size`` or sampler; an IterableDataset's
            or a Stateful dataset's state taken with another ``num_workers``): one message
            naming the field, both values and the fix. The loader is unchanged.
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
    kind = shape["dataset_kind"]
    if state["dataset_kind"] != kind:
        raise ValueError(
            f"the state is a {state['dataset_kind']}-style dataset's and this loader's dataset is"
            f" {kind}-style: load it into a loader of the same dataset"
        )
    same_loader = "load it into a loader built as the one that took it"
    for field, what in (
        ("dataset_len", "the dataset's length"),
        ("batch_size", "batch_size"),
        ("sampler", "the sampler"),
    ):
        if state[field] != shape[field]:
            raise ValueError(
                f"state_dict()[{field!r}] is {state[field]!r} and this loader's {what} is"
                f" {shape[field]!r}: {same_loader}"
            )
    workers = shape["num_workers"]
    theirs = _int(state, "num_workers", 0)
    slots = state["workers"]
    if not isinstance(slots, list) or len(slots) != max(theirs, 1):
        raise _refuse(
            "workers", slots, f"expected a list of {max(theirs, 1)} (num_workers={theirs})", _RETAKE
        )
    for slot in slots:
        if not isinstance(slot, dict) or set(slot) != _SLOT_KEYS:
            raise _refuse("workers", slot, f"expected a dict of {sorted(_SLOT_KEYS)}", _RETAKE)
        if type(slot["ended"]) is not bool:
            raise _refuse("workers", slot, "a worker's 'ended' must be a bool", _RETAKE)
        rng = slot["rng"]
        if rng is not None:
            try:
                decode_rng(rng["torch"])
                assert len(rng["random"]) == 3
            except (ValueError, TypeError, KeyError, AssertionError) as exc:
                raise _refuse("workers", "rng", f"not a worker's RNGs ({exc!r})", _RETAKE) from None
        if type(slot["batches"]) is not int or slot["batches"] < 0:
            raise _refuse("workers", slot, "a worker's 'batches' must be an int >= 0", _RETAKE)
    user_state = any(_holds_user_state(s) for s in slots)
    if theirs != workers and (kind == ITERABLE or user_state):
        what = "IterableDataset" if kind == ITERABLE else "Stateful dataset's"
        raise ValueError(
            f"this {what} state was taken with num_workers={theirs} and this loader has"
            f" num_workers={workers}: each worker's shard and dataset state resume on its own"
            f" worker, so build the loader with num_workers={theirs}"
        )
    _int(state, "epoch", 0)
    total = shape["total"]
    below = _int(state, "handed_below", 0, total)
    above = state["handed_above"]
    if not isinstance(above, list) or any(
        type(p) is not int or not below < p < (total if total is not None else p + 1) for p in above
    ):
        raise _refuse(
            "handed_above",
            above,
            f"expected sampler positions between {below} and {total}",
            _RETAKE,
        )
    _int(state, "next_worker", 0, max(theirs, 1) - 1)
    if state["base_seed"] is not None:
        _int(state, "base_seed", -(2**63), 2**63 - 1)
    rng = state["sampler_rng"]
    if rng is not None:
        if not isinstance(rng, str):
            raise _refuse("sampler_rng", type(rng).__name__, "expected a str or None", _RETAKE)
        try:
            decode_rng(rng)
        except ValueError as exc:
            raise _refuse(
                "sampler_rng", rng[:16] + "...", f"not a generator state ({exc})", _RETAKE
            ) from None
    if state["sampler_state"] is not None and not shape["stateful_sampler"]:
        raise ValueError(
            "state_dict()['sampler_state'] holds a Stateful sampler's state and this loader's"
            f" sampler {shape['sampler']} has no load_state_dict(): {same_loader}"
        )
    checked: dict[str, Any] = copy.deepcopy(state)
    if theirs != workers:  # map-style, no user state: the positions carry over to any count
        checked["num_workers"] = workers
        checked["workers"] = [_slot() for _ in range(max(workers, 1))]
    return checked


def _holds_user_state(slot: dict[str, Any]) -> bool:
    return slot["dataset"] is not None or slot["iterator"] is not None or slot["rng"] is not None


def digest(part: Any) -> str:
    """A short fingerprint of a part of a state (its JSON): trace-check compares the user's
    states and the generator's by it, for equality only ("" stands for none)."""
    if part is None:
        return ""
    text = json.dumps(part, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def user_digest(user: Any) -> str:
    """The fingerprint of one worker's user state: a slot's ``(dataset, iterator, ended, rng)``
    or what a batch brought (``capture``: ``(dataset, iterator, ended)``); "" when it holds
    nothing, as ``_holds_user_state`` says of a slot."""
    if user is None:
        return ""
    ds, it, ended = user[:3]
    rng = user[3] if len(user) > 3 else None
    if ds is None and it is None and rng is None:
        return ""
    return digest([ds, it, ended, rng])


def trace_checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """A state as its trace record carries it (``loaderspec.vocabulary.CHECKPOINT_FIELDS``):
    the position it describes, and fingerprints (``digest``) of each worker slot's user state
    and of the generator state the epoch's order is drawn from."""
    iterable = state["dataset_kind"] == ITERABLE
    return {
        "epoch": state["epoch"],
        "handed_below": state["handed_below"],
        "handed_above": list(state["handed_above"]),
        "batches": [w["batches"] for w in state["workers"]] if iterable else [],
        "next_worker": state["next_worker"],
        "user": [
            user_digest((w["dataset"], w["iterator"], w["ended"], w["rng"]))
            for w in state["workers"]
        ],
        "rng": digest(state["sampler_rng"]),
    }


def next_epoch_rng(generator: torch.Generator | None, persistent: bool) -> tuple[str, int | None]:
    """The generator state the next epoch's sampler order will be drawn from, taken right after
    an epoch ended, and the base seed the next iterator would draw first (persistent workers
    draw none: None)."""
    state = rng_state(generator)
    if persistent:
        return encode_rng(state), None
    ahead = torch.Generator()
    ahead.set_state(state)
    seed = draw_base_seed(ahead)  # BaseIter's base_seed draw
    return encode_rng(ahead.get_state()), seed


def capture(dataset: Any, fetcher: Any, *, iterable: bool, ended: bool) -> Any:
    """The user's state of one worker (or of the loader's process) now, as StatefulDataLoader
    takes it: ``(dataset's, iterator's, iterator ran dry)``, or None when neither has the
    protocol. The iterator is ``iter(dataset)``'s (a dataset that is its own iterator is saved
    as the iterator). Once the epoch ended (``ended``) the next takes a new iterator: only the
    dataset's."""
    if not iterable:
        return (dataset.state_dict(), None, False) if is_stateful(dataset) else None
    it = None if fetcher is None else fetcher.dataset_iter
    if ended or it is None:
        return (dataset.state_dict(), None, False) if is_stateful(dataset) else None
    it_state = it.state_dict() if is_stateful(it) else None
    ds_state = dataset.state_dict() if it is not dataset and is_stateful(dataset) else None
    if ds_state is None and it_state is None:
        return None
    return (ds_state, it_state, bool(fetcher.ended))


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
        self.rng: str | None = None if start is None else start["sampler_rng"]
        self._set_rng = self.rng is not None
        self._below = 0 if start is None else start["handed_below"]
        self._above = frozenset(() if start is None else start["handed_above"])
        self._pos = 0
        self._first = True

    def _first_draw(self) -> Any:
        self._first = False
        if not self._set_rng or self.rng is None:
            self.rng = encode_rng(rng_state(self._generator))
        else:
            # The loader's generator, or torch's global one when it has none, goes back to
            # where the uninterrupted run drew this order from, and is left there: what draws
            # from it later (the next epochs' orders and seeds) then draws what it drew.
            set_rng(self._generator, self.rng)
        return next(self._it)

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
    the positions the start skipped) and the user's states that came with them. Single process:
    ``count()`` per batch handed out, and the user's states asked when the state is (``live``).
    """

    def __init__(
        self,
        *,
        shape: dict[str, Any],
        epoch: int,
        start: dict[str, Any] | None,
        generator: torch.Generator | None,
        persistent: bool,
        sampler: Any,
    ) -> None:
        self.shape = shape
        self.kind = shape["dataset_kind"]
        self.num_workers: int = shape["num_workers"]
        self.epoch = epoch
        self.start = start or fresh_state(shape, epoch)
        self.resumed = start is not None  # began from a loaded state
        # A resumed epoch's workers: slot j runs worker id (shard) (j + rotation) % num_workers,
        # so that the protocol's round-robin, which begins at slot 0, gives each batch to the
        # worker (its seed, its shard, its dataset state) that made it in the uninterrupted run.
        slots = max(self.num_workers, 1)
        if not self.resumed or not self.num_workers:
            self.rotation = 0
        elif self.kind == ITERABLE:
            self.rotation = self.start["next_worker"]
        else:
            self.rotation = self.start["handed_below"] % slots
        self.generator = generator
        self.persistent = persistent
        self.sampler = sampler  # a Stateful sampler (its state is saved), or None
        self.sampler_state: Any = self.start["sampler_state"]
        self.base_seed: int | None = None  # set by the iterator
        self.iter_rng: str | None = None  # IterableDataset: the generator after base_seed
        self.core: ProtocolCore | None = None
        self.cursor: SamplerCursor | None = None
        self.live: Any = None  # single process: () -> the user's state now (capture)
        self.ended = False  # StopIteration was raised
        self._single_below = 0  # single process: batches handed out, in order
        self.slots = slots
        # Whether results carry the user's state (set by the iterator: ``_carries_state``).
        self.carries = False
        self._start_holds = any(_holds_user_state(s) for s in self.start["workers"])
        self._user_states: list[Any] = [None] * slots  # came with this epoch's batches
        self._carried: list[Any] | None = None  # persistent workers: as the last epoch ended
        self._next: tuple[str, int | None, Any] | None = None  # once ended: the next epoch's

    @property
    def arranged(self) -> bool:
        """Whether the iterator's workers and tasks were arranged for a loaded state (positions
        skipped, shards rotated, user states loaded): it then serves this epoch only, the next
        is a new iterator's."""
        start = self.start
        return self.resumed and bool(
            start["handed_below"]
            or start["handed_above"]
            or self.rotation
            or any(_holds_user_state(s) for s in start["workers"])
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
        if not self.ended:
            rng, seed = next_epoch_rng(self.generator, self.persistent)
            sampler = None if self.sampler is None else self.sampler.state_dict()
            self._next = (rng, self.base_seed if self.persistent else seed, sampler)
        self.ended = True

    def carry_from(self, ended: EpochProgress) -> None:
        """Persistent workers start this epoch where they ended ``ended``: their datasets'
        states are this epoch's until a batch brings a newer one."""
        self._carried = [ended._user_state_of(w) for w in range(max(self.num_workers, 1))]

    def count(self) -> None:
        """Single process: one more batch handed out."""
        self._single_below += 1

    def user_state(self, worker: int, state: Any) -> None:
        """The user's state (``capture``) after the last batch of worker slot ``worker``
        handed out."""
        self._user_states[self._shard(worker)] = state

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

    def _sampler_rng(self) -> str | None:
        """The generator state this epoch's sampler order is, or will be, drawn from."""
        if self.kind == ITERABLE:
            return self.iter_rng
        cursor = self.cursor
        if cursor is None:  # no iterator yet: the state this epoch was loaded with, if any
            loaded: str | None = self.start["sampler_rng"]
            return loaded
        if cursor.rng is None:
            # Not drawn yet (one process draws at the first next(), workers at iter()): nothing
            # of the loader's draws from the generator before that, so its state now is the one
            # the order comes from.
            return encode_rng(rng_state(self.generator))
        return cursor.rng

    def _counts(self) -> tuple[list[int], int | None]:
        slots = max(self.num_workers, 1)
        if self.core is None:
            return [self._single_below], (0 if self._single_below else None)
        counts = [0] * slots
        for slot, n in enumerate(self.core.handed_per_worker):
            counts[self._shard(slot)] = n
        last_slot = self.core.last_handed_worker
        return counts, None if last_slot is None else self._shard(last_slot)

    def _user_state_of(self, shard: int) -> Any:
        """The user's state of ``shard`` now (None: as a fresh iterator starts it)."""
        if self.live is not None:  # single process: asked now
            return self.live(self.ended)
        if self.ended and not self.persistent:
            return None  # the next epoch's workers are new copies of the loader's dataset
        if self.ended and self.core is not None and shard in self._ended_states():
            return self._ended_states()[shard]
        if self._handed_here(shard):  # what its last batch brought (None: nothing to save)
            return self._user_states[shard]
        # No batch of this worker handed out yet this epoch: its state as the epoch began.
        if self._carried is not None:
            started = self._started_states()
            return started[shard] if shard in started else self._carried[shard]
        slot = self.start["workers"][shard]
        if not _holds_user_state(slot):
            return None
        return (slot["dataset"], slot["iterator"], slot["ended"], slot["rng"])

    def _handed_here(self, shard: int) -> int:
        """The batches of worker ``shard`` this iterator handed out."""
        core = self.core
        if core is None:
            return self._single_below
        return core.handed_per_worker[(shard - self.rotation) % max(self.num_workers, 1)]

    def _started_states(self) -> dict[int, Any]:
        """Persistent workers: each shard's state right after this epoch's ``iter(dataset)``
        (their resume acks carry it)."""
        core = self.core
        if core is None:
            return {}
        return {self._shard(w): getattr(s, "payload", s) for w, s in core.started_payloads.items()}

    def _ended_states(self) -> dict[int, Any]:
        """Persistent workers: each shard's state as it ran dry (IterableDataset)."""
        core = self.core
        assert core is not None
        # (traced, a payload travels with its origin: ``messages.Traced``)
        return {self._shard(w): getattr(s, "payload", s) for w, s in core.ended_payloads.items()}

    @property
    def _no_user_state(self) -> bool:
        """Nothing of the user's can be in a state of this epoch (the common map-style case:
        ``state()`` then skips the per-worker look, a few us of a cheap batch's ~70)."""
        return (
            self.kind == MAP
            and self.live is None
            and not self.carries
            and self._carried is None
            and not self._start_holds
        )

    def state(self) -> dict[str, Any]:
        """What ``state_dict()`` returns: a new object, never changed afterwards."""
        if self.ended:
            state = fresh_state(self.shape, self.epoch + 1)
            assert self._next is not None
            state["sampler_rng"], state["base_seed"], sampler = self._next
            state["sampler_state"] = copy.deepcopy(sampler)
        else:
            state = fresh_state(self.shape, self.epoch)
            state["base_seed"] = self.base_seed
            state["sampler_rng"] = self._sampler_rng()
            if self.sampler_state is not None:
                state["sampler_state"] = copy.deepcopy(self.sampler_state)
            if self.kind == MAP:
                state["handed_below"], state["handed_above"] = self._handed_map()
            else:
                counts, last = self._counts()
                start = self.start
                if last is not None:
                    state["next_worker"] = (last + 1) % self.slots
                else:
                    state["next_worker"] = start["next_worker"]
                for w, worker in enumerate(state["workers"]):
                    worker["batches"] = start["workers"][w]["batches"] + counts[w]
        if self._no_user_state:
            return state
        for w, worker in enumerate(state["workers"]):
            user = self._user_state_of(w)
            if user is not None:
                # The user's own states are copied (bench: a deepcopy of the whole state was
                # most of state_dict()'s cost); the rest is built afresh here.
                worker["dataset"], worker["iterator"] = copy.deepcopy(list(user[:2]))
                worker["ended"] = user[2]
                worker["rng"] = user[3] if len(user) > 3 else None
        return state


def worker_starts(
    start: dict[str, Any] | None, *, items_per_batch: int, num_workers: int
) -> tuple[Any, ...] | None:
    """What each worker (by shard) of a resumed epoch does before its first fetch:
    ``("state", dataset's, iterator's, ran dry)`` load the user's states, ``("skip", n)``
    fast-forward an IterableDataset n items (nothing saved a state), or None."""
    if start is None:
        return None
    starts: list[Any] = []
    slots = start["workers"]
    for w in range(max(num_workers, 1)):
        if w >= len(slots):  # (a map-style state of fewer workers: nothing of theirs to load)
            starts.append(None)
            continue
        worker = slots[w]
        # (a worker's RNGs describe the epoch's start or end: with batches of its own handed
        # out they are not in the state)
        if _holds_user_state(worker):
            starts.append(
                ("state", worker["dataset"], worker["iterator"], worker["ended"], worker["rng"])
            )
        elif start["dataset_kind"] == ITERABLE and worker["batches"]:
            starts.append(("skip", worker["batches"] * items_per_batch))
        else:
            starts.append(None)
    return tuple(starts)


def start_fetcher(make_fetcher: Any, dataset: Any, start: Any, *, iterable: bool) -> Any:
    """A worker's first fetcher of a resumed epoch, in StatefulDataLoader's order: the
    dataset's state loaded, then ``iter(dataset)`` (the fetcher makes it), then the iterator's
    state loaded; or the items already handed out drawn and dropped (a fast-forward: the
    dataset's iterator runs over them again, nothing is collated)."""
    if start is not None and start[0] == "state" and start[4] is not None:
        set_worker_rng(start[4])  # (a persistent worker's, as it began or ended an epoch)
    if start is not None and start[0] == "state" and start[1] is not None:
        dataset.load_state_dict(start[1])
    fetcher = make_fetcher()
    if start is not None and start[0] == "state" and iterable:
        if start[2] is not None:
            fetcher.dataset_iter.load_state_dict(start[2])
        fetcher.ended = start[3]
    if start is not None and start[0] == "skip":
        for _ in range(start[1]):
            try:
                next(fetcher.dataset_iter)
            except StopIteration:
                fetcher.ended = True
                break
    return fetcher
