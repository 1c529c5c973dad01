"""Batch transport: how a worker's batch crosses a ``multiprocessing`` Connection.

What this module owns: turning one batch (any nest of tuples, lists and dicts of tensors, numpy
arrays, Python scalars, strings, ``ExceptionWrapper`` or other picklables) into bytes and back,
and moving those bytes over one ``multiprocessing.connection.Connection``. It knows nothing of
the protocol: no task indices, no workers, no queues.

Why not torch's reducer: ``torch.multiprocessing`` registers a reduction on ``ForkingPickler``
that moves every tensor's storage into its own shared-memory segment and sends a file descriptor
for it (a socket round trip to a resource-sharer thread per storage). That costs 1-2 ms per batch
however small the tensors are, and for a cheap dataset that *is* the loader's throughput. Here a
tensor is pickled (protocol 5) as its dtype, size, stride and the bytes of the storage span it
covers:

* small buffers travel in-band, inside the pickle stream, so a small batch is one ``write`` and
  one ``read`` of a few hundred bytes;
* buffers of at least ``OOB_THRESHOLD`` bytes travel out-of-band: ``send`` hands them to the
  kernel with ``writev`` straight from the tensor's memory, and ``recv`` reads each one with
  ``readv`` straight into a fresh, 64-byte-aligned torch allocation that becomes the received
  tensor's storage. No copy in user space on either side.

* with a worker's arena (``send(..., arena)``, ``reference/arena.py``), a tensor that lives in
  one of the worker's shared-memory slots (``default_collate`` wrote the batch there) travels
  as a reference to the slot (a pickle persistent id), and another big tensor is copied into a
  free slot (one copy instead of the pipe's two); ``recv(..., arena)`` builds the tensor over
  the main process's mapping of the slot. No slot free: the pipe, as above.

Nothing goes through ``/dev/shm``: the slots are an anonymous memfd, so nothing can leak there
whoever dies when. Without slots, a pipe grown to 1 MiB (``_grow_pipe``) carries a 4 MB batch in
~3.5-6 ms (2 loaded cores), about torch's shared-memory reducer; with them a 1 MB-item epoch
costs the collate's one copy per byte.

The reduction lives in a *private* ``dispatch_table`` on our own ``Pickler``: torch's global
``ForkingPickler`` registrations are neither used nor touched, so torch's own loader running in
the same process behaves exactly as before.

Wire format: one Connection message per batch, framed exactly as ``Connection.send_bytes``
frames it (a big-endian ``!i`` length, or ``-1`` then ``!Q`` for 2 GiB and more), so
``conn.poll()`` and ``multiprocessing.connection.wait`` work unchanged and ``unpack`` can parse
a message read with ``conn.recv_bytes()``. The payload is one kind byte, then:

* ``KIND_INBAND``: the pickle stream;
* ``KIND_OOB``: ``!IQ`` (number of out-of-band buffers, pickle length), one ``!Q`` length per
  buffer, the pickle stream, then the buffers in order;
* either with the ``KIND_SLOTS`` flag: the pickle's persistent ids are slot references, which
  only ``recv`` with the sender's arena can resolve.

A message cut short (the sender died mid-write) raises ``TornMessage`` (an ``OSError``, as
``Connection`` raises), which is not ``EOFError`` (the sender closed between messages).
"""

from __future__ import annotations

import copyreg
import fcntl
import io
import os
import pickle
import struct
import weakref
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import torch
from loaderspec.reference.arena import MainArena, WorkerArena

__all__ = [
    "OOB_THRESHOLD",
    "PlainReader",
    "Reader",
    "TornMessage",
    "UnpicklableBatchError",
    "dumps",
    "loads",
    "pack",
    "recv",
    "send",
    "send_plain",
    "unpack",
    "write",
]

# Buffers this large go out-of-band. Below it a copy into the pickle stream is cheaper than a
# separate readv, and a small batch stays one syscall each way.
OOB_THRESHOLD = 64 * 1024

KIND_INBAND = 0
KIND_OOB = 1
KIND_SLOTS = 2  # a flag on either kind: the pickle refers to arena slots (persistent ids)
_INBAND = bytes((KIND_INBAND,))

