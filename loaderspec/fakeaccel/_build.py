"""Building and caching the fakeaccel library.

Owns where the compiled library lives and when it is rebuilt; knows nothing of what the library
registers. The build goes through ``torch.utils.cpp_extension.load``, so torch's own compiler
flags and ABI settings apply. It needs a C++17 compiler and ``ninja``: Debian's ``ninja-build``,
or PyPI's ``ninja`` in the same environment (found even when the venv is not activated). The
library goes into a cache directory keyed by a hash of the source, torch's version and location
and the Python ABI: the first build takes 2-60 s on 2 cores (2-11 s in the build log of
2026-11-27, 32 s under load 8; only ATen/c10 headers, no Python bindings), every later load is
instant (0.2-0.5 s), and a source edit rebuilds.

Cache root: ``$LOADERSPEC_CACHE_DIR``, else ``$XDG_CACHE_HOME/loaderspec``, else
``~/.cache/loaderspec``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch

from loaderspec.vocabulary import CACHE_DIR_ENV

NAME = "loaderspec_fakeaccel"
SOURCE = "fakeaccel.cpp"


class BuildUnavailable(RuntimeError):
    """The library cannot be built here (no compiler or no ninja); the message says which."""


def cache_root() -> Path:
    """Where built libraries are kept (see the module header)."""
    if env := os.environ.get(CACHE_DIR_ENV):
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "loaderspec"


def source_path() -> Path:
    """The C++ source shipped with this package."""
    return Path(str(resources.files(__package__).joinpath(SOURCE)))


def build_key() -> str:
    """A hash of everything the binary depends on: source, torch version and location, Python
    ABI. The location, because the build command names torch's headers by path: two venvs
    sharing one directory would each rebuild the other's library on load, unseen by
    ``built_library()``."""
    digest = hashlib.sha256(source_path().read_bytes())
    digest.update(torch.__version__.encode())
    digest.update(str(Path(torch.__file__).parent).encode())
    digest.update(sys.implementation.cache_tag.encode())
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    """The directory of this source's build (created on demand)."""
    return cache_root() / f"fakeaccel-{build_key()}"


def check_toolchain() -> None:
    """Raise ``BuildUnavailable`` naming what is missing to build the library.

    Raises:
        BuildUnavailable: no ``ninja`` or no C++ compiler on PATH.
    """
    from torch.utils.cpp_extension import is_ninja_available

    _put_pip_ninja_on_path()
    if not is_ninja_available():
        raise BuildUnavailable("ninja is not installed (pip install ninja, or apt ninja-build)")
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise BuildUnavailable(f"no C++ compiler: {compiler!r} is not on PATH")


def _put_pip_ninja_on_path() -> None:
    """Make a ``ninja`` installed by pip into this environment findable by torch's build.

    torch runs ``ninja`` from PATH; a virtualenv's ``bin`` is on PATH only when it is
    activated, and CI runs ``.venv/bin/python`` without activating. So when PATH has no ninja,
    prepend the directory of the pip ``ninja`` package's binary (or of this interpreter).
    """
    if shutil.which("ninja") is not None:
        return
    candidates = [Path(sys.executable).parent]
    try:
        import ninja  # the PyPI package, if installed
    except ImportError:
        pass
    else:
        candidates.insert(0, Path(ninja.BIN_DIR))
    for directory in candidates:
        if (directory / "ninja").is_file():
            os.environ["PATH"] = os.pathsep.join([str(directory), os.environ.get("PATH", "")])
            return


def built_library() -> Path | None:
    """The cached library for this source, or None when it has not been built yet."""
    path = build_dir() / f"{NAME}.so"
    return path if path.is_file() else None


# torch's build lock (cpp_extension's FileBaton) is a file: a build killed mid-way (a deadline,
# Ctrl-C) leaves it behind, and every later build waits on it for ever. So a build here first
# takes an flock, which the kernel drops when its holder dies: its holder is the only builder
# of the directory, and a torch lock it finds was left by a dead one.
BUILD_FLOCK = "build.flock"
# flock has no timeout; a build takes 2-60 s (more under load): 10 minutes is a stuck one.
BUILD_WAIT_S = 600.0
_POLL_S = 0.1  # as torch's own FileBaton polls its lock file


@contextlib.contextmanager
def _sole_builder(directory: Path, wait_s: float = BUILD_WAIT_S) -> Iterator[None]:
    """Hold the directory's build flock (waiting up to `wait_s`), torch's lock file removed.

    Raises:
        RuntimeError: another process held the flock for `wait_s`.
    """
    fd = os.open(directory / BUILD_FLOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"fakeaccel: another process has been building in {directory} for "
                        f"{wait_s:g} s (it holds {BUILD_FLOCK}); stop it, or wait for it"
                    ) from None
                time.sleep(_POLL_S)
        (directory / "lock").unlink(missing_ok=True)
        yield
    finally:
        os.close(fd)  # drops the flock


def build_and_load(*, verbose: bool = False) -> Path:
    """Build (or reuse) the library and load it into this process; return its path.

    Concurrent callers (several pytest processes) build once: the others wait for the build
    flock (``_sole_builder``), then load what it built.

    Raises:
        BuildUnavailable: the toolchain is missing (nothing was built or loaded).
        RuntimeError: the compiler failed (its output is in the message).
    """
    from torch.utils.cpp_extension import load

    if built_library() is None:
        check_toolchain()
    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with _sole_builder(directory):
        load(
            name=NAME,
            sources=[str(source_path())],
            extra_cflags=["-O1"],
            build_directory=str(directory),
            is_python_module=False,
            verbose=verbose,
        )
    library = built_library()
    if library is None:  # load() returned without its output: a torch change, say so plainly
        raise RuntimeError(f"fakeaccel: build finished but {NAME}.so is not in {directory}")
    return library
