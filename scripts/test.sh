#!/usr/bin/env bash
# The test command: sets up (scripts/setup.sh, with the `docs` extra: tests/docs/ builds the
# documentation site), then lints, type-checks and runs the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k trace -x`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOADERSPEC_EXTRAS="docs${LOADERSPEC_EXTRAS:+,$LOADERSPEC_EXTRAS}" bash "$top/scripts/setup.sh"
cd "$top"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --quiet --check .
# mypy ([tool.mypy]: the packages, strict on the pure cores) runs beside the tests, which leave
# a core idle while they start: cold it takes a core for 20-45 s. Its report follows theirs.
mypy_out=$(mktemp)
.venv/bin/python -m mypy >"$mypy_out" 2>&1 &
mypy_pid=$!
# On any exit (Ctrl-C included) a mypy still running is stopped by its PID.
trap 'if [ -n "$mypy_pid" ]; then kill "$mypy_pid" 2>/dev/null || true; fi; rm -f "$mypy_out"' EXIT
tests=0
.venv/bin/python -m pytest tests -q --durations=15 "$@" || tests=$?
mypy=0
wait "$mypy_pid" || mypy=$?
mypy_pid=  # reaped: its PID may be reused
cat "$mypy_out"
if [ "$mypy" -ne 0 ]; then echo "scripts/test.sh: mypy failed (exit $mypy)" >&2; fi
if [ "$tests" -ne 0 ]; then exit "$tests"; fi
exit "$mypy"