_I32 = struct.Struct("!i")
_U64 = struct.Struct("!Q")
_HEAD = struct.Struct("!iB")  # a message's length and its kind byte
_OOB_HEAD = struct.Struct("!IQ")
_MAX_I32 = 0x7FFFFFFF
# Large messages grow their pipe to this (Linux's default pipe-max-size), see _grow_pipe.
PIPE_TARGET_BYTES = 1 << 20
_F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)
_F_GETPIPE_SZ: int = getattr(fcntl, "F_GETPIPE_SZ", 0)

# What a Reader asks of one read(2) when nothing is buffered: every small message waiting (an
# index message is a few dozen bytes, a cheap batch about 1.2 KB).
READ_AHEAD_BYTES = 1 << 16
# os.writev takes at most IOV_MAX buffers per call; Linux's is 1024.
_IOV_MAX = 1024


class UnpicklableBatchError(TypeError):
    """The batch holds an object that cannot be pickled; the message names its type and where.

    Raised by ``pack`` and ``send`` before anything is written, so the connection is unchanged.
    """


class TornMessage(OSError):
    """The connection reached end of file in the middle of a message (the sender died).

    The connection is unusable afterwards: its framing is lost.
    """


# --------------------------------------------------------------------------------------------
# Tensors


_DTYPE_NAME: dict[torch.dtype, str] = {
    d: str(d).removeprefix("torch.") for d in vars(torch).values() if isinstance(d, torch.dtype)
}
_DTYPE_BY_NAME: dict[str, torch.dtype] = {name: d for d, name in _DTYPE_NAME.items()}
# The dtypes ``Tensor.numpy()`` exports directly.
_NUMPY_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


def _plain_strided_cpu(t: torch.Tensor) -> bool:
    """Whether ``t`` is an ordinary CPU tensor whose bytes we may copy as they lie in memory.

    Anything else (sparse, quantized, nested, conjugate/negative views, other devices, meta)
    goes through torch's own ``Tensor.__reduce_ex__``: slower, but torch knows its layout.
    """
    return (
        t.is_cpu
        and t.layout is torch.strided
        and not (t.is_quantized or t.is_nested or t.is_conj() or t.is_neg())
    )


def _copied_into_a_slot(t: torch.Tensor) -> bool:
    """Whether a tensor that lies in no arena slot goes into a free one (``_slot_refs``): big
    enough to be worth it, and a plain strided CPU tensor."""
    return t.nbytes >= OOB_THRESHOLD and _plain_strided_cpu(t)


def _span_elements(size: Sequence[int], stride: Sequence[int]) -> int:
    """Number of storage elements a (size, stride) view touches, from its first element.

    Strides of a CPU tensor are never negative, so the last element sits at
    ``sum((n - 1) * s)``. An empty tensor touches nothing.
    """
    if any(n == 0 for n in size):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))


