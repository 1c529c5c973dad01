"""Pinned batches through torch's real pinning path: a fake accelerator here, CUDA where present.

Loading fakeaccel is per process and irreversible (it becomes *the* accelerator, which changes
``pin_memory=True`` everywhere after it), so the fakeaccel checks run in one child process: this
file run as a script. The child builds the library on first use (~15-60 s on 2 cores, then
cached in ``~/.cache/loaderspec``; see loaderspec/fakeaccel/_build.py) and prints one JSON
object of findings; the tests below assert on them. Nothing is built unless a test here runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 540  # a cold build under load, plus three short loader runs


# --------------------------------------------------------------------------------------------
# The child: everything that needs fakeaccel loaded.


class _Items(torch.utils.data.Dataset):
    """20 items of a dict with a tensor, a tuple and a string: pinning must walk the nest."""

    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.full((3,), float(i)), "pair": (torch.tensor(i), "s"), "i": i}


def _tensors(obj: object) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, list | tuple):
        return [t for v in obj for t in _tensors(v)]
    return []


def _loader_findings(loader_cls: type, num_workers: int) -> dict:
    """Iterate one epoch with pin_memory=True; report whether every tensor came out pinned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = loader_cls(_Items(), batch_size=4, num_workers=num_workers, pin_memory=True)
        batches = list(loader)
    tensors = [t for b in batches for t in _tensors(b)]
    return {
        "batches": len(batches),
        "tensors": len(tensors),
        "all_pinned": bool(tensors) and all(t.is_pinned() for t in tensors),
        "firsts": [b["x"][0, 0].item() for b in batches],
        "strings_kept": all(tuple(b["pair"][1]) == ("s",) * len(b["i"]) for b in batches),
        "warnings": [str(w.message) for w in caught],
    }


def _child_main() -> None:
    from torch.utils.data import DataLoader
    from torch.utils.data._utils.pin_memory import pin_memory

    from loaderspec import fakeaccel

    out: dict = {}
    # Control, before loading: no accelerator, so torch warns and nothing is pinned.
    out["before"] = {
        "accelerator": torch.accelerator.is_available(),
        "loader": _loader_findings(DataLoader, 0),
    }
    if not fakeaccel.available():
        out["unavailable"] = fakeaccel.unavailable_reason()
        print(json.dumps(out))
        return
    out["device"] = fakeaccel.load()
    acc = torch.accelerator.current_accelerator()
    out["accelerator"] = acc.type if acc is not None else None
    out["accelerator_available"] = torch.accelerator.is_available()

    x = torch.arange(12.0).view(3, 4)
    before = fakeaccel.pinned_allocations()
    y = x.pin_memory()
    out["tensor"] = {
        "source_pinned": x.is_pinned(),
        "copy_pinned": y.is_pinned(),
        "equal": torch.equal(x, y),
        "stride": list(y.stride()),
        "view_pinned": y[1:, ::2].is_pinned(),
        "allocations": fakeaccel.pinned_allocations() - before,
        "repin_is_same": y.pin_memory().data_ptr() == y.data_ptr(),
    }
    nest = {"a": [torch.ones(2), (torch.zeros(1), "text")], "n": 3}
    pinned = pin_memory(nest, fakeaccel.DEVICE)
    out["nested"] = {
        "all_pinned": all(t.is_pinned() for t in _tensors(pinned)),
        "text": pinned["a"][1][1],
        "n": pinned["n"],
    }
    out["torch_workers"] = _loader_findings(DataLoader, 2)
    out["torch_main"] = _loader_findings(DataLoader, 0)
    try:
        from loaderspec.reference import DataLoader as ReferenceLoader
    except Exception as exc:  # the loader is being written beside this file; report, don't hide
        out["reference"] = {"skip": f"reference.DataLoader not importable: {exc!r}"}
    else:
        try:
            out["reference"] = _loader_findings(ReferenceLoader, 2)
        except Exception as exc:
            out["reference"] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out))


# --------------------------------------------------------------------------------------------
# The tests, in the pytest process.


@pytest.fixture(scope="module")
def child() -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, __file__],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        cwd=ROOT,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"pinning child failed:\n{proc.stdout}\n{proc.stderr}"
    findings = json.loads(proc.stdout.strip().splitlines()[-1])
    if "unavailable" in findings:
        pytest.skip(f"fakeaccel cannot be built here: {findings['unavailable']}")
    return findings


pytestmark = pytest.mark.timeout(CHILD_TIMEOUT_S + 60)


def test_without_an_accelerator_torch_does_not_pin(child):
    # The control: what fakeaccel changes. torch warns and hands out unpinned batches.
    assert child["before"]["accelerator"] is False
    assert child["before"]["loader"]["all_pinned"] is False
    assert any("no accelerator" in w for w in child["before"]["loader"]["warnings"])


def test_fakeaccel_is_the_current_accelerator(child):
    assert child["device"] == "fakeaccel"
    assert child["accelerator"] == "fakeaccel"
    assert child["accelerator_available"] is True


