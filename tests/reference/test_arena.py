"""reference.arena: big batches through shared-memory slots: reused, falling back, leaving none."""

from __future__ import annotations

import gc
import os
import threading

import pytest
import torch
from loaderspec.reference import DataLoader, arena, transport
from torch.utils.data import Dataset

pytestmark = pytest.mark.skipif(not arena.available(), reason="no memfd_create here")

WIDTH = 65_536  # floats per item: a 4-item batch is 1 MiB, well above SLOT_MIN_BYTES


class Rows(Dataset[torch.Tensor]):
    """Item i is ``WIDTH`` copies of i: every byte of a batch says which items it holds."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((WIDTH,), float(i))


def _memfds() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "loaderspec-slots" in target:
            found.append(target)
    return found


def _mapped() -> int:
    with open("/proc/self/maps") as maps:
        return sum("loaderspec-slots" in line for line in maps)


def _expected(i: int) -> torch.Tensor:
    return torch.arange(4 * i, 4 * i + 4, dtype=torch.float32)[:, None].expand(4, WIDTH)


def test_worker_and_main_share_one_slot_without_a_copy():
    """In one process: a worker's slot tensor travels as a reference; the main side's tensor
    is the same memory; the slot is reusable only once both sides let go."""
    main = arena.MainArena()
    try:
        worker = arena.WorkerArena(main.handle())
        storage = worker.new_storage(1 << 20)
        sent = torch.empty(0).set_(storage, 0, (4, WIDTH)).fill_(7.0)
        reader, writer = os.pipe()
        from multiprocessing.connection import Connection

        r, w = Connection(reader, writable=False), Connection(writer, readable=False)
        transport.send(w, ("batch", sent), worker)
        kind, got = transport.recv(r, main)
        assert kind == "batch"
        assert torch.equal(got, sent)
        assert got.untyped_storage().nbytes() == sent.untyped_storage().nbytes()
        sent[0, 0] = 3.0  # the same bytes: no copy was made
        assert got[0, 0].item() == 3.0
        del sent, storage
        gc.collect()
        assert not worker._free(0), "the main process still holds the slot"
        del got
        gc.collect()
        assert worker._free(0)
        r.close()
        w.close()
    finally:
        main.close()


def test_big_tensors_of_one_message_are_copied_into_distinct_slots():
    """Two big tensors outside the slots in one message: each copy keeps its slot until the
    message counts them as sent, so the second does not overwrite the first."""
    from multiprocessing import Pipe

    main = arena.MainArena()
    try:
        worker = arena.WorkerArena(main.handle())
        r, w = Pipe(duplex=False)
        first, second = torch.full((WIDTH,), 1.0), torch.full((WIDTH,), 2.0)
        transport.send(w, [first, second], worker)
        got = transport.recv(r, main)
        assert _mapped() > 0, "both travelled in slots"
        assert torch.equal(got[0], first)
        assert torch.equal(got[1], second)
        r.close()
        w.close()
    finally:
        main.close()


def test_small_allocations_are_private():
    main = arena.MainArena()
    try:
        worker = arena.WorkerArena(main.handle())
        worker.new_storage(arena.SLOT_MIN_BYTES - 1)
        assert worker._slots == []
    finally:
        main.close()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_big_batches_equal_and_outlive_the_loader(method, no_child_left):
    """Batches read from slots hold the right bytes, including those kept past the loader's
    end, and no memfd descriptor or mapping is left once they are dropped."""
    kept = []
    loader = DataLoader(Rows(), batch_size=4, num_workers=2, multiprocessing_context=method)
    for i, batch in enumerate(loader):
        assert torch.equal(batch, _expected(i))
        kept.append(batch)
    del loader, batch
    gc.collect()
    assert _memfds() == [], "the iterator's shutdown closes its memfds"
    for i, batch in enumerate(kept):  # every batch still valid: slots were not reused under it
        assert torch.equal(batch, _expected(i))
    del kept, batch
    gc.collect()
    assert _mapped() == 0


def test_batches_kept_beyond_the_slots_take_the_pipe(monkeypatch):
    """With every slot held by the user, a worker falls back to private memory (the pipe)."""
    monkeypatch.setattr(arena, "MAX_SLOTS", 2)
    kept = list(DataLoader(Rows(), batch_size=4, num_workers=1))
    assert len(kept) == 12
    for i, batch in enumerate(kept):
        assert torch.equal(batch, _expected(i))


def test_release_from_another_thread():
    """A batch dropped in another thread (a pin thread, a user's thread) frees its slot."""
    loader = DataLoader(Rows(), batch_size=4, num_workers=1)
    it = iter(loader)
    batch = next(it)
    holder = [batch]
    del batch
    t = threading.Thread(target=holder.clear)
    t.start()
    t.join()
    for i, batch in enumerate(it, start=1):
        assert torch.equal(batch, _expected(i))


class Batches(Dataset[torch.Tensor]):
    """Whole batches made by the dataset (batch_size=None): not collated, so not in a slot
    until the transport copies them into one."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> torch.Tensor:
        return _expected(i).clone()


def test_uncollated_big_tensors_are_copied_into_slots():
    seen = list(DataLoader(Batches(), batch_size=None, num_workers=2))
    assert len(seen) == 12
    assert _mapped() > 0, "the batches are read from the workers' slots"
    for i, batch in enumerate(seen):
        assert torch.equal(batch, _expected(i))
        assert batch.is_contiguous()
