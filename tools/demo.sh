#!/usr/bin/env bash
# The main job: set up .venv, install skbuild-cudaq, build example_app with
# `pip install` (nvcc compiles its dispatch kernel to LTO-IR and embeds it),
# then show what the extension module embedded.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[runtime]"
# example_app builds against this checkout's skbuild-cudaq (not a published one):
# no build isolation, so its build requirements come from .venv.
.venv/bin/python -m pip install -q --no-build-isolation ./example_app
ext=$(.venv/bin/python -c "import example_app._core as m; print(m.__file__)")
echo "example_app._core: $ext"
.venv/bin/python -m skbuild_cudaq inspect "$ext"