def _reduce_tensor(t: torch.Tensor) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Pickle a tensor as dtype, size, stride, requires_grad and its storage span's bytes.

    Only the span the view covers is sent, not the whole storage: a view of one row of a large
    matrix sends one row. The receiver gets a tensor with the same dtype, size and stride whose
    storage offset is 0 (it owns a fresh storage, as with torch's reducer each tensor has its
    own; aliasing between *different* tensors of one batch is not kept).
    """
    if t.requires_grad and not t.is_leaf:
        # torch's reducer refuses the same way: autograd cannot cross a process boundary.
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, "
            "since autograd does not support crossing process boundaries.  "
            "If you just want to transfer the data, call detach() on the tensor "
            "before serializing (e.g., putting it on the queue)."
        )
    if not _plain_strided_cpu(t):
        return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    size = tuple(t.shape)
    stride = t.stride()
    if t.is_contiguous() and t.dim() > 0 and t.numel() > 0 and stride[-1] == 1:
        # Fast path (every collated batch): the bytes are exactly the tensor's elements.
        # (A size-1 last dimension may have any stride and still be "contiguous"; view(uint8)
        # refuses that, so it takes the general path.)
        plain = t.detach() if t.requires_grad else t
        # numpy's own dtypes are exported as they are (0.8 us less than through a byte view);
        # the others (bfloat16, float8, ...) as bytes. The buffer's bytes are the same.
        array = plain.numpy() if t.dtype in _NUMPY_DTYPES else plain.view(torch.uint8).numpy()
        # (numpy's stubs lack the buffer protocol an ndarray has: the ignores below)
        data: pickle.PickleBuffer | None = pickle.PickleBuffer(array)  # type: ignore[arg-type]
    elif (nbytes := _span_elements(size, stride) * t.element_size()) == 0:
        data = None
    else:
        # A flat uint8 tensor over exactly the span; numpy exposes it as a buffer without a copy
        # (the array keeps the tensor, hence the storage, alive while the pickler holds it).
        span = torch.empty(0, dtype=torch.uint8).set_(
            t.untyped_storage(), t.storage_offset() * t.element_size(), (nbytes,), (1,)
        )
        data = pickle.PickleBuffer(span.numpy())  # type: ignore[arg-type]  # (numpy's stubs)
    # The dtype travels as its name and the class as a flag: pickling a torch.dtype or a class
    # is a global lookup by name on both sides, several microseconds each.
    is_param = type(t) is torch.nn.Parameter
    return _rebuild_tensor, (_DTYPE_NAME[t.dtype], size, stride, t.requires_grad, is_param, data)


def _rebuild_tensor(
    dtype_name: str,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    requires_grad: bool,
    is_param: bool,
    data: Any,
) -> torch.Tensor:
    """Inverse of ``_reduce_tensor``: a tensor whose storage is the received buffer itself.

    ``data`` is a bytearray (in-band) or a writable memoryview over a torch allocation
    (out-of-band, from ``recv``); either way no copy is made here.
    """
    dtype = _DTYPE_BY_NAME[dtype_name]
    if data is None:
        t = torch.empty_strided(size, stride, dtype=dtype)
    else:
        # The buffer read as this dtype, then set_ to the sent geometry over its own storage
        # (not view or as_strided): a plain tensor, no view of another. One tensor is made
        # instead of a byte tensor and an empty one: 2.5 us a cheap batch instead of 5.
        t = torch.frombuffer(data, dtype=dtype)
        t.set_(t.untyped_storage(), 0, size, stride)
    if is_param:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


# Our pickler's private table: copyreg's defaults plus tensors. Lookup is by exact type, so
# tensor subclasses other than Parameter keep their own __reduce_ex__.
_DISPATCH: dict[type, Callable[[Any], Any]] = {
    **copyreg.dispatch_table,
    torch.Tensor: _reduce_tensor,
    torch.nn.Parameter: _reduce_tensor,
}


# --------------------------------------------------------------------------------------------
# pack / unpack


class _NeedsSlots(Exception):
    """Raised by ``_slot_checked`` reducers: this message refers to arena slots, so it is
    pickled again with the slots' ``persistent_id``."""


def _dumps(
    obj: Any, arena: WorkerArena | None = None
) -> tuple[bytes, list[pickle.PickleBuffer], list[int]]:
    """Pickle ``obj``; return the stream, the buffers left out of it, and the arena slots it
    refers to (one entry per reference), counted as sent (``WorkerArena.sent``) once the whole
    of ``obj`` pickled: none is counted when it does not.

    A message is first pickled without a ``persistent_id``: the pickler calls one for every
    object it meets (each int, tuple and string of the message, ~1 us each: 7 of the 20 us a
    cheap batch took to pack), while only a tensor can refer to a slot. With an ``arena``, its
    table (``_slot_checked``) stops that pass at the first tensor that lies in a slot or would
    be copied into one; only such a message is pickled again, with the slots. The first pass's
    pickler is kept for the next message (``_FirstPass``)."""
    passes = _PLAIN_PASSES if arena is None else _first_passes(arena)
    try:
        first = passes.pop()
    except IndexError:  # none free (the first message, or another thread has it)
        first = _FirstPass(_DISPATCH if arena is None else _slot_checked(arena))
    try:
        stream, oob = first.dump(obj)
    except _NeedsSlots:
        assert arena is not None  # only the arena's table raises it
        return _pickle(obj, _DISPATCH, arena)
    except Exception as exc:
        raise _unpicklable_error(obj, exc) from exc
    finally:
        passes.append(first)
    return stream, oob, []


