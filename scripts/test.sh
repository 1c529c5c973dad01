#!/usr/bin/env bash
# The test command: sets up (scripts/setup.sh, with the `docs` extra: tests/docs/ builds the
# documentation site), then lints and runs the test suite.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k trace -x`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOADERSPEC_EXTRAS="docs${LOADERSPEC_EXTRAS:+,$LOADERSPEC_EXTRAS}" bash "$top/scripts/setup.sh"
cd "$top"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --quiet --check .
exec .venv/bin/python -m pytest tests -q "$@"
