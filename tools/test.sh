#!/usr/bin/env bash
# Runs the test suite (what CI runs): sets up .venv if needed, installs the
# project with its runtime and test extras, then runs pytest on every core
# (pytest-xdist; a test file stays on one worker, its fixtures built once; the
# files with integration tests first).
# Arguments go to pytest: `bash tools/test.sh tests/test_udp.py -n 0` runs one
# file in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[runtime,test,lint]"
# --no-loadscope-reorder: files go to workers in collection order, which tests/conftest.py makes
# heaviest tier first (xdist's default order, fewest tests first, left the longest file last).
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-auto}" --dist loadfile \
  --no-loadscope-reorder "$@"