class _FirstPass:
    """A pickler with its stream, reused message after message: making one is ~1.7 us of the
    7 it takes to pickle a cheap batch. Taken from a free list and put back after each message
    (``_dumps``), so a thread or a nested call never shares one in use."""

    def __init__(self, table: dict[type, Callable[[Any], Any]]) -> None:
        self.stream = io.BytesIO()
        self.oob: list[pickle.PickleBuffer] = []
        self.pickler = pickle.Pickler(self.stream, protocol=5, buffer_callback=self._keep)
        self.pickler.dispatch_table = table

    def _keep(self, buf: pickle.PickleBuffer) -> bool:
        # pickle's contract: a true return value keeps the buffer in the stream.
        if buf.raw().nbytes >= OOB_THRESHOLD:
            self.oob.append(buf)
            return False
        return True

    def dump(self, obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
        """The stream and the out-of-band buffers of ``obj``. Nothing of ``obj`` stays here
        afterwards, whatever happened (the memo would keep its tensors, and their slots, alive).
        """
        oob: list[pickle.PickleBuffer] = []
        self.oob = oob
        try:
            self.pickler.dump(obj)
            return self.stream.getvalue(), oob
        finally:
            self.pickler.clear_memo()
            self.oob = []
            self.stream.seek(0)
            self.stream.truncate()


# Free first-pass picklers: without an arena, and per worker arena (with its table).
_PLAIN_PASSES: list[_FirstPass] = []
_ARENA_PASSES: weakref.WeakKeyDictionary[WorkerArena, list[_FirstPass]] = (
    weakref.WeakKeyDictionary()
)


def _first_passes(arena: WorkerArena) -> list[_FirstPass]:
    passes = _ARENA_PASSES.get(arena)
    if passes is None:
        passes = _ARENA_PASSES[arena] = []
    return passes


def _pickle(
    obj: Any, table: dict[type, Callable[[Any], Any]], arena: WorkerArena
) -> tuple[bytes, list[pickle.PickleBuffer], list[int]]:
    """``_dumps``'s second pass: ``table`` as the dispatch table, and tensors travel as
    references to ``arena``'s slots (a ``persistent_id``)."""
    oob: list[pickle.PickleBuffer] = []
    slots: list[int] = []
    # Tensors copied into slots while pickling: alive until their slots are counted as sent,
    # or a later copy in the same message could take the same (then free) slot.
    copies: list[torch.Tensor] = []

    def keep_in_band(buf: pickle.PickleBuffer) -> bool:
        # pickle's contract: a true return value keeps the buffer in the stream.
        if buf.raw().nbytes >= OOB_THRESHOLD:
            oob.append(buf)
            return False
        return True

    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=5, buffer_callback=keep_in_band)
    pickler.dispatch_table = table
    # A Pickler's persistent_id is meant to be set (pickle's docs); the stubs say method.
    pickler.persistent_id = _slot_refs(arena, slots, copies)  # type: ignore[method-assign]
    try:
        pickler.dump(obj)
    except Exception as exc:
        raise _unpicklable_error(obj, exc) from exc
    if slots:
        arena.sent(slots)  # the copies still hold theirs
    return stream.getvalue(), oob, slots


# Each worker arena's dispatch table for the first pass (``_dumps``), made once per arena.
_CHECKED: weakref.WeakKeyDictionary[WorkerArena, dict[type, Callable[[Any], Any]]] = (
    weakref.WeakKeyDictionary()
)


def _slot_checked(arena: WorkerArena) -> dict[type, Callable[[Any], Any]]:
    """``_DISPATCH`` whose tensor reducer raises ``_NeedsSlots`` for a tensor that
    ``_slot_refs`` would send as a slot reference (one in a slot, or a big one to copy in)."""
    table = _CHECKED.get(arena)
    if table is not None:
        return table

    weak = weakref.ref(arena)  # the table is the cache's value: it must not keep its key alive

    def reduce_unless_slot(t: torch.Tensor) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        owner = weak()
        if not (t.requires_grad and not t.is_leaf) and (
            (owner is not None and owner.has_slots and owner.ref(t) is not None)
            or _copied_into_a_slot(t)
        ):
            raise _NeedsSlots
        return _reduce_tensor(t)

    table = _CHECKED[arena] = {
        **_DISPATCH,
        torch.Tensor: reduce_unless_slot,
        torch.nn.Parameter: reduce_unless_slot,
    }
    return table


