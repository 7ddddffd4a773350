#!/usr/bin/env bash
# A/B of a change to the device run time or the examples, on a machine with a CUDA GPU:
# bench/dispatch.py on the shipped code and on the code with a patch applied, alternated
# pass by pass (a whole pass moves every row together, by 1-2 % on a lent H200: compare
# alternated passes, never one of each), then a table of each goal's value, pass by pass.
#
#   bash tools/variant-ab.sh bench/variants/bridge-slot-prefetch.patch        # 3 passes each
#   PASSES=4 OUT=/tmp/ab bash tools/variant-ab.sh PATCH
#   TESTS=1 bash tools/variant-ab.sh PATCH   # then every one-GPU test with the patch applied
#
# Each pass reinstalls skbuild-cudaq and example_app (regular installs, no build isolation)
# from the working tree with the patch applied or not; the tree is restored on exit, however
# the script ends, and the shipped code installed again once the passes are done. With
# TESTS=1 the script exits with the GPU tests' status. Results: ${OUT:-bench/results/ab}/ab-<pass>-<base|name>.json,
# logs, and ab-summary.json (bench/ab_summary.py: the verdict of each goal).
# The patches in bench/variants/ are the experiments of bench/results/history/README.md.
# Offline machines: put wheels of missing packages (e.g. pyelftools) in .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
  echo "usage: bash tools/variant-ab.sh PATCH   (a patch of this tree, e.g. bench/variants/*.patch)" >&2
  exit 2
fi
PATCH=$(realpath "$1")
NAME=$(basename "$PATCH" .patch)
PASSES=${PASSES:-3}
OUT=$(realpath -m "${OUT:-bench/results/ab}")
PY=${PYTHON:-python3}
ROOT=$(pwd)
mkdir -p "$OUT"
git apply --check "$PATCH"
applied=0
restore() { if [ "$applied" = 1 ]; then git apply -R "$PATCH" && applied=0; fi; }
trap restore EXIT
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
fi
START=$(date +%s)
for ((pass = 1; pass <= 2 * PASSES; pass++)); do
  if ((pass % 2)); then label=base; restore; else label=$NAME; git apply "$PATCH"; applied=1; fi
  "$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -5
  "$PY" -m pip install -q --no-build-isolation --no-deps ./example_app 2>&1 | tail -5
  # outside the tree: the installed package, not the sources
  (cd /tmp && "$PY" "$ROOT/bench/dispatch.py" --out "$OUT/ab-$pass-$label.json" \
    >"$OUT/ab-$pass-$label.log" 2>&1)
  echo "== [$(($(date +%s) - START))s] pass $pass ($label) done" >&2
done
if [ "${TESTS:-0}" = 1 ]; then
  # the tests import the package from this tree: an editable install, as tools/gpu-check.sh does
  if [ "$applied" = 0 ]; then git apply "$PATCH" && applied=1; fi
  "$PY" -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -5
  "$PY" -m pip install -q --no-build-isolation --no-deps ./example_app 2>&1 | tail -5
  status=0
  "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -q --strict-markers -W error \
    --junitxml "$OUT/gpu-tests-$NAME.xml" --ignore tests/test_multigpu_gpu.py tests \
    >"$OUT/gpu-tests-$NAME.log" 2>&1 || status=$?
  tail -3 "$OUT/gpu-tests-$NAME.log" >&2
  echo "== [$(($(date +%s) - START))s] GPU tests with $NAME: exit $status" >&2
fi
restore
# leave the shipped code installed, as before the script
"$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -5
"$PY" -m pip install -q --no-build-isolation --no-deps ./example_app 2>&1 | tail -5
# each goal pass by pass, and whether the patch won every comparison with a base pass next to it
"$PY" "$ROOT/bench/ab_summary.py" "$OUT"
exit "${status:-0}"
