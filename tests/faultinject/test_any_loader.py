"""The same faulty dataset works inside every loader's workers: torch's, the reference's,
torchdata's (when installed) and paddle's through its adapter (when installed)."""

from __future__ import annotations

import importlib

import fi_loader_targets as T
import pytest
from loaderspec.faultinject import processes, read_fetches, sandbox
from loaderspec.faultinject.faults import Die, Raise

from loaderspec import faultinject

pytestmark = pytest.mark.timeout(120)

LOADERS = {
    "torch": ("torch.utils.data:DataLoader", "torch"),
    "reference": ("loaderspec.reference:DataLoader", "reference"),
    "torchdata": ("loaderspec.conformance.adapters.torchdata:Loader", "torchdata"),
    "paddle": ("loaderspec.conformance.adapters.paddle:Loader", "paddle"),
}


@pytest.fixture(params=sorted(LOADERS))
def loader_path(request):
    path, package = LOADERS[request.param]
    try:
        importlib.import_module(package)
    except ImportError:
        pytest.skip(f"{package} is not installed")
    return path


def test_die_fires_in_the_worker_it_names(loader_path, tmp_path):
    ds = faultinject.FaultyDataset(6, [Die(4)], record_dir=tmp_path)
    report = sandbox.run(T.drain_with, loader_path, ds, batch_size=1, num_workers=2, deadline_s=60)
    assert report.outcome == "returned", report.error
    got = report.value
    [fault] = [f for f in read_fetches(tmp_path, faults=True) if f.event == "fault"]
    assert fault.index == 4
    assert fault.pid in got["workers"]
    assert fault.worker_id in (0, 1)
    assert got["error"] is not None
    assert 4 not in got["items"]
    assert {f.worker_id for f in read_fetches(tmp_path)} <= {0, 1}


def test_raise_reaches_the_main_process_with_its_message(loader_path, tmp_path):
    ds = faultinject.FaultyDataset(4, [Raise(1)], record_dir=tmp_path)
    report = sandbox.run(T.drain_with, loader_path, ds, batch_size=1, num_workers=1, deadline_s=60)
    assert report.outcome == "returned", report.error
    kind, message = report.value["error"]
    [fault] = [f for f in read_fetches(tmp_path, faults=True) if f.event == "fault"]
    assert fault.worker_id == 0
    if "paddle" in loader_path:
        # paddle raises SystemError("Blocking queue is killed ...") in the main thread; the
        # worker's exception is only printed, by its reader thread, on stderr.
        assert kind == "SystemError"
        assert "injected fault at item 1" in report.stderr
        # What the failed iterator leaves varies from run to run (its reader thread, feeder
        # thread, pipes, a zombie worker: paddle's abandoned iterators, see
        # test_paddle_abandoned_iterator_keeps_its_workers); whatever it is, the sandbox reaped it.
        assert all(processes.is_gone(pid) for pid in report.seen_pids)
    else:
        assert "injected fault at item 1" in message, (kind, message)
        assert report.clean, report.leftovers()