def _slot_refs(
    arena: WorkerArena, slots: list[int], copies: list[torch.Tensor]
) -> Callable[[Any], Any]:
    """The pickler's ``persistent_id``: a tensor in an arena slot (or a big one copied into a
    free slot, kept in ``copies``) travels as a reference to it (``reference/arena.py``); all
    else is pickled."""

    def persistent_id(obj: Any) -> Any:
        kind = type(obj)
        if kind is not torch.Tensor and kind is not torch.nn.Parameter:
            return None
        if obj.requires_grad and not obj.is_leaf:
            return None  # _reduce_tensor raises torch's error for it
        ref = arena.ref(obj)
        if ref is None and _copied_into_a_slot(obj):
            copy = arena.copy_in(obj.detach())
            if copy is not None:
                copies.append(copy)
                ref = arena.ref(copy)
                assert ref is not None
                ref = (*ref[:9], obj.requires_grad, kind is torch.nn.Parameter)
        if ref is not None:
            slots.append(ref[1])
        return ref

    return persistent_id


def pack(obj: Any, arena: WorkerArena | None = None) -> list[bytes | memoryview]:
    """Serialise ``obj`` to a list of buffers whose concatenation is one message payload.

    The first buffer is the header and pickle stream; any others are out-of-band tensor or
    array bytes, viewed without a copy (keep ``obj`` unchanged until they are sent). With
    ``arena`` (a worker's), tensors in its slots become references to them, and big tensors are
    copied into a free slot rather than through the pipe; the slots are counted as sent here,
    before the write, since the reader may release them as soon as it has read the message (a
    message never written, the writer dying, loses them only for the dying worker's arena).

    Raises:
        UnpicklableBatchError: ``obj`` holds something pickle refuses; nothing was produced and
            no slot was counted.
    """
    stream, oob, slots = _dumps(obj, arena)
    flags = KIND_SLOTS if slots else 0
    if not oob:
        return [bytes((KIND_INBAND | flags,)) + stream]
    raws = [b.raw() for b in oob]
    head = bytearray((KIND_OOB | flags,))
    head += _OOB_HEAD.pack(len(raws), len(stream))
    for raw in raws:
        head += _U64.pack(raw.nbytes)
    head += stream
    return [bytes(head), *raws]


def dumps(obj: Any) -> bytes:
    """``pack`` joined into one ``bytes`` payload, for ``conn.send_bytes``.

    Costs one copy of any out-of-band buffer; ``send`` avoids it.
    """
    return b"".join(pack(obj))  # (one bytes part: join returns it, no copy)


def loads(data: bytes | bytearray | memoryview) -> Any:
    """``unpack`` of one payload, e.g. what ``conn.recv_bytes()`` returned."""
    return unpack(data)


def _parse_oob_head(payload: memoryview) -> tuple[list[int], memoryview, int]:
    """Split an OOB payload: buffer lengths, the pickle stream, and where the buffers start."""
    count, stream_len = _OOB_HEAD.unpack_from(payload, 1)
    pos = 1 + _OOB_HEAD.size
    lengths = [_U64.unpack_from(payload, pos + 8 * i)[0] for i in range(count)]
    pos += 8 * count
    return lengths, payload[pos : pos + stream_len], pos + stream_len


def _fresh_buffer(nbytes: int) -> memoryview:
    """A writable buffer backed by torch's CPU allocator (64-byte aligned, owned by a tensor)."""
    # numpy's stubs lack the buffer protocol an ndarray has.
    return memoryview(torch.empty(nbytes, dtype=torch.uint8).numpy())  # type: ignore[arg-type]


def unpack(data: bytes | bytearray | memoryview | Sequence[bytes | memoryview]) -> Any:
    """Inverse of ``pack``: takes one payload (or ``pack``'s list of buffers).

    Out-of-band buffers are copied out of ``data`` into fresh allocations, so the result never
    aliases ``data`` (which may be read-only ``bytes``).

    Raises:
        ValueError: ``data`` is not a payload ``pack`` made.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        data = b"".join(data)
    payload = memoryview(data).cast("B")
    if len(payload) == 0:
        raise ValueError("empty transport payload")
    kind = payload[0]
    if kind == KIND_INBAND:
        return pickle.loads(payload[1:])
    if kind != KIND_OOB:
        raise ValueError(f"unknown transport payload kind {kind}")
    lengths, stream, pos = _parse_oob_head(payload)
    buffers = []
    for n in lengths:
        buf = _fresh_buffer(n)
        buf[:] = payload[pos : pos + n]
        buffers.append(buf)
        pos += n
    return pickle.loads(stream, buffers=buffers)


# --------------------------------------------------------------------------------------------
# send / recv over a Connection


def _frame_header(n: int) -> bytes:
    """``Connection.send_bytes``'s length prefix for an ``n``-byte payload."""
    if n > _MAX_I32:
        return _I32.pack(-1) + _U64.pack(n)
    return _I32.pack(n)


