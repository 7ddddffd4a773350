#!/usr/bin/env bash
# Runs every GPU test and every benchmark in one go, on a machine with a CUDA GPU.
# Results go to ${OUT:-bench/results/gpu-run}: each benchmark's JSON (copy them into
# bench/results/ and run `python bench/report.py`), and one archive, logs.tgz, with the logs,
# the several-GPU tests' JUnit XML and `nvidia-smi -q` (BUNDLE_LOGS= keeps them as files), beside
# gpu-tests.xml (every one-GPU test). A lent machine returns few files (at most 8): the
# benchmarks' JSON, the XML and the archive stay under that.
#
#   bash tools/gpu-check.sh                      # uses python3 from PATH, installs the project
#   OUT=/tmp/res bash tools/gpu-check.sh
#   BENCHES="dispatch startup" bash tools/gpu-check.sh   # a subset (BENCHES= : tests only)
#   TESTS=0 bash tools/gpu-check.sh              # the benchmarks only
#   DISPATCH_REPEAT=5 bash tools/gpu-check.sh    # bench/dispatch.py --repeat (default 3)
#
# The benchmarks: bench/dispatch.py (--repeat 3, about 75 s on an H200), bench/startup.py
# (about a minute), bench/graph.py (graph handlers against bare device and host launches of the
# same graphs, then the phase breakdown of graph_increment: 22 s with 5 rounds on an H100, the
# default 15 rounds take longer), bench/python_device.py (Python device code against its C++
# twins, about 20 s on an H100), bench/wire.py (the host path and the UDP wire against their
# C++ floors, a few minutes), bench/build_overhead.py (no GPU; --runs ${BUILD_RUNS:-3}, about two minutes)
# and, with 2 or more GPUs, bench/multigpu.py; with one GPU the several-GPU tests skip with the
# reason and that benchmark is left out.
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
if [ "${TESTS:-1}" != 0 ]; then  # the tests run on an editable install
  "$PY" -m pip install -q --no-build-isolation --no-deps -e . 2>&1 | tail -20
else  # the benchmarks alone: a regular install (see below)
  "$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -20
fi
"$PY" -m pip install -q --no-build-isolation --no-deps ./example_app 2>&1 | tail -20
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$OUT/gpu-check.log"
# The GPU's whole state (clocks, MIG mode, power, ...): the same code has measured
# differently on different machines of one model; this is what to compare first.
nvidia-smi -q > "$OUT/nvidia-smi-q.log" 2>&1

GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
# the card and driver the tests ran on, named in the JUnit XML (its test suite's name)
CARD=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
log "$GPUS GPU(s) visible"
status=0
if [ "${TESTS:-1}" != 0 ]; then
  log "pytest -m gpu"
  "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -ra --strict-markers \
    -W error --junitxml "$OUT/gpu-tests.xml" -o junit_suite_name="gpu-tests on ${CARD:-no GPU}" \
    ${PYTEST_TIMEOUT:+-p timeout --timeout=$PYTEST_TIMEOUT} \
    --ignore tests/test_multigpu_gpu.py ${PYTEST_ARGS:-} tests 2>&1 | tee "$OUT/gpu-tests.log" | tail -60
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  log "pytest -m gpu tests/test_multigpu_gpu.py (several GPUs)"
  "$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -rA --strict-markers \
    -W error --junitxml "$OUT/gpu-tests-multigpu.xml" tests/test_multigpu_gpu.py 2>&1 \
    | tee "$OUT/gpu-tests-multigpu.log" | tail -80
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

# Benchmarks measure the package as users install it: a regular (not editable)
# install, bytecode compiled, run outside the source tree.
BENCH_LIST=${BENCHES-dispatch startup graph wire build_overhead multigpu python_device}
if [ -n "$BENCH_LIST" ] && [ "${TESTS:-1}" != 0 ]; then
  log "installing skbuild-cudaq as a regular install for the benchmarks"
  "$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -20
fi
for bench in $BENCH_LIST; do
  extra=()
  case "$bench" in
    dispatch) extra=(--repeat "${DISPATCH_REPEAT:-3}") ;;
    build_overhead) extra=(--runs "${BUILD_RUNS:-3}") ;;
    multigpu)
      if [ "$GPUS" -lt 2 ]; then
        log "bench/multigpu.py left out: one GPU"
        continue
      fi ;;
  esac
  name=$bench
  [ "$bench" = multigpu ] && name=dispatch_multigpu
  log "bench/$bench.py"
  "$PY" "bench/$bench.py" "${extra[@]}" --out "$OUT/$name.json" 2>&1 \
    | tee "$OUT/bench-$bench.log" | tail -40
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
log "done (status $status)"
# The logs and the several-GPU tests' XML go into one archive; the benchmarks' JSON and the
# one-GPU tests' XML (committed as bench/results/gpu-tests.xml) stay files of their own.
if [ -n "${BUNDLE_LOGS-1}" ] && compgen -G "$OUT/*.log" >/dev/null; then
  (cd "$OUT" && tar czf logs.tgz ./*.log $(ls ./gpu-tests-multigpu.xml 2>/dev/null) \
    && rm -f ./*.log ./gpu-tests-multigpu.xml)
fi
exit $status
