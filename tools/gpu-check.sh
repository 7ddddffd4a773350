#!/usr/bin/env bash
# Runs every GPU test and benchmark in one go, on a machine with a CUDA GPU.
# Results go to ${OUT:-bench/results/gpu-run} (JUnit XML, benchmark JSON, and the logs in
# logs.tgz; BUNDLE_LOGS= keeps them as files).
#
#   bash tools/gpu-check.sh            # uses python3 from PATH, installs the project
#   OUT=/tmp/res bash tools/gpu-check.sh
#   ONLY=multigpu bash tools/gpu-check.sh   # just the several-GPU tests and benchmark
#   DISPATCH_REPEAT=5 bash tools/gpu-check.sh   # bench/dispatch.py --repeat (default 3)
#
# With 2 or more GPUs it also runs tests/test_multigpu_gpu.py (with -rA: every
# test's printout, passing or not, lands in gpu-tests-multigpu.log) and
# `bench/dispatch.py --devices all` (dispatch_multigpu.json); with one GPU those
# tests skip with the reason and the benchmark is left out.
#
# Offline machines: put wheels of missing packages (e.g. pyelftools) in .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results/gpu-run}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
START=$(date +%s)
# Each step with the seconds since the start: what a lease's minutes go to.
log() { echo "== [$(($(date +%s) - START))s] $*" | tee -a "$OUT/gpu-check.log"; }

if compgen -G ".whl/*.whl" >/dev/null; then
  log "installing carried wheels"
  "$PY" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
fi
log "installing skbuild-cudaq and example_app (no build isolation)"
"$PY" -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -20
"$PY" -m pip install -q --no-build-isolation --no-deps ./example_app 2>&1 | tail -20
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/gpu-check.log"
# The GPU's whole state (clocks, MIG mode, power, ...): the same code has measured
# differently on different machines of one model; this is what to compare first.
nvidia-smi -q > "$OUT/nvidia-smi-q.log" 2>&1

GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
log "$GPUS GPU(s) visible"
status=0
if [ "${ONLY:-}" != multigpu ]; then
  log "pytest -m gpu"
  "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -ra --strict-markers \
    -W error --junitxml "$OUT/gpu-tests.xml" ${PYTEST_TIMEOUT:+-p timeout --timeout=$PYTEST_TIMEOUT} \
    --ignore tests/test_multigpu_gpu.py ${PYTEST_ARGS:-} tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
log "pytest -m gpu tests/test_multigpu_gpu.py (several GPUs)"
"$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -rA --strict-markers \
  -W error --junitxml "$OUT/gpu-tests-multigpu.xml" tests/test_multigpu_gpu.py 2>&1 \
  | tee "$OUT/gpu-tests-multigpu.log" | tail -80
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

# Benchmarks measure the package as users install it: a regular (not editable)
# install, bytecode compiled, run outside the source tree.
log "reinstalling skbuild-cudaq as a regular install for the benchmarks"
"$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -20
if [ "${ONLY:-}" = multigpu ]; then BENCHES=${BENCHES:-}; fi
for bench in ${BENCHES-startup startup_phases dispatch phases python_client python_host host_cpu switch_link issue_rate shape_floors placement}; do
  extra=()
  if [ "$bench" = dispatch ]; then
    # whole runs in one process, goals judged on their median (about 25 s a run on an H200)
    extra=(--repeat "${DISPATCH_REPEAT:-3}")
  fi
  if [ "$bench" = switch_link ]; then
    # example_app once more, without its handler switch, to compare the two links
    log "building example_app without the handler switch (for bench/switch_link.py)"
    nosw=$(mktemp -d)
    "$PY" -m pip wheel -q --no-build-isolation --no-deps ./example_app -w "$nosw/dist" \
      -Ccmake.define.SKBUILD_CUDAQ_HANDLER_SWITCH=OFF -Cbuild-dir="$nosw/build" 2>&1 | tail -20
    "$PY" -m pip install -q --no-deps --target "$nosw/site" "$nosw"/dist/*.whl 2>&1 | tail -20
    with=$(cd /tmp && "$PY" -c "import example_app._core as m; print(m.__file__)")
    extra=(--with-switch "$with" --without-switch "$(ls "$nosw"/site/example_app/_core*.so)")
  fi
  if [ -f "bench/$bench.py" ]; then
    log "bench/$bench.py"
    "$PY" "bench/$bench.py" "${extra[@]}" --out "$OUT/$bench.json" 2>&1 \
      | tee "$OUT/bench-$bench.log" | tail -40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
  if [ "$bench" = phases ]; then
    # the same kernels built without the stamps: production code, round trips only
    log "bench/phases.py --no-stamps"
    "$PY" bench/phases.py --no-stamps --out "$OUT/phases_nostamps.json" 2>&1 \
      | tee "$OUT/bench-phases_nostamps.log" | tail -40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
done
if [ "$GPUS" -ge 2 ]; then
  log "bench/dispatch.py --devices all (several GPUs)"
  "$PY" bench/dispatch.py --devices all --out "$OUT/dispatch_multigpu.json" 2>&1 \
    | tee "$OUT/bench-dispatch_multigpu.log" | tail -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
log "done (status $status)"
# The logs go into one archive: results (JSON, JUnit XML) stay files of their own, and a
# lent machine that returns few files (the device tool returns at most 8) brings them all.
if [ -n "${BUNDLE_LOGS-1}" ] && compgen -G "$OUT/*.log" >/dev/null; then
  (cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
fi
exit $status