def _advance(views: list[Any], done: int) -> None:
    """Drop the first ``done`` bytes of ``views`` (after a partial writev/readv)."""
    while done:
        head = views[0]
        if done >= len(head):
            done -= len(head)
            views.pop(0)
        else:
            views[0] = head[done:]
            done = 0


def _writev_all(fd: int, buffers: list[bytes | memoryview]) -> None:
    """Write every buffer, in order, resuming after partial writes (a full pipe blocks)."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        _advance(views, os.writev(fd, views[:_IOV_MAX]))


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a pipe write above PIPE_BUF may be partial; a full pipe blocks)."""
    written = os.write(fd, data)  # all of it, but for a message above PIPE_BUF: then the rest
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


def _grow_pipe(fd: int, message_bytes: int) -> None:
    """Enlarge a pipe's kernel buffer (64 KiB by default) towards ``PIPE_TARGET_BYTES``.

    A 4 MB batch through a 64 KiB pipe takes 64 sender/receiver hand-overs; with 1 MiB, four.
    Measured on 2 cores: 4 x 1 MB batches went from ~15 ms to ~5.5 ms each. Best effort: a
    socket (duplex ``Pipe``) or a user over its pipe-buffer quota keeps its size.
    """
    if _F_SETPIPE_SZ is None:
        return
    try:
        if fcntl.fcntl(fd, _F_GETPIPE_SZ) < min(message_bytes, PIPE_TARGET_BYTES):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_TARGET_BYTES)
    except OSError:
        pass


def send_plain(conn: Connection, obj: Any) -> None:
    """Send ``obj`` (no big buffers in it: an index message) as plain pickle in one message
    that ``recv`` reads; ~0.4 us to pickle a task against ~3 us through ``send``'s table.

    Raises:
        OSError: from the write (e.g. ``BrokenPipeError``).
    """
    payload = pickle.dumps(obj, protocol=5)
    _write_all(conn.fileno(), _frame_header(len(payload) + 1) + _INBAND + payload)


def send(conn: Connection, obj: Any, arena: WorkerArena | None = None) -> None:
    """Send ``obj`` as one message on ``conn`` (see the module header for the format).

    With ``arena`` (a worker's), tensors in its slots travel as references to them, and big
    tensors are copied into a free slot rather than through the pipe.

    Raises:
        UnpicklableBatchError: nothing was written; ``conn`` is still usable.
        OSError: from the write (e.g. ``BrokenPipeError``); the message may be partly written.
    """
    write(conn, pack(obj, arena))


def write(conn: Connection, parts: list[bytes | memoryview]) -> None:
    """Write one message ``pack`` made (blocks while the pipe is full).

    Raises:
        OSError: from the write (e.g. ``BrokenPipeError``); the message may be partly written.
    """
    if len(parts) == 1:
        # Small batch: the frame header and the payload in one write (what Connection.send_bytes
        # does, without its Python layers: ~2 us a message).
        _write_all(conn.fileno(), _frame_header(len(parts[0])) + parts[0])
        return
    total = sum(len(p) for p in parts)
    fd = conn.fileno()
    _grow_pipe(fd, total)
    _writev_all(fd, [_frame_header(total), *parts])


def _read_exact(fd: int, n: int, *, at_start: bool) -> bytes:
    """Read exactly ``n`` bytes (``at_start``: a clean EOF before any byte is ``EOFError``)."""
    first = os.read(fd, n)
    if len(first) == n:  # a message's parts mostly come whole: one read, no list
        return first
    if not first:
        if at_start:
            raise EOFError
        raise TornMessage("got end of file during message")
    chunks = [first]
    remaining = n - len(first)
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            raise TornMessage("got end of file during message")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _readv_into(fd: int, buffers: list[memoryview]) -> None:
    """Fill every buffer from ``fd`` with ``readv``, resuming after short reads."""
    views = [b for b in buffers if len(b)]
    while views:
        got = os.readv(fd, views[:_IOV_MAX])
        if got == 0:
            raise TornMessage("got end of file during message")
        _advance(views, got)


