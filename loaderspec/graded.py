"""The loaders the conformance matrix grades: the one list.

``loaderspec report`` (its default loaders and ``--loader`` help), the pytest plugin (the
versions a report names), the bench (its columns), ``scripts/matrix.sh`` (which loaders, which
extras, which virtualenvs: ``python -m loaderspec.graded``) and the adapter tests read it;
docs/conformance.md's adapter table is checked against it (tests/test_graded.py). Adding an
adapter is one entry here plus its module in ``conformance/adapters/`` (docs/conformance.md,
"Adding an adapter").

Standard library only: the pytest plugin imports this in every pytest session, and
``scripts/matrix.sh`` runs it with the system Python before any virtualenv exists.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

__all__ = ["ADAPTERS", "DEFAULTS", "LOADERS", "GradedLoader", "named"]

ADAPTERS_MODULE = "loaderspec.conformance.adapters"


@dataclass(frozen=True)
class GradedLoader:
    name: str  # the short name: the bench's column, the adapter tests' parameter
    loader: str  # "module:Class", what the suite grades (--conformance-loader)
    package: str  # import name: a report shows its __version__; `report` lists it where installed
    distribution: str  # what pip installs (the adapter tests' skip reason names it)
    extra: str | None  # loaderspec's extra that installs it (None: always installed)
    own_venv: bool = False  # graded in a virtualenv of its own, .venv-<extra> (scripts/matrix.sh)
    first: bool = False  # the matrix starts it first: it takes as long as the others together
    bench: str | None = ""  # what the bench times ("": `loader`; None: not benched)

    @property
    def benched(self) -> str | None:
        return self.loader if self.bench == "" else self.bench

    @property
    def python(self) -> str:
        """``loaderspec report --python``'s LOADER=PYTHON for a loader with its own virtualenv."""
        return f"{self.loader}=.venv-{self.extra}/bin/python"


def _adapter(
    ref: str,
    package: str,
    extra: str,
    *,
    name: str = "",
    distribution: str = "",
    own_venv: bool = False,
    first: bool = False,
    bench: str | None = "",
) -> GradedLoader:
    """An adapter of ``conformance/adapters/``: ``ref`` is "module:Class" in there; its name is
    its extra's unless given, its distribution its package's unless given."""
    return GradedLoader(
        name=name or extra,
        loader=f"{ADAPTERS_MODULE}.{ref}",
        package=package,
        distribution=distribution or package,
        extra=extra,
        own_venv=own_venv,
        first=first,
        bench=bench,
    )


DEFAULTS = (
    GradedLoader("reference", "loaderspec.reference:DataLoader", "loaderspec", "loaderspec", None),
    GradedLoader("torch", "torch.utils.data:DataLoader", "torch", "torch", None),
)
# Order: the bench's columns and a report's default list (the matrix runs `first` ones first).
ADAPTERS = (
    # the bench times StatefulDataLoader itself: the adapter only renames it
    _adapter("torchdata:Loader", "torchdata", "torchdata",
             bench="torchdata.stateful_dataloader:StatefulDataLoader"),
    _adapter("torchdata_nodes:ThreadLoader", "torchdata", "torchdata", name="nodes-thread"),
    _adapter("torchdata_nodes:ProcessLoader", "torchdata", "torchdata", name="nodes-process"),
    _adapter("spdl:Loader", "spdl", "spdl"),
    _adapter("grain:Loader", "grain", "grain", first=True),
    _adapter("paddle:Loader", "paddle", "paddle", distribution="paddlepaddle", bench=None),
    _adapter("litdata:Loader", "litdata", "litdata", own_venv=True),
    _adapter("streaming:Loader", "streaming", "streaming", distribution="streaming-community",
             own_venv=True),
    _adapter("ray:Loader", "ray", "ray", distribution="ray[data,train]", own_venv=True),
)  # fmt: skip
LOADERS = DEFAULTS + ADAPTERS


def named(name: str) -> GradedLoader:
    """The graded loader called ``name`` (``GradedLoader.name``).

    Raises:
        KeyError: no loader is called that; the message lists the names.
    """
    for graded in LOADERS:
        if graded.name == name:
            return graded
    raise KeyError(f"no graded loader {name!r}; one of {', '.join(g.name for g in LOADERS)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loaderspec.graded",
        description="print one of the graded-loader lists, one a line (scripts/matrix.sh)",
    )
    parser.add_argument(
        "list",
        choices=("loaders", "extras", "own-venvs", "pythons"),
        help="loaders: every loader's module:Class, the matrix's run order; extras: the extras "
        "installed into .venv; own-venvs: the extras each graded in .venv-<extra>; pythons: "
        "`loaderspec report --python`'s LOADER=PYTHON for those",
    )
    which = parser.parse_args(argv).list
    own = [g for g in ADAPTERS if g.own_venv]
    if which == "loaders":
        lines = [g.loader for g in sorted(LOADERS, key=lambda g: not g.first)]
    elif which == "extras":
        lines = list(dict.fromkeys(g.extra for g in ADAPTERS if g.extra and not g.own_venv))
    elif which == "own-venvs":
        lines = list(dict.fromkeys(g.extra for g in own if g.extra))
    else:
        lines = [g.python for g in own]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
