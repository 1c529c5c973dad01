"""reference.transport: batches round-trip bit-exactly, over bytes and over a real pipe."""

from __future__ import annotations

import copyreg
import math
import os
import pickle
import threading
from multiprocessing import Pipe
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loaderspec.reference import transport
from loaderspec.reference.transport import (
    OOB_THRESHOLD,
    TornMessage,
    UnpicklableBatchError,
    pack,
    recv,
    send,
    unpack,
)
from torch._utils import ExceptionWrapper

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]

# Every bit pattern is allowed, NaNs and negative zeros included: the check is on bytes.
LAYOUTS = ["contiguous", "transposed", "strided", "offset", "expanded", "scalar", "empty"]


def _make_tensor(dtype: torch.dtype, shape: tuple[int, int], layout: str, seed: int):
    """A tensor of random bytes of ``dtype``, viewed the way ``layout`` says."""
    rows, cols = shape
    n = (rows + 1) * (cols + 1)
    gen = np.random.default_rng(seed)
    raw = bytearray(gen.bytes(n * torch.empty(0, dtype=dtype).element_size()))
    base = torch.frombuffer(raw, dtype=torch.uint8).clone().view(dtype)
    if dtype is torch.bool:
        base = base.view(torch.uint8).remainder(2).view(torch.bool)
    grid = base.view(rows + 1, cols + 1)
    if layout == "contiguous":
        return grid.contiguous()
    if layout == "transposed":
        return grid.t()
    if layout == "strided":
        return grid[::2, ::2]
    if layout == "offset":
        return grid[1:, 1:]
    if layout == "expanded":
        return grid[0:1].expand(3, cols + 1)
    if layout == "scalar":
        return grid[0, 0]
    return grid[:0]


def _bytes_of(t: torch.Tensor) -> bytes:
    """The tensor's element bytes in logical order (so strides do not matter)."""
    flat = torch.empty(t.shape, dtype=t.dtype).copy_(t.detach()).reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def _assert_same_tensor(got: object, want: torch.Tensor) -> None:
    assert isinstance(got, torch.Tensor)
    assert type(got) is type(want)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.stride() == want.stride()
    assert got.requires_grad == want.requires_grad
    assert got.is_leaf
    assert _bytes_of(got) == _bytes_of(want)
    if want.numel():
        # A fresh storage: writing to the result must not change the sender's tensor.
        assert got.untyped_storage().data_ptr() != want.untyped_storage().data_ptr()


def _roundtrip_pipe(obj: object) -> object:
    """send() on one end of a real pipe from a thread (a big message fills the pipe), recv()."""
    reader, writer = Pipe(duplex=False)
    try:
        return _roundtrip_pipe_on(reader, writer, obj)
    finally:
        reader.close()
        writer.close()


def _roundtrip_pipe_on(reader, writer, obj: object) -> object:
    errors: list[BaseException] = []

    def write() -> None:
        try:
            send(writer, obj)
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert reader.poll(30), "nothing arrived within 30 s"
        got = recv(reader)
    finally:
        thread.join(30)
    assert not thread.is_alive()
    assert not errors, errors
    return got


tensor_cases = st.builds(
    _make_tensor,
    dtype=st.sampled_from(DTYPES),
    shape=st.tuples(st.integers(1, 5), st.integers(1, 6)),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
)


@settings(max_examples=150, deadline=None)
@given(tensor=tensor_cases, requires_grad=st.booleans())
def test_tensor_roundtrips_bit_exactly(tensor, requires_grad):
    if requires_grad and tensor.dtype.is_floating_point:
        tensor = tensor.detach().requires_grad_(True)
    _assert_same_tensor(unpack(pack(tensor)), tensor)


@settings(max_examples=30, deadline=None)
@given(tensor=tensor_cases)
def test_tensor_roundtrips_over_a_pipe(tensor):
    _assert_same_tensor(_roundtrip_pipe(tensor), tensor)


def _leaves() -> st.SearchStrategy[object]:
    arrays = st.builds(
        lambda n, seed: np.random.default_rng(seed).standard_normal(n),
        st.integers(0, 8),
        st.integers(0, 2**32 - 1),
    )
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True),
        st.text(max_size=8),
        st.binary(max_size=8),
        arrays,
        tensor_cases,
    )


batches = st.recursive(
    _leaves(),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)


def _assert_same(got: object, want: object) -> None:
    """Deep equality that compares tensors and arrays by bytes and floats NaN-aware."""
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        _assert_same_tensor(got, want)
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes()
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _assert_same(got[key], want[key])
    elif isinstance(want, list | tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w)
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches)
def test_nested_batch_roundtrips(batch):
    _assert_same(unpack(pack(batch)), batch)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches)
