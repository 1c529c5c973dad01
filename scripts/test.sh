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
.venv/bin/python -m mypy  # [tool.mypy]: the packages, strict on the pure cores (measured: 45 s cold at load 12, 1.5 s warm)
exec .venv/bin/python -m pytest tests -q "$@"
