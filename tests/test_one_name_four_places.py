"""One name, four places: every spec action exists everywhere it must (docs/architecture.md).

For each ``Action``: the TLA+ action of that name in ``spec/DataLoader.tla``, its
``<Action>IfLogged`` wrapper in ``spec/TraceDataLoader.tla``, its trace record (emitted by the
reference loader or by faultinject), the reference core's method (main-process actions), and a
conformance case marked with a property the action can break (``loaderspec.actionmap``).
Which actions the runs' traces really exercise is checked by tests/trace (the coverage figure).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from loaderspec.actionmap import ACTION_CAN_BREAK, USER_ACTION_CAN_BREAK
from loaderspec.vocabulary import (
    CHECKPOINT_ACTIONS,
    CHECKPOINT_MODULE,
    CORE_METHOD,
    USER_CORE_METHOD,
    Action,
    Actor,
    PropertyName,
    UserAction,
)

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec" / "DataLoader.tla"
TRACE_SPEC = ROOT / "spec" / "TraceDataLoader.tla"
EMITTERS = (ROOT / "reference", ROOT / "faultinject")
CONFORMANCE = ROOT / "conformance"


def _tla_definitions(path: Path) -> set[str]:
    """Names defined at the start of a line: ``Name ==`` or ``Name(args) ==``."""
    text = re.sub(r"\(\*.*?\*\)", "", path.read_text(), flags=re.S)
    return set(re.findall(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))


def _require(path: Path) -> None:
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} does not exist")


def missing_spec_actions(spec: Path) -> list[str]:
    """Actions the spec does not define."""
    return [a.value for a in Action if a.value not in _tla_definitions(spec)]


def missing_wrappers(trace_spec: Path) -> list[str]:
    """``<Action>IfLogged`` wrappers the trace spec lacks, or defines without using them."""
    defined = _tla_definitions(trace_spec)
    text = trace_spec.read_text()
    return [
        f"{a.value}IfLogged"
        for a in Action
        if f"{a.value}IfLogged" not in defined or text.count(f"{a.value}IfLogged") < 2
    ]


def missing_core_methods(cls: type) -> list[str]:
    """Main-process actions without their core method on ``cls``."""
    return [
        f"{a.value} -> {cls.__name__}.{name}"
        for a, name in CORE_METHOD.items()
        if not callable(getattr(cls, name, None))
    ]


def test_every_action_is_a_spec_action():
    _require(SPEC)
    missing = missing_spec_actions(SPEC)
    assert not missing, f"spec/DataLoader.tla defines no action named {missing}"


def test_every_checkpoint_action_is_a_step_of_its_spec_and_a_loader_method():
    from loaderspec.reference import DataLoader

    spec = ROOT / "spec" / f"{CHECKPOINT_MODULE}.tla"
    _require(spec)
    defined = _tla_definitions(spec)
    text = re.sub(r"\(\*.*?\*\)|\\\*.*", "", spec.read_text())
    for action, method in CHECKPOINT_ACTIONS.items():
        assert action in defined, f"{spec.name} defines no action named {action}"
        used = len(re.findall(rf"\b{action}\b", text))
        assert used >= 2, f"{action} is defined but never a step of Next"
        assert callable(getattr(DataLoader, method, None)), (
            f"loaderspec.reference.DataLoader.{method}"
        )


def test_every_traced_user_action_is_in_its_four_places():
    """A UserAction: a step of DataLoaderCheckpoint.tla's Next (above), a loader method, the
    core's method where a live iterator takes it, a record written under reference/, its
    ``IfLogged`` in the trace spec, and a conformance case marked with a property it can
    break."""
    from loaderspec.reference.core import ProtocolCore

    assert {a.value for a in UserAction} <= set(CHECKPOINT_ACTIONS)
    text = TRACE_SPEC.read_text()
    defined = _tla_definitions(TRACE_SPEC)
    emitted = _emitted_user_actions(ROOT / "reference")
    marked = _marked_properties(CONFORMANCE)
    for action in UserAction:
        wrapper = f"{action.value}IfLogged"
        assert wrapper in defined, f"{wrapper} is not defined"
        assert text.count(wrapper) >= 2, f"{wrapper} is not in TraceNext"
        assert action in emitted, f"no {action.value} record is written under reference/"
        assert {p.value for p in USER_ACTION_CAN_BREAK[action]} & marked, action.value
    for action, name in USER_CORE_METHOD.items():
        assert callable(getattr(ProtocolCore, name, None)), f"{action.value} -> core.{name}"


def _emitted_user_actions(root: Path) -> set[UserAction]:
    """UserAction members named (``UserAction.X``) in a module that writes records."""
    found: set[UserAction] = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        if "emit_user" in text or "loop.take" in text:
            found |= {a for a in UserAction if f"UserAction.{a.name}" in text}
    return found


def test_every_action_has_its_iflogged_wrapper():
    _require(TRACE_SPEC)
    missing = missing_wrappers(TRACE_SPEC)
    assert not missing, f"spec/TraceDataLoader.tla lacks, or never takes in TraceNext: {missing}"


def test_every_main_action_has_its_core_method():
    from loaderspec.reference.core import ProtocolCore

    missing = missing_core_methods(ProtocolCore)
    assert not missing, f"no core method for {missing}"
    assert {a for a in Action if a.actor is Actor.MAIN} == set(CORE_METHOD)


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _emitted_names(root: Path) -> set[str]:
    """Action names a module that writes trace records names at an emit site: a string literal
    argument of an ``emit``/``emit_fault``/``_trace`` call, or the member (``Action.WORKER_FETCH``)
    in a module that calls one of those."""
    by_member = {a.name: a.value for a in Action}
    values = {a.value for a in Action}
    found: set[str] = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        calls = [
            n for n in ast.walk(tree) if isinstance(n, ast.Call) and "emit" in _call_name(n)
        ] + [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _call_name(n) == "_trace"]
        if not calls:
            continue
        for call in calls:
            for arg in ast.walk(call):
                if isinstance(arg, ast.Constant) and arg.value in values:
                    found.add(arg.value)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Action"
                and node.attr in by_member
            ):
                found.add(by_member[node.attr])
    return found


def missing_records(roots: tuple[Path, ...]) -> list[str]:
    """Actions no module under ``roots`` emits a trace record for."""
    emitted: set[str] = set()
    for root in roots:
        emitted |= _emitted_names(root)
    return sorted(a.value for a in Action if a.value not in emitted)


def test_every_action_has_a_trace_record():
    missing = missing_records(EMITTERS)
    assert not missing, f"no trace record is emitted in reference/ or faultinject/ for {missing}"


def _property_literal(node: ast.expr) -> str | None:
    """The spec name a node spells: a string literal, or a ``PropertyName.X`` member."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "PropertyName"
        and node.attr in PropertyName.__members__
    ):
        return PropertyName[node.attr].value
    return None


