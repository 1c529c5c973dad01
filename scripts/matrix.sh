#!/usr/bin/env bash
# Regenerates the committed conformance matrix from one run: sets up with every loader's extra
# (scripts/setup.sh with LOADERSPEC_EXTRAS=torchdata,spdl,grain,paddle), then runs the whole
# suite (no --quick: every case, the slow ones included) against all eleven loaders (the
# reference, torch, StatefulDataLoader, torchdata.nodes' thread and process mappers, grain, SPDL,
# paddle, litdata, Mosaic streaming, Ray Data) into docs/reports/ (the earlier per-loader folders removed
# first, so no report of another run or commit is left beside them), and rewrites README.md's
# totals table from the same reports (`--readme`). Two loaders run at once (`--jobs 2`), grain
# first: it spawns workers for every iterator and takes as long as the seven others together
# (32 min alone on 2026-11-26), so each loader gets 4200 s. It takes 40-60 minutes on the shared
# 2-core machine before the streaming loaders (their quick selections took 4 min each on
# 2026-11-28), so neither the test command (scripts/test.sh) nor scripts/main.sh (whose report
# goes to build/report/) runs it; docs/conformance-matrix.md
# says when to. It runs at a lower priority (nice -n 10): the machine may be shared. Like main.sh
# it does not fail on a loader's grades (--fail-on never), only when a run left no complete
# report. Extra arguments go to `loaderspec report`, e.g. `bash scripts/matrix.sh --jobs 1`.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
# The lists come from loaderspec/graded.py (standard library only: the system Python reads it
# before .venv exists), the one list of graded loaders.
graded() { python3 -m loaderspec.graded "$1"; }
LOADERSPEC_EXTRAS=$(graded extras | paste -sd, -) bash "$top/scripts/setup.sh"
# The streaming loaders and Ray Data each get a virtualenv of their own (.venv-<extra>, beside
# .venv): their dependency trees are large and pin what the others float. Each holds exactly torch==2.13.0
# (named in the same pip call, so no extra replaces it), the suite and loaderspec, editable, and
# is installed again only when pyproject.toml changed. `loaderspec report --python` runs that
# loader's suite with its interpreter.
own_venv() {  # EXTRA: the extra to install, and the name of its adapter module
    local extra=$1 venv=.venv-$1 want
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    if [ "$(cat "$venv/.loaderspec-setup" 2>/dev/null)" != "$want" ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0" \
            -e ".[suite,$extra]" 2>&1 | grep -v "is ignored: it is neither a file" || true
        "$venv/bin/python" -c "import loaderspec.conformance.adapters.$extra" \
            || { echo "matrix: installing the $extra extra into $venv failed" >&2; exit 1; }
        echo "$want" >"$venv/.loaderspec-setup"
    fi
}
for extra in $(graded own-venvs); do own_venv "$extra"; done
# Only the per-loader folders (each holds a report.json): the pages beside them are rewritten.
for dir in docs/reports/*/; do
    if [ -f "$dir/report.json" ]; then rm -r -- "$dir"; fi
done
echo "scripts/matrix.sh: commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
mapfile -t loaders < <(graded loaders)  # the slowest (grain) first: see above
mapfile -t pythons < <(graded pythons)
[ "${#loaders[@]}" -gt 0 ] || { echo "matrix: python3 -m loaderspec.graded listed no loaders" >&2; exit 1; }
nice -n 10 .venv/bin/loaderspec report --out docs/reports --fail-on never --readme README.md \
    --jobs 2 --timeout 4200 "${loaders[@]/#/--loader=}" "${pythons[@]/#/--python=}" "$@"