def test_tensor_pin_memory_goes_through_the_fake_allocator(child):
    found = child["tensor"]
    assert found["source_pinned"] is False
    assert found["copy_pinned"] is True
    assert found["equal"] is True
    assert found["stride"] == [4, 1]
    assert found["view_pinned"] is True  # any address inside a pinned block counts
    assert found["allocations"] == 1
    assert found["repin_is_same"] is True  # pin_memory() of a pinned tensor is a no-op


def test_torch_pin_memory_walks_nested_batches(child):
    assert child["nested"] == {"all_pinned": True, "text": "text", "n": 3}


@pytest.mark.parametrize("run", ["torch_workers", "torch_main"])
def test_torch_dataloader_yields_pinned_batches(child, run):
    found = child[run]
    assert found["batches"] == 5
    assert found["all_pinned"] is True
    assert found["firsts"] == [0.0, 4.0, 8.0, 12.0, 16.0]
    assert found["strings_kept"] is True
    assert not [w for w in found["warnings"] if "pin" in w]


def test_reference_dataloader_yields_pinned_batches(child):
    found = child["reference"]
    if "skip" in found:
        pytest.skip(found["skip"])
    assert "error" not in found, found.get("error")
    assert found["batches"] == 5
    assert found["all_pinned"] is True
    assert found["firsts"] == [0.0, 4.0, 8.0, 12.0, 16.0]
    assert found["strings_kept"] is True


def test_a_pip_installed_ninja_is_found_without_an_activated_venv(tmp_path, monkeypatch):
    # CI runs .venv/bin/python without activating the venv: its bin/ (where PyPI's ninja puts
    # its binary) is not on PATH, and torch's build only looks on PATH.
    from loaderspec.fakeaccel import _build

    venv_bin = tmp_path / "bin"
    venv_bin.mkdir()
    ninja = venv_bin / "ninja"
    ninja.write_text("#!/bin/sh\necho 1.11.1\n")
    ninja.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setitem(sys.modules, "ninja", None)  # the PyPI package's module: not here
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _build._put_pip_ninja_on_path()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(venv_bin)
    _build._put_pip_ninja_on_path()  # found now: PATH is left alone
    assert os.environ["PATH"].count(str(venv_bin)) == 1


def test_a_lock_left_by_a_killed_build_is_removed_by_the_next_builder(tmp_path):
    # A build killed mid-way (a case's deadline) leaves torch's lock file, however fresh;
    # before the build flock, every later build waited on it for ever (each pinning case hung
    # in a clean CI).
    from loaderspec.fakeaccel import _build

    lock = tmp_path / "lock"
    lock.touch()
    with _build._sole_builder(tmp_path, wait_s=5):
        assert not lock.exists()
    with _build._sole_builder(tmp_path, wait_s=5):  # the flock was dropped on the way out
        pass


def test_a_builder_waits_for_a_live_one_and_gives_up_naming_it(tmp_path):
    from loaderspec.fakeaccel import _build

    with _build._sole_builder(tmp_path, wait_s=5):
        (tmp_path / "lock").touch()  # the live builder's own torch lock: not touched
        gives_up = pytest.raises(
            RuntimeError, match=r"building in .* for 0.2 s \(it holds build.flock\)"
        )
        with gives_up, _build._sole_builder(tmp_path, wait_s=0.2):
            pass
        assert (tmp_path / "lock").exists()


def test_the_build_directory_is_per_torch_installation(monkeypatch):
    # The build command names torch's headers by path: two venvs sharing one directory would
    # rebuild each other's library on load, in a child with a deadline, unseen by is_built().
    from loaderspec.fakeaccel import _build

    here = _build.build_key()
    monkeypatch.setattr(torch, "__file__", "/elsewhere/site-packages/torch/__init__.py")
    assert _build.build_key() != here


def test_a_build_elsewhere_past_its_time_is_stopped_and_says_why(tmp_path, monkeypatch):
    import psutil

    from loaderspec import fakeaccel

    monkeypatch.setenv("LOADERSPEC_CACHE_DIR", str(tmp_path))  # nothing built there
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    why = fakeaccel.build_elsewhere(timeout_s=0.05)
    assert why == "fakeaccel: the build did not finish in 0.05 s"
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert fakeaccel.is_built() is False


# --------------------------------------------------------------------------------------------
# Real CUDA, where there is one.

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_cuda_torch_dataloader_yields_pinned_batches(num_workers):
    found = _loader_findings(torch.utils.data.DataLoader, num_workers)
    assert found["all_pinned"] is True
    assert found["firsts"] == [0.0, 4.0, 8.0, 12.0, 16.0]


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_cuda_reference_dataloader_yields_pinned_batches(num_workers):
    from loaderspec.reference import DataLoader as ReferenceLoader

    found = _loader_findings(ReferenceLoader, num_workers)
    assert found["all_pinned"] is True
    assert found["firsts"] == [0.0, 4.0, 8.0, 12.0, 16.0]
    assert found["strings_kept"] is True


if __name__ == "__main__":
    _child_main()
