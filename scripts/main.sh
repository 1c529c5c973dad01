#!/usr/bin/env bash
# The main job: sets up (scripts/setup.sh), model-checks the spec's quick tier with TLC, then
# runs the conformance suite against the reference loader and torch.utils.data.DataLoader and
# prints the report matrix. Extra arguments go to `loaderspec report`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$top/scripts/setup.sh"
cd "$top"
.venv/bin/loaderspec model-check --tier quick