class Reader:
    """The one reader of a pipe's messages (``send``'s and ``send_plain``'s).

    With ``read_ahead`` (bytes), a read that finds nothing buffered asks the pipe for up to
    that much: one ``read(2)`` takes every small message waiting, where reading one message
    at a time takes two (its length, then its bytes) and a ``poll`` before them. What it read
    ahead is in its buffer, not in the pipe: only this reader may read the pipe, and
    ``has_message()`` says whether ``recv()`` can return without reading it. A message's
    bytes beyond ``read_ahead`` are read exactly (a big batch is never copied through the
    buffer). ``read_ahead=0``: every read asks for exactly what the message needs.
    """

    def __init__(self, conn: Connection, read_ahead: int = READ_AHEAD_BYTES) -> None:
        self._fd = conn.fileno()
        self._read_ahead = read_ahead
        self._buffer = b""
        self._pos = 0  # where the unread part of _buffer starts

    def has_message(self) -> bool:
        """A whole message is buffered (``recv()`` reads nothing from the pipe)."""
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < 5:
            return False
        (size,) = _I32.unpack_from(buffer, pos)
        return 0 < size <= len(buffer) - pos - 4

    def _take(self, n: int, *, at_start: bool = False) -> bytes | memoryview:
        """The next ``n`` bytes: from the buffer, then from the pipe (a clean EOF before the
        first byte of a message is ``EOFError``, inside one ``TornMessage``)."""
        buffer, pos = self._buffer, self._pos
        have = len(buffer) - pos
        if have >= n:
            self._pos = pos + n
            return memoryview(buffer)[pos : pos + n]
        if n - have > self._read_ahead:  # the rest is big: read exactly it, past the buffer
            self._buffer, self._pos = b"", 0
            rest = _read_exact(self._fd, n - have, at_start=at_start and not have)
            return buffer[pos:] + rest if have else rest
        while len(buffer) - pos < n:
            chunk = os.read(self._fd, self._read_ahead)
            if not chunk:
                self._buffer, self._pos = b"", 0
                if at_start and len(buffer) == pos:
                    raise EOFError
                raise TornMessage("got end of file during message")
            buffer = buffer[pos:] + chunk if len(buffer) > pos else chunk
            pos = 0
        self._buffer, self._pos = buffer, pos + n
        return memoryview(buffer)[pos : pos + n]

    def _take_into(self, buffers: list[memoryview]) -> None:
        """Fill ``buffers`` in order: what is buffered first, the rest straight from the pipe."""
        views = [b for b in buffers if len(b)]
        buffer, pos = self._buffer, self._pos
        while views and pos < len(buffer):
            n = min(len(views[0]), len(buffer) - pos)
            views[0][:n] = memoryview(buffer)[pos : pos + n]
            pos += n
            _advance(views, n)
        self._buffer, self._pos = (buffer, pos) if pos < len(buffer) else (b"", 0)
        _readv_into(self._fd, views)

    def recv(self, arena: MainArena | None = None) -> Any:
        """The next message sent by ``send`` or ``send_plain`` (blocks until it is whole).
        ``arena``: the sender's (``MainArena``), for messages that refer to its slots.

        Raises:
            EOFError: the other end closed between messages.
            TornMessage: the other end died mid-message; the framing is lost.
            ValueError: the message is not one ``send`` made, or refers to slots and
                ``arena`` is None.
        """
        buffer, pos = self._buffer, self._pos
        if len(buffer) == pos and self._read_ahead:  # nothing buffered: take what is waiting
            buffer, pos = os.read(self._fd, self._read_ahead), 0
            if not buffer:
                raise EOFError
            self._buffer = buffer
        if len(buffer) - pos >= 5:  # the common case: a small message whole in the buffer
            size, kind = _HEAD.unpack_from(buffer, pos)
            end = pos + 4 + size
            if kind == KIND_INBAND and size > 0 and end <= len(buffer):
                self._pos = end
                return pickle.loads(memoryview(buffer)[pos + 5 : end])
        self._pos = pos
        take = self._take
        head = take(5, at_start=True)  # the length and the kind byte (every payload has one)
        (size,) = _I32.unpack_from(head)
        kind = head[4]
        if size == -1:  # 2 GiB or more: an 8-byte length, whose first byte we have read
            (size,) = _U64.unpack(bytes(head[4:]) + bytes(take(7)))
            kind = take(1)[0]
        elif size <= 0:
            raise ValueError(f"not a message send made (length {size})")
        if kind == KIND_INBAND:
            return pickle.loads(take(size - 1))
        if kind & ~(KIND_OOB | KIND_SLOTS):
            raise ValueError(f"unknown transport payload kind {kind}")
        if kind & KIND_SLOTS and arena is None:
            raise ValueError("a message refers to shared-memory slots but no arena was given")
        if not kind & KIND_OOB:
            return _loads_slots(bytes(take(size - 1)), [], arena)
        count, stream_len = _OOB_HEAD.unpack(take(_OOB_HEAD.size))
        lengths = struct.unpack(f"!{count}Q", take(8 * count))
        stream = bytes(take(stream_len))
        buffers = [_fresh_buffer(n) for n in lengths]
        self._take_into(buffers)
        if kind & KIND_SLOTS:
            return _loads_slots(stream, buffers, arena)
        return pickle.loads(stream, buffers=buffers)


