"""Shared-memory slots for big batches: one anonymous memfd per worker, its slots reused.

What this module owns: the memory a worker collates big tensors into and the main process reads
them from without a copy; who may reuse which part of it, when. It knows nothing of the
protocol (no tasks, no workers' states): a slot pool that never blocks it. When no slot is free
a worker simply uses private memory and the batch crosses the pipe as bytes (``transport.py``).

Layout. The main process creates one memfd per worker (``MainArena``; anonymous: no name in
``/dev/shm`` or anywhere else) and hands it to the worker once, inside ``WorkerChannels`` (an
inherited descriptor under fork, a duplicated one under spawn and forkserver, as
``multiprocessing`` passes a ``Connection``). Its first page holds two ``uint32`` counters per
slot; the slots follow, each a page-aligned region the worker appends (``ftruncate``) when it
needs one and no free slot is big enough, up to ``MAX_SLOTS`` slots and ``BUDGET_BYTES``:

* ``sent[i]``, written only by the worker: how many references to slot ``i`` it has sent;
* ``released[i]``, written only by the main process: how many of those references are dead.

A slot is the main process's while ``sent[i] != released[i]`` and the worker's while a tensor
of the worker still uses it. The worker reuses slot ``i`` only when neither holds it. Each
counter has one writer, so no atomic read-modify-write crosses a process; an aligned 4-byte
store is atomic on every platform torch runs on.

How a big batch travels. torch's ``default_collate`` asks ``UntypedStorage._new_shared`` for
the batch's memory whenever it runs in a worker ("concatenate directly into a shared memory
tensor to avoid an extra copy"). The worker installs ``WorkerArena.new_shared`` in its place
(``install``): a request of ``SLOT_MIN_BYTES`` or more gets a free slot; anything smaller, or
a request no slot can take, gets ordinary private memory (never a torch shared-memory segment:
our transport does not use them, and creating one per batch cost ~130 us). ``torch.stack``
then writes the batch straight into the slot: the one copy of each byte. The transport pickles
a tensor in a slot as a reference ``(slot, geometry, dtype, size, stride, offset)``
(``WorkerArena.ref``), counts it in ``sent`` once the message is complete, and the main process
builds a tensor over its own mapping of the slot (``MainArena.load``): no copy, no page fault
after the slot's first use, a message of a few hundred bytes.

Leak-freedom. Nothing has a name: the memfd is anonymous, so no crash leaves a file in
``/dev/shm``; its memory is freed by the kernel once the last descriptor and the last mapping of
it are gone. The worker's descriptor and mappings go with the worker, however it ends (SIGKILL
included). The main process closes its descriptor when the iterator shuts down; its mappings
are dropped with the arena and the last batch tensor over them (a batch stays valid after the
loader is gone, as torch's do). A slot the worker took and never sent (killed mid-batch, an
exception) is lost only for that worker's arena, which ends with the iterator. Nothing waits on
a slot, so no ordering is added to the protocol: the main process frees a slot when the
tensors over it are freed (a ``weakref.finalize`` on the array the storage holds), in whatever
thread that happens.

Off Linux (no ``memfd_create``) there is no arena: every batch takes the pipe.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate
from torch.utils.data._utils import worker as torch_worker

__all__ = [
    "BUDGET_BYTES",
    "MAX_SLOTS",
    "SLOT_MIN_BYTES",
    "ArenaHandle",
    "MainArena",
    "WorkerArena",
    "available",
    "small_batches_private",
]

# Allocations this large take a slot: below it a copy through the pipe costs less than a slot's
# bookkeeping (the same bound as the transport's out-of-band buffers).
SLOT_MIN_BYTES = 64 * 1024
# Slots per worker: the worker's tasks in flight (prefetch_factor, 2 by default) plus the batches
# the main process and the user still hold, with room for batches of several big tensors.
MAX_SLOTS = 16
# Bytes of slots per worker; past it a batch takes the pipe.
BUDGET_BYTES = 1 << 30

_PAGE = mmap.PAGESIZE
_HEADER_BYTES = _PAGE  # 2 * MAX_SLOTS uint32 counters, page-aligned so slots are too
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # fault a fresh slot in at once, in one call

# mmap(2) itself rather than Python's mmap module, which keeps a duplicate descriptor open per
# mapping (one fd per slot, per process, for as long as a batch lives).
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(fd: int, length: int, offset: int, populate: bool = False) -> np.ndarray:
    """``length`` bytes of ``fd`` from ``offset``, mapped shared, as a uint8 array (unmap it
    with ``_unmap``; the array does not own the mapping)."""
    flags = mmap.MAP_SHARED | (_POPULATE if populate else 0)
    addr = _libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, offset)
    if addr is None or addr == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    page = (ctypes.c_char * length).from_address(addr)
    # numpy's stubs take no ctypes array, which exports the buffer protocol:
    return np.frombuffer(page, dtype=np.uint8)  # type: ignore[call-overload]


def _unmap(arrays: list[np.ndarray]) -> None:
    for array in arrays:
        _libc.munmap(array.ctypes.data, array.nbytes)


def available() -> bool:
    """Whether this platform has anonymous memfds (Linux)."""
    return hasattr(os, "memfd_create")


def _sample_nbytes(sample: Any, depth: int = 0) -> int:
    """About how many bytes one sample adds to a batch (a large number when unsure)."""
    if isinstance(sample, torch.Tensor | np.ndarray):
        return int(sample.nbytes)
    if isinstance(sample, int | float | bool | str | bytes) or sample is None:
        return 8
    if depth < 3 and isinstance(sample, tuple | list):
        return sum(_sample_nbytes(x, depth + 1) for x in sample)
    if depth < 3 and isinstance(sample, dict):
        return sum(_sample_nbytes(x, depth + 1) for x in sample.values())
    return SLOT_MIN_BYTES


def small_batches_private(collate_fn: Any) -> Any:
    """``collate_fn``, but when it is torch's ``default_collate`` and the batch is smaller
    than a slot, collated as in the main process (private memory, ~4 us) instead of through
    the worker branch's shared-memory allocation (~23 us even when ours makes it private).

    Only ``default_collate`` is wrapped: what it does with ``get_worker_info()`` is known (the
    shared-memory choice, nothing else), a user's collate_fn may ask for its own reasons.
    """
    if collate_fn is not default_collate:
        return collate_fn

    def collate(batch: Any) -> Any:
        if not isinstance(batch, list | tuple) or not batch:
            return default_collate(batch)
        if len(batch) * _sample_nbytes(batch[0]) >= SLOT_MIN_BYTES:
            return default_collate(batch)
        info = torch_worker._worker_info
        torch_worker._worker_info = None
        try:
            return default_collate(batch)
        finally:
            torch_worker._worker_info = info

    return collate


def _round_up(n: int) -> int:
    return -(-n // _PAGE) * _PAGE


@dataclass(frozen=True)
class ArenaHandle:
    """A worker's arena as the worker receives it: the memfd's descriptor.

    Pickles as ``multiprocessing`` pickles a ``Connection`` (``reduction.DupFd``), so spawn and
    forkserver workers get their own duplicate; under fork the descriptor is inherited.
    """

    fd: int

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_handle, (reduction.DupFd(self.fd),)


def _rebuild_handle(dup: Any) -> ArenaHandle:
    return ArenaHandle(dup.detach())


class _Counters:
    """The header page: ``sent`` and ``released`` per slot, each with one writer."""

    def __init__(self, fd: int) -> None:
        self.page = _map(fd, _HEADER_BYTES, 0)
        # numpy's stubs lack the buffer protocol an ndarray has.
        self.words = memoryview(self.page).cast("I")  # type: ignore[arg-type]

    def bump(self, index: int) -> None:
        """Add one to counter ``index`` (its only writer calls this)."""
        self.words[index] = (self.words[index] + 1) & 0xFFFFFFFF


class MainArena:
    """The main process's side of one worker's arena: creates it, reads slots, releases them."""

    def __init__(self) -> None:
        self._fd: int | None = os.memfd_create("loaderspec-slots", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self._fd, _HEADER_BYTES)
            self._counters = _Counters(self._fd)
        except BaseException:
            os.close(self._fd)
            raise
        self._maps: dict[int, np.ndarray] = {}  # slot -> our mapping of it
        # Every mapping is undone when this object goes: after the last batch tensor over a
        # slot, whose finalizer holds it (_release is a bound method).
        self._mapped: list[np.ndarray] = [self._counters.page]
        weakref.finalize(self, _unmap, self._mapped)
        self._lock = threading.Lock()  # finalizers run in any thread (the pin thread too)
        self._pid = os.getpid()

    def handle(self) -> ArenaHandle:
        """What the worker is given (see ``ArenaHandle``)."""
        assert self._fd is not None, "the arena is closed"
        return ArenaHandle(self._fd)

    def load(self, ref: tuple[Any, ...]) -> torch.Tensor:
        """The tensor a worker's ``WorkerArena.ref`` describes, over our mapping of its slot.

        The slot stays the main process's until that tensor's storage is freed.
        """
        slot, offset, capacity, nbytes, dtype_name, size, stride, storage_offset = ref[1:9]
        requires_grad, is_param = ref[9], ref[10]
        mapped = self._maps.get(slot)
        if mapped is None:
            if self._fd is None:
                raise OSError("a batch arrived after its arena was closed")
            mapped = _map(self._fd, capacity, offset)
            self._mapped.append(mapped)
            self._maps[slot] = mapped
        array = mapped[:nbytes]
        weakref.finalize(array, self._release, slot)
        storage = torch.from_numpy(array).untyped_storage()
        dtype = getattr(torch, dtype_name)
        t = torch.empty(0, dtype=dtype).set_(storage, storage_offset, size, stride)
        if is_param:
            return torch.nn.Parameter(t, requires_grad=requires_grad)
        if requires_grad:
            t.requires_grad_(True)
        return t

    def _release(self, slot: int) -> None:
        if os.getpid() != self._pid:
            return  # a forked child dropping its copy of our objects: not ours to release
        with self._lock:
            self._counters.bump(MAX_SLOTS + slot)

    def close(self) -> None:
        """Close our descriptor (idempotent). The mappings stay while batch tensors over them
        live; the kernel frees the memory once the last of them is unmapped."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class _Slot:
    offset: int
    capacity: int
    mapped: np.ndarray  # the worker's mapping of it
    held: bool = False  # a tensor of this worker still uses it


