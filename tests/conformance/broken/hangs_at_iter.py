"""Bug: ``iter()`` never returns (IterationTerminates: a loader stuck starting its epoch, e.g. on
a lock its workers never release). Everything else is the reference's, ``state_dict()``
included, so the resume cases play it too. Every case that starts an epoch runs into its
deadline; the suite recognises the pattern after two of them and grades the rest in seconds
each (conformance.harness.scenario)."""

import threading
from typing import Any

from loaderspec.reference import DataLoader as Reference


class Loader(Reference):
    def __iter__(self) -> Any:
        threading.Event().wait()  # the bug: waits for an event nobody sets
        raise AssertionError("unreachable")
