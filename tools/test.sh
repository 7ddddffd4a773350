#!/usr/bin/env bash
# Runs the test suite (what CI runs): sets up .venv if needed, installs the
# project with its runtime and test extras, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[runtime,test,lint]"
exec .venv/bin/python -m pytest "$@"