class WorkerArena:
    """The worker's side: takes slots for big allocations and describes tensors in them.

    Its mappings last as long as it does (the worker's life), and so as long as any tensor
    over a slot (whose finalizer holds it)."""

    def __init__(self, handle: ArenaHandle) -> None:
        self._fd = handle.fd
        self._counters = _Counters(self._fd)
        self._mapped: list[np.ndarray] = [self._counters.page]
        weakref.finalize(self, _unmap, self._mapped)
        self._slots: list[_Slot] = []
        self._by_address: dict[int, int] = {}  # a slot's address here -> the slot
        self._end = _HEADER_BYTES
        self._pid = os.getpid()

    # ------------------------------------------------------------------ allocation --------
    def install(self) -> None:
        """Make torch's ``UntypedStorage._new_shared`` (what ``default_collate`` calls in a
        worker) allocate from this arena, in this process."""
        torch_new_shared = torch.UntypedStorage._new_shared
        arena = self

        def new_shared(cls: Any, size: int, *, device: Any = "cpu") -> Any:
            if torch.device(device).type != "cpu":
                return torch_new_shared(size, device=device)
            return arena.new_storage(size)

        # Replacing torch's classmethod for this process's shared storages (see above).
        torch.UntypedStorage._new_shared = classmethod(new_shared)  # type: ignore[method-assign,assignment]

    def new_storage(self, nbytes: int) -> torch.UntypedStorage:
        """``nbytes`` of memory: a slot's when one is free (or can be added), else private."""
        if nbytes >= SLOT_MIN_BYTES:
            storage = self._take(nbytes)
            if storage is not None:
                return storage
        return torch.UntypedStorage(nbytes)

    def _free(self, slot: int) -> bool:
        words = self._counters.words
        return not self._slots[slot].held and words[slot] == words[MAX_SLOTS + slot]

    def _take(self, nbytes: int) -> torch.UntypedStorage | None:
        fits = [i for i, s in enumerate(self._slots) if s.capacity >= nbytes and self._free(i)]
        best = min(fits, key=lambda i: self._slots[i].capacity, default=None)  # best fit
        if best is None:
            best = self._add(nbytes)
            if best is None:
                return None
        slot = self._slots[best]
        slot.held = True
        array = slot.mapped[:nbytes]
        weakref.finalize(array, self._unhold, best)
        return torch.from_numpy(array).untyped_storage()

    def _add(self, nbytes: int) -> int | None:
        capacity = _round_up(nbytes)
        if len(self._slots) >= MAX_SLOTS or self._end + capacity > BUDGET_BYTES:
            return None
        try:
            os.ftruncate(self._fd, self._end + capacity)
            mapped = _map(self._fd, capacity, self._end, populate=True)
        except OSError:
            return None  # out of memory or address space: the pipe will do
        self._mapped.append(mapped)
        self._slots.append(_Slot(self._end, capacity, mapped))
        self._by_address[mapped.ctypes.data] = len(self._slots) - 1
        self._end += capacity
        return len(self._slots) - 1

    def _unhold(self, slot: int) -> None:
        if os.getpid() == self._pid:
            self._slots[slot].held = False

    # ------------------------------------------------------------------ sending -----------
    @property
    def has_slots(self) -> bool:
        """Whether any slot exists yet (none: no tensor can lie in one)."""
        return bool(self._slots)

    def ref(self, t: torch.Tensor) -> tuple[Any, ...] | None:
        """A reference to ``t`` if its storage is one of our slots (else None): what
        ``MainArena.load`` rebuilds it from. Count it with ``sent`` once the message is whole."""
        storage = t.untyped_storage()
        slot = self._by_address.get(storage.data_ptr())
        if slot is None:
            return None
        s = self._slots[slot]
        return (
            "slot",
            slot,
            s.offset,
            s.capacity,
            storage.nbytes(),
            str(t.dtype).removeprefix("torch."),
            tuple(t.shape),
            t.stride(),
            t.storage_offset(),
            t.requires_grad,
            type(t) is torch.nn.Parameter,
        )

    def copy_in(self, t: torch.Tensor) -> torch.Tensor | None:
        """A contiguous copy of ``t`` in a free slot (one copy instead of the pipe's two), or
        None when no slot is free."""
        storage = self._take(t.numel() * t.element_size())
        if storage is None:
            return None
        # torch's stubs type set_'s storage as TypedStorage; an UntypedStorage is what it takes.
        out = torch.empty(0, dtype=t.dtype).set_(storage, 0, t.shape)  # type: ignore[call-overload]
        out.copy_(t)
        return out

    def sent(self, slots: list[int]) -> None:
        """The message referring to ``slots`` is complete: they are the main process's now."""
        for slot in slots:
            self._counters.bump(slot)