class PlainReader(Reader):
    """A ``Reader`` of a pipe that carries only ``send_plain`` messages (an index queue), with
    the read-ahead that takes several waiting tasks per read."""

    def recv(self, arena: MainArena | None = None) -> Any:
        """The next message (blocks until it is whole).

        Raises:
            EOFError: the writer closed between messages.
            TornMessage: the writer closed in the middle of a message.
            ValueError: a message ``send_plain`` did not write.
        """
        head = self._take(5, at_start=True)
        (size,) = _I32.unpack_from(head)
        if size <= 0 or head[4] != KIND_INBAND:
            raise ValueError("not a message send_plain wrote")
        return pickle.loads(self._take(size - 1))


def recv(conn: Connection, arena: MainArena | None = None) -> Any:
    """Receive one message sent by ``send`` and return the object, reading exactly that
    message from the pipe (a ``Reader`` with no read-ahead; a pipe read repeatedly is better
    served by one ``Reader``, which may read ahead).

    Blocks until a message arrives (use ``conn.poll(timeout)`` first for a bound). ``arena``:
    the sender's (``MainArena``), for messages that refer to its slots.

    Raises:
        EOFError: the other end closed between messages.
        TornMessage: the other end died mid-message; the connection's framing is lost.
        ValueError: the message is not one ``send`` made, or refers to slots and ``arena`` is
            None.
    """
    return Reader(conn, read_ahead=0).recv(arena)


def _loads_slots(stream: bytes, buffers: list[memoryview], arena: MainArena | None) -> Any:
    """Unpickle a stream whose persistent ids are slot references of ``arena``."""
    assert arena is not None
    unpickler = pickle.Unpickler(io.BytesIO(stream), buffers=buffers)
    # An Unpickler's persistent_load is meant to be set (pickle's docs); the stubs say method.
    unpickler.persistent_load = arena.load  # type: ignore[method-assign]
    return unpickler.load()


# --------------------------------------------------------------------------------------------
# Errors


def _unpicklable_error(obj: Any, exc: BaseException) -> UnpicklableBatchError:
    """Name the innermost unpicklable object of ``obj`` (type and path) in a clear error."""
    path, culprit = _find_unpicklable(obj, "batch")
    kind = type(culprit)
    return UnpicklableBatchError(
        f"cannot send {path} of type {kind.__module__}.{kind.__qualname__} "
        f"from a DataLoader worker: {type(exc).__name__}: {exc}"
    )


def _children(obj: Any, path: str) -> Iterable[tuple[str, Any]]:
    """The members of a container, each with its path, for locating an unpicklable leaf."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield f"{path}[{key!r}]", value
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield f"{path}[{i}]", value


def _find_unpicklable(obj: Any, path: str) -> tuple[str, Any]:
    """Descend into the first member that fails to pickle; stop where no member fails.

    Runs only after a failure, so its cost (pickling sub-trees again) is never paid on the
    fast path.
    """
    for child_path, child in _children(obj, path):
        try:
            _dumps_plain(child)
        except Exception:
            return _find_unpicklable(child, child_path)
    return path, obj


def _dumps_plain(obj: Any) -> None:
    """Pickle ``obj`` with our table, discarding the result (out-of-band buffers dropped)."""
    pickler = pickle.Pickler(io.BytesIO(), protocol=5, buffer_callback=lambda _b: False)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(obj)
