"""What the harness knows about a loader class: its importable name, and what it says of itself.

One place resolves `"package.module:Class"` (or `"package.module.Class"`) to a class and back
(`resolve`, `ref_of`), for the conformance plugin, the spec scenarios and the benchmark alike.
A loader class may describe itself to the harness with class attributes and methods; none is
required, and nothing here reads a loader's private state:

* `loaderspec_unsupported(cls, dataset=None, **loader_kwargs) -> str | None` (a classmethod):
  None when the loader can express this configuration (the dataset, map-style or iterable, and
  the constructor's keyword arguments), else why not, in one line. A loader whose constructor
  raises `NotImplementedError(reason)` for such a configuration says the same thing later.
* `workers_die_with: "iterator" | "loader"`: what must be dropped for the workers to stop
  (torch's loader: the iterator; torchdata's StatefulDataLoader keeps its iterator: the loader).
* `loaderspec_workers: "processes" | "threads" | "none"` (or a classmethod returning one): what
  the loader's workers are.
* `loaderspec_stateful: bool` (or a classmethod returning one): whether the loader can be
  checkpointed and resumed (`state_dict()` / `load_state_dict()`); otherwise the harness looks
  for the two methods (`stateful`).
* `loaderspec_process_helpers(cls) -> None` (a classmethod): start what the loader keeps for the
  whole life of the process, shared by all its instances (grain's shared-memory deletion thread
  pool): the harness calls it before it takes the leak baseline, so these are not counted as
  a loader's leak while whatever each loader leaves still is.
* `loaderspec_iterator_start_s: float`: the seconds one `iter()` may take before its first
  batch because the loader starts its workers then (grain spawns a process per worker for every
  iterator, each importing torch: a few seconds on a loaded 2-core machine). The scenarios that
  start many iterators one after another (resume, ranks) allow that much more per iterator,
  and so does pytest-timeout's limit on a case marked `iterators(n)` (conformance.plugin);
  none is allowed by default, so a loader that declares nothing is graded on the plain bounds.

`unsupported(cls, kwargs)` also answers for loaders that declare nothing, from the constructor's
signature: an argument of torch's that the constructor does not take is named. What a loader's
workers are, when it declares nothing, is watched in one small run (`faultinject.driver.workers`,
on the harness side: this module plays nothing).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Literal, cast

__all__ = [
    "WORKER_KINDS",
    "LoaderRefError",
    "WorkerKind",
    "WorkersDieWith",
    "declared_workers",
    "iterator_start_s",
    "ref_of",
    "resolve",
    "split",
    "start_process_helpers",
    "stateful",
    "unsupported",
    "workers_die_with",
]

WorkersDieWith = Literal["iterator", "loader"]
# What a loader's workers are: child processes (torch's, a pool's, hand-rolled ones), threads of
# the loader's own process, or none visible (the data is loaded in the thread that calls next()).
WorkerKind = Literal["processes", "threads", "none"]
WORKER_KINDS: tuple[WorkerKind, ...] = ("processes", "threads", "none")
MSG_BAD_KIND = "{ref}.loaderspec_workers is {value!r}; it must be one of " + ", ".join(WORKER_KINDS)

FIX = (
    "give an importable class as 'package.module:Class' or 'package.module.Class', "
    "e.g. --conformance-loader=torch.utils.data:DataLoader"
)
MSG_MALFORMED = "loader {value!r} (from {source}) is not of the form 'package.module:Class'; " + FIX
MSG_NO_MODULE = "loader {value!r} (from {source}): cannot import module {module!r}: {error}; " + FIX
MSG_NO_ATTR = (
    "loader {value!r} (from {source}): module {module!r} has no attribute {attr!r}; " + FIX
)
MSG_NOT_CALLABLE = (
    "loader {value!r} (from {source}) names {kind}, not a class or callable taking "
    "torch DataLoader's arguments; " + FIX
)
MSG_NOT_IMPORTABLE = (
    "{ref}: a loader run in a sandbox must be importable by name: define it at module level"
)
MSG_UNSUPPORTED_ARG = "the loader does not accept torch's argument {name!r}"
MSG_BAD_START = (
    "{ref}.loaderspec_iterator_start_s is {value!r}; it must be a number of seconds, 0 or more"
)


class LoaderRefError(ValueError):
    """A loader reference that cannot be used; the message says why and how to fix it."""


def split(value: str) -> tuple[str, str]:
    """`pkg.mod:Attr.Path` or `pkg.mod.Class` -> (module, attribute path).

    Raises:
        ValueError: `value` has neither form.
    """
    if ":" in value:
        module, _, attr = value.partition(":")
    else:
        module, _, attr = value.rpartition(".")
    ok = module and attr and ":" not in attr
    ok = ok and all(p.isidentifier() for p in module.split(".") + attr.split("."))
    if not ok:
        raise ValueError(value)
    return module, attr


def resolve(value: str, source: str = "argument") -> type:
    """Import the loader class named `value` (`source` says where the name came from, for the
    message).

    Raises:
        LoaderRefError: malformed reference, missing module or attribute, or not callable.
    """
    fields = {"value": value, "source": source}
    try:
        module_name, attr = split(value.strip())
    except ValueError:
        raise LoaderRefError(MSG_MALFORMED.format(**fields)) from None
    try:
        obj: object = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of a user's package is a usage problem
        raise LoaderRefError(
            MSG_NO_MODULE.format(module=module_name, error=f"{type(exc).__name__}: {exc}", **fields)
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise LoaderRefError(MSG_NO_ATTR.format(module=module_name, attr=attr, **fields))
        obj = getattr(obj, part)
    if not callable(obj):
        raise LoaderRefError(MSG_NOT_CALLABLE.format(kind=type(obj).__name__, **fields))
    # callable() is checked above; what a user names is typed object until then.
    return obj  # type: ignore[return-value]


def ref_of(loader: str | type) -> str:
    """`"pkg.mod:Class"` for a loader class, or the reference itself if given one.

    Raises:
        LoaderRefError: a class another process could not import by name (a local class).
    """
    if isinstance(loader, str):
        return loader
    ref = f"{loader.__module__}:{loader.__qualname__}"
    if "<locals>" in ref:
        raise LoaderRefError(MSG_NOT_IMPORTABLE.format(ref=ref))
    return ref


def start_process_helpers(loader_cls: type) -> None:
    """Start the process-wide helpers the loader declares (`loaderspec_process_helpers`)."""
    start = getattr(loader_cls, "loaderspec_process_helpers", None)
    if callable(start):
        start()


def workers_die_with(loader_cls: type) -> WorkersDieWith:
    """What must be dropped for the loader's workers to stop (default: the iterator)."""
    return getattr(loader_cls, "workers_die_with", "iterator")