def test_nested_batch_roundtrips_over_a_pipe(batch):
    _assert_same(_roundtrip_pipe(batch), batch)


def test_large_tensors_travel_out_of_band_into_their_own_aligned_storage():
    big = torch.randn(OOB_THRESHOLD // 4 + 1, 3)
    batch = {"a": big, "b": big[:, 1], "c": np.arange(OOB_THRESHOLD, dtype=np.int64), "n": 3}
    parts = pack(batch)
    assert len(parts) == 4  # header + three out-of-band buffers
    got = _roundtrip_pipe(batch)
    _assert_same(got, batch)
    for name in ("a", "b"):
        tensor = got[name]
        assert tensor.data_ptr() % 64 == 0
        assert tensor.untyped_storage().nbytes() == (
            transport._span_elements(tensor.shape, tensor.stride()) * tensor.element_size()
        )
    assert got["c"].flags.writeable
    got["a"].add_(1)  # writable, and owned by the receiver
    assert not torch.equal(got["a"], big)


def test_many_out_of_band_buffers_survive_partial_writev(monkeypatch):
    # Force several writev/readv calls per message, as more than IOV_MAX buffers would.
    monkeypatch.setattr(transport, "_IOV_MAX", 2)
    batch = [torch.full((OOB_THRESHOLD,), float(i)) for i in range(5)]
    _assert_same(_roundtrip_pipe(batch), batch)


def test_messages_are_connection_framed():
    # A message from send() reads back with plain recv_bytes(); unpack() parses it.
    reader, writer = Pipe(duplex=False)
    try:
        small = (torch.arange(6).view(2, 3), "x")
        big = torch.randn(OOB_THRESHOLD)
        threading.Thread(target=lambda: [send(writer, small), send(writer, big)]).start()
        assert reader.poll(30)
        _assert_same(unpack(reader.recv_bytes()), small)
        assert reader.poll(30)
        _assert_same(unpack(reader.recv_bytes()), big)
    finally:
        reader.close()
        writer.close()


def test_parameters_stay_parameters():
    param = torch.nn.Parameter(torch.randn(3, 2))
    got = unpack(pack(param))
    assert isinstance(got, torch.nn.Parameter)
    _assert_same_tensor(got, param)


def test_unusual_tensors_fall_back_to_torch_pickling():
    sparse = torch.eye(3).to_sparse()
    conj = torch.randn(3, dtype=torch.complex64).conj()
    got_sparse, got_conj = unpack(pack((sparse, conj)))
    assert got_sparse.is_sparse
    assert torch.equal(got_sparse.to_dense(), sparse.to_dense())
    assert torch.equal(got_conj, conj)


def test_exception_wrapper_roundtrips_and_reraises():
    try:
        raise KeyError("missing")
    except KeyError:
        wrapper = ExceptionWrapper(where="in DataLoader worker process 1")
    got = _roundtrip_pipe([wrapper])[0]
    assert isinstance(got, ExceptionWrapper)
    assert got.where == wrapper.where
    assert got.exc_msg == wrapper.exc_msg
    with pytest.raises(KeyError, match="worker process 1"):
        got.reraise()


def test_unpicklable_member_is_named_and_nothing_is_sent():
    reader, writer = Pipe(duplex=False)
    try:
        batch = {"ok": torch.ones(2), "bad": [1, threading.Lock()]}
        with pytest.raises(
            UnpicklableBatchError, match=r"batch\['bad'\]\[1\] of type _thread.lock"
        ):
            send(writer, batch)
        assert not reader.poll(0)
        send(writer, "next")  # the connection is still usable
        assert recv(reader) == "next"
    finally:
        reader.close()
        writer.close()


def test_local_function_is_named():
    def local() -> None:
        pass

    with pytest.raises(UnpicklableBatchError, match=r"of type builtins\.function"):
        pack((1, local))


def test_non_leaf_requiring_grad_is_refused_as_torch_refuses():
    leaf = torch.ones(2, requires_grad=True)
    with pytest.raises(UnpicklableBatchError, match="Cowardly refusing"):
        pack(leaf * 2)


def test_clean_close_is_eof_and_cut_message_is_torn():
    reader, writer = Pipe(duplex=False)
    writer.close()
    with pytest.raises(EOFError):
        recv(reader)
    reader.close()

    reader, writer = Pipe(duplex=False)
    payload = b"".join(pack(torch.ones(100)))
    os.write(writer.fileno(), len(payload).to_bytes(4, "big") + payload[:10])
    writer.close()
    with pytest.raises(TornMessage):
        recv(reader)
    reader.close()


def test_plain_reader_takes_queued_messages_in_order_then_eof_or_torn():
    """The worker's index reader: several waiting messages come out of one read, in order, one
    per recv; a close between messages is EOF, inside one a torn message."""
    reader, writer = Pipe(duplex=False)
    messages = [(i, list(range(i))) for i in range(5)] + [None, "resume"]
    for message in messages:
        transport.send_plain(writer, message)
    plain = transport.PlainReader(reader)
    assert [plain.recv() for _ in messages] == messages
    writer.close()
    with pytest.raises(EOFError):
        plain.recv()
    reader.close()

    reader, writer = Pipe(duplex=False)
    transport.send_plain(writer, (1, [2]))
    os.write(writer.fileno(), (100).to_bytes(4, "big") + b"\x00abc")
    writer.close()
    plain = transport.PlainReader(reader)
    assert plain.recv() == (1, [2])
    with pytest.raises(TornMessage):
        plain.recv()
    reader.close()


def test_garbage_payload_is_rejected():
    with pytest.raises(ValueError, match="kind"):
        unpack(b"\x07abc")
    with pytest.raises(ValueError, match="empty"):
        unpack(b"")


def test_torch_global_registrations_are_untouched():
    extra_before = dict(ForkingPickler._extra_reducers)
    copyreg_before = dict(copyreg.dispatch_table)
    unpack(pack([torch.ones(3), np.ones(3)]))
    assert ForkingPickler._extra_reducers == extra_before
    assert copyreg.dispatch_table == copyreg_before
    assert torch.Tensor not in copyreg.dispatch_table
    # Plain pickle of a tensor is still torch's own.
    assert torch.equal(pickle.loads(pickle.dumps(torch.ones(2))), torch.ones(2))


def test_large_message_grows_a_pipe_buffer():
    import fcntl

    reader, writer = Pipe(duplex=False)
    try:
        if not hasattr(fcntl, "F_SETPIPE_SZ"):
            pytest.skip("no F_SETPIPE_SZ on this platform")
        try:
            fcntl.fcntl(reader.fileno(), fcntl.F_SETPIPE_SZ, transport.PIPE_TARGET_BYTES)
        except OSError as exc:
            pytest.skip(f"this user cannot grow a pipe to 1 MiB: {exc}")
        fcntl.fcntl(reader.fileno(), fcntl.F_SETPIPE_SZ, 4096)  # back to small
        _assert_same(
            _roundtrip_pipe_on(reader, writer, torch.ones(OOB_THRESHOLD)), torch.ones(OOB_THRESHOLD)
        )
        assert fcntl.fcntl(writer.fileno(), fcntl.F_GETPIPE_SZ) >= OOB_THRESHOLD
    finally:
        reader.close()
        writer.close()


def test_reader_reads_ahead_and_keeps_a_big_message_out_of_its_buffer():
    """The main process's result reader: small messages that wait come in with one read and
    out one per recv, in order (has_message says which are whole in the buffer); a big
    out-of-band message behind them is read past the buffer, whole; EOF between messages is
    EOFError, inside one TornMessage."""
    reader, writer = Pipe(duplex=False)
    small = [torch.arange(i, i + 4) for i in range(3)]
    big = torch.arange(3 * OOB_THRESHOLD, dtype=torch.uint8)
    for t in small:
        send(writer, t)

    def write_big() -> None:
        send(writer, big)  # over the pipe's 64 KiB: written while the reader reads

    results = transport.Reader(reader, read_ahead=4096)
    got = [results.recv()]
    assert results.has_message()  # the other two came with the first read
    got += [results.recv(), results.recv()]
    assert not results.has_message()
    assert all(torch.equal(a, b) for a, b in zip(got, small, strict=True))
    thread = threading.Thread(target=write_big)
    thread.start()
    assert torch.equal(results.recv(), big)
    thread.join()
    send(writer, small[0])
    os.write(writer.fileno(), (100).to_bytes(4, "big") + b"\x00abc")
    writer.close()
    assert torch.equal(results.recv(), small[0])
    with pytest.raises(TornMessage):
        results.recv()
    reader.close()

    reader, writer = Pipe(duplex=False)
    writer.close()
    with pytest.raises(EOFError):
        transport.Reader(reader).recv()
    reader.close()
