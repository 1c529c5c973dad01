#!/usr/bin/env bash
# The test command: sets up (scripts/setup.sh, with the `docs` extra: tests/docs/ builds the
# documentation site), then lints, type-checks and runs the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k trace -x`: then the tests run in
# one pytest; without them, in two side by side (below).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOADERSPEC_EXTRAS="docs${LOADERSPEC_EXTRAS:+,$LOADERSPEC_EXTRAS}" bash "$top/scripts/setup.sh"
cd "$top"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --quiet --check .
# mypy ([tool.mypy]: every package under its import name, from the layout scripts/setup.sh
# stages in build/mypy; strict on the pure cores, the vocabulary, the checkpoint code and
# faultinject) runs beside the tests, which leave a core idle while they start: cold it takes a
# core for 20-45 s. Its report follows theirs.
mypy_out=$(mktemp)
side_out=$(mktemp)
.venv/bin/python -m mypy >"$mypy_out" 2>&1 &
mypy_pid=$!
side_pid=
# On any exit (Ctrl-C included) what still runs beside the tests is stopped by its PID: the side
# pytest with its descendants (its conformance runs), each by pid (faultinject's kill_tree).
stop_side() {
    if [ -n "$mypy_pid" ]; then kill "$mypy_pid" 2>/dev/null || true; fi
    if [ -n "$side_pid" ]; then
        .venv/bin/python -c 'import sys; from loaderspec.faultinject.processes import kill_tree
kill_tree(int(sys.argv[1]))' "$side_pid" 2>/dev/null || true
    fi
    rm -f "$mypy_out" "$side_out"
}
trap stop_side EXIT
side=0
if [ "$#" -eq 0 ]; then
    # The whole suite as two pytest processes side by side: one pytest leaves a core of the
    # 2-core CI machine idle most of the time (most tests use one core; the broken-loader runs
    # mostly wait on bounded timeouts). Beside the rest: the broken-loader module first (its
    # dozen conformance runs), then TLC's models, the bench smoke test and the wheel's install,
    # so that both halves end close together. Its report follows the main one's. It keeps no
    # pytest cache: two sessions would overwrite each other's record of the last failures
    # (`--lf` reads the main run's). It runs at a lower priority (nice 5, inherited by its
    # conformance runs and TLC): at equal priority the load reached 7 and timing-bound tests of
    # the rest failed in two of six runs; this way the rest's processes are scheduled first and
    # the side run mostly takes the CPU they leave idle.
    side_files=(
        tests/conformance/test_conformance_broken.py
        tests/spec/test_models.py
        tests/bench
        tests/conformance/test_wheel_install.py
    )
    nice -n 5 .venv/bin/python -m pytest "${side_files[@]}" -q --durations=10 \
        -p no:cacheprovider >"$side_out" 2>&1 &
    side_pid=$!
    ignore=()
    for f in "${side_files[@]}"; do ignore+=("--ignore=$f"); done
    tests=0
    .venv/bin/python -m pytest tests -q --durations=15 "${ignore[@]}" || tests=$?
    wait "$side_pid" || side=$?
    side_pid=  # reaped: its PID may be reused
    echo "--- beside it: pytest ${side_files[*]}"
    cat "$side_out"
else
    # With arguments (a selection, -x, ...): one pytest, as given.
    tests=0
    .venv/bin/python -m pytest tests -q --durations=15 "$@" || tests=$?
fi
mypy=0
wait "$mypy_pid" || mypy=$?
mypy_pid=  # reaped: its PID may be reused
cat "$mypy_out"
if [ "$mypy" -ne 0 ]; then echo "scripts/test.sh: mypy failed (exit $mypy)" >&2; fi
if [ "$side" -ne 0 ]; then echo "scripts/test.sh: the side pytest failed (exit $side)" >&2; fi
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
if [ "$side" -ne 0 ]; then exit "$side"; fi
exit "$mypy"