def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: name
        for node in tree.body
        if isinstance(node, ast.Assign) and (name := _property_literal(node.value)) is not None
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _marked_properties(root: Path) -> set[str]:
    """Every property named in a ``spec_property(...)`` marker under ``conformance/``: string
    literals and ``PropertyName`` members, and names bound to one at module level
    (``PROP = PropertyName.NO_ORPHAN_WORKERS``), there or in another module under ``root``
    (``from ...harness.resume import HANDED_OUT``)."""
    names: set[str] = set()
    trees = [ast.parse(path.read_text(), str(path)) for path in root.rglob("*.py")]
    shared = {k: v for tree in trees for k, v in _module_constants(tree).items()}
    for tree in trees:
        consts = {**shared, **_module_constants(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) == "spec_property":
                for arg in node.args:
                    if (name := _property_literal(arg)) is not None:
                        names.add(name)
                    elif isinstance(arg, ast.Name) and arg.id in consts:
                        names.add(consts[arg.id])
    return names


def missing_cases(root: Path) -> dict[str, list[str]]:
    """Actions with no conformance case under ``root`` marked with a property they can break."""
    marked = _marked_properties(root)
    return {
        a.value: sorted(p.value for p in props)
        for a, props in ACTION_CAN_BREAK.items()
        if not {p.value for p in props} & marked
    }


def test_every_action_has_a_conformance_case_for_a_property_it_can_break():
    if not any(CONFORMANCE.rglob("test_*.py")):
        pytest.fail("conformance/ has no case files (test_*.py)")
    missing = missing_cases(CONFORMANCE)
    assert not missing, f"no conformance case is marked with a property these can break: {missing}"


# --- the checks above fail when a place is missing (each on a copy with one thing removed) ---


def _without(text: str, definition: str) -> str:
    """``text`` with the definition ``definition`` renamed away (as if it were never written)."""
    return re.sub(rf"^{definition}\b", f"Not{definition}", text, flags=re.M)


def test_a_spec_action_removed_from_the_spec_is_reported(tmp_path):
    spec = tmp_path / "DataLoader.tla"
    spec.write_text(_without(SPEC.read_text(), "MainTimeout"))
    assert missing_spec_actions(spec) == ["MainTimeout"]


def test_a_wrapper_removed_or_left_out_of_tracenext_is_reported(tmp_path):
    spec = tmp_path / "TraceDataLoader.tla"
    text = TRACE_SPEC.read_text()
    spec.write_text(_without(text, "PinExitIfLogged"))
    assert missing_wrappers(spec) == ["PinExitIfLogged"]
    spec.write_text(text.replace("\\/ PinExitIfLogged", ""))
    assert missing_wrappers(spec) == ["PinExitIfLogged"]


def test_a_core_method_removed_is_reported():
    from loaderspec.reference.core import ProtocolCore

    class Crippled(ProtocolCore):
        # The broken core: an action method removed on purpose.
        stop_iteration = None  # type: ignore[assignment]

    assert missing_core_methods(Crippled) == ["MainStopIteration -> Crippled.stop_iteration"]


def test_a_trace_record_never_emitted_is_reported(tmp_path):
    for root in EMITTERS:
        for path in root.rglob("*.py"):
            text = path.read_text().replace('"WorkerExit"', '"WorkerGone"')
            text = text.replace("Action.WORKER_EXIT", "Action.WORKER_EXIT_GONE")
            copy = tmp_path / root.name / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(text)
    roots = tuple(tmp_path / root.name for root in EMITTERS)
    assert missing_records(roots) == ["WorkerExit"]


def test_a_user_record_never_written_is_reported(tmp_path):
    for path in (ROOT / "reference").rglob("*.py"):
        text = path.read_text().replace("UserAction.USER_LOAD_STATE_DICT", "UserAction.GONE")
        copy = tmp_path / path.relative_to(ROOT / "reference")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(text)
    assert set(UserAction) - _emitted_user_actions(tmp_path) == {UserAction.USER_LOAD_STATE_DICT}


@pytest.mark.parametrize(
    "marker",
    [
        'import pytest\n\n\n@pytest.mark.spec_property("NoOrphanWorkers")\n',
        # the suite's own spelling: a PropertyName member, bound to a module-level name
        "PROP = PropertyName.NO_ORPHAN_WORKERS\n\n\n@spec_property(PROP)\n",
        "@spec_property(PropertyName.NO_ORPHAN_WORKERS)\n",
    ],
)
def test_an_action_without_a_conformance_case_is_reported(tmp_path, marker):
    (tmp_path / "test_only_one.py").write_text(f"{marker}def test_x():\n    pass\n")
    missing = missing_cases(tmp_path)
    assert "FaultKillParent" not in missing  # NoOrphanWorkers guards it
    assert "MainTryPutIndex" in missing
    assert missing["MainTryPutIndex"] == sorted(
        p.value for p in ACTION_CAN_BREAK[Action.MAIN_TRY_PUT_INDEX]
    )