def _refused_argument(loader_cls: type, kwargs: dict[str, Any]) -> str | None:
    """The first argument the constructor's signature cannot take (None: it takes them all, or
    accepts **kwargs, or has no signature to read)."""
    try:
        params = inspect.signature(loader_cls).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return next((name for name in kwargs if name not in params), None)


def unsupported(loader_cls: type, kwargs: dict[str, Any], dataset: Any = None) -> str | None:
    """Why `loader_cls(dataset, **kwargs)` is a configuration the loader cannot express (its
    `loaderspec_unsupported`, or an argument its constructor does not take), or None."""
    declared = getattr(loader_cls, "loaderspec_unsupported", None)
    if callable(declared):
        reason = declared(**kwargs) if dataset is None else declared(dataset=dataset, **kwargs)
        if reason:
            return str(reason)
    name = _refused_argument(loader_cls, kwargs)
    return None if name is None else MSG_UNSUPPORTED_ARG.format(name=name)


def stateful(loader_cls: type) -> bool:
    """Whether the loader can be checkpointed and resumed: its `loaderspec_stateful`, else
    whether it has both `state_dict` and `load_state_dict`."""
    declared = getattr(loader_cls, "loaderspec_stateful", None)
    if declared is not None:
        return bool(declared() if callable(declared) else declared)
    return all(callable(getattr(loader_cls, m, None)) for m in ("state_dict", "load_state_dict"))


def iterator_start_s(loader_cls: type) -> float:
    """The seconds the loader declares one `iter()` may take to start its workers (0 when it
    declares nothing).

    Raises:
        LoaderRefError: the declared value is not a number of seconds, 0 or more.
    """
    value = getattr(loader_cls, "loaderspec_iterator_start_s", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        ref = f"{loader_cls.__module__}.{loader_cls.__qualname__}"
        raise LoaderRefError(MSG_BAD_START.format(ref=ref, value=value))
    return float(value)


def declared_workers(loader_cls: type) -> WorkerKind | None:
    declared = getattr(loader_cls, "loaderspec_workers", None)
    value = declared() if callable(declared) else declared
    if value is None:
        return None
    if value not in WORKER_KINDS:
        ref = f"{loader_cls.__module__}.{loader_cls.__qualname__}"
        raise LoaderRefError(MSG_BAD_KIND.format(ref=ref, value=value))
    return cast(WorkerKind, value)
