#!/usr/bin/env bash
# A/B of a change to the device run time or the examples, on a machine with a CUDA GPU:
# bench/dispatch.py on the shipped code and on the code with a patch applied, alternated
# pass by pass (a whole pass moves every row together, by 1-2 % on a lent H200: compare
# alternated passes, never one of each), then a table of each goal's value, pass by pass.
#
#   bash tools/variant-ab.sh bench/variants/bridge-slot-prefetch.patch        # 3 passes each
#   PASSES=4 OUT=/tmp/ab bash tools/variant-ab.sh PATCH
#
# Each pass reinstalls skbuild-cudaq and example_app (regular installs, no build isolation)
# from the working tree with the patch applied or not; the tree is restored on exit, however
# the script ends. Results: ${OUT:-bench/results/ab}/ab-<pass>-<base|name>.json and logs.
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
restore
"$PY" - "$OUT" "$NAME" <<'EOF'
import json, sys
from pathlib import Path
out, name = Path(sys.argv[1]), sys.argv[2]
runs = sorted(out.glob("ab-*.json"), key=lambda p: int(p.name.split("-")[1]))
goals = [json.loads(p.read_text())["goals"] for p in runs]
labels = [p.stem.split("-", 2)[2] for p in runs]
print(f"{'goal':52s} " + " ".join(f"{label[:8]:>8s}" for label in labels))
for key in goals[0]:
    print(f"{key:52s} " + " ".join(f"{g[key]['value']:8.3f}" for g in goals))
EOF
