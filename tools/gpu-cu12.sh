#!/usr/bin/env bash
# The CUDA 12 stack on a GPU machine (issue 14): cuda-bindings 12.9, nvJitLink 12.9, a
# downstream wheel (example_app) whose device code NVRTC 12.9 built, and skbuild-cudaq's device
# run time for CUDA 12 -- next to the CUDA 13 stack that tools/gpu-check.sh runs.
#
# Two steps, because the GPU machine has no network and NVRTC 12 (90 MB) cannot travel:
#
#   bash tools/gpu-cu12.sh --prepare   # CPU machine (network, no toolkit needed): builds
#                                      # .whl-cu12/ for ${PYVER:-3.12}
#   bash tools/gpu-cu12.sh             # GPU machine, after tools/gpu-check.sh; carry .whl-cu12
#
# .whl-cu12/ then holds (CPython 3.12, x86_64): cuda_bindings-12.9.*-cp312 (~8 MB),
# cuda_pathfinder-1.* (~50 kB; cuda-bindings 12.9's `cuda` package hides the machine's),
# nvidia_nvjitlink_cu12-12.9.86 (~40 MB), example_app-0.1.0-cp312 (~0.2 MB, built with build
# isolation, compiler "auto" and no nvcc: NVRTC 12.9), skbuild_cudaq-0.1.0-cp310-abi3
# (~0.2 MB, device run time for CUDA 12 and 13, built with build isolation from NVRTC wheels).
#
# On the GPU machine the wheels go into a target directory put first on PYTHONPATH (the
# machine's Python keeps pytest, numpy, pyelftools); the device run time comes from the
# carried skbuild-cudaq wheel (SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR: both sets, the run time picks
# cu12 from the installed nvJitLink). Results: ${OUT:-bench/results/gpu-run}/cu12.
set -uo pipefail
cd "$(dirname "$0")/.."
WHL=.whl-cu12

if [ "${1:-}" = "--prepare" ]; then
  set -e
  PYVER=${PYVER:-3.12}
  PYBIN=${PYBIN:-$(ls -d "$HOME"/.pyenv/versions/"$PYVER"*/bin/python 2>/dev/null | tail -1)}
  PYBIN=${PYBIN:-$(command -v "python$PYVER")}
  WORK=${WORK:-/tmp/skbuild-cudaq-cu12-prepare}
  rm -rf "$WORK" "$WHL" && mkdir -p "$WORK" "$WHL"
  "$PYBIN" -m venv "$WORK/venv"
  V="$WORK/venv/bin/python"
  "$V" -m pip install -q "cuda-bindings==12.9.*" "nvidia-nvjitlink-cu12==12.9.*" \
    "nvidia-cuda-nvrtc-cu12==12.9.*" "nvidia-cuda-runtime-cu12==12.9.*" \
    "nvidia-cuda-cccl-cu12==12.9.*" "scikit-build-core>=0.10" pyelftools build
  # skbuild-cudaq itself, with build isolation: NVRTC 12.9 and 13.0 from build-system.requires
  "$V" -m pip wheel -q --no-deps -w "$WHL" .
  "$V" -m pip install -q --no-deps "$WHL"/skbuild_cudaq-*.whl
  # example_app as a CUDA 12 downstream project, built with build isolation and no nvcc
  # anywhere CMake looks: its build requirements gain NVRTC 12.9 (and the headers its
  # cooperative-groups kernels include), its dependency becomes skbuild-cudaq[cu12], and
  # compiler "auto" falls back to NVRTC. skbuild-cudaq itself comes from $WHL.
  rm -rf "$WORK/example_app" && cp -r example_app "$WORK/example_app"
  "$V" - "$WORK/example_app/pyproject.toml" <<'PYEOF'
import sys
from pathlib import Path
path = Path(sys.argv[1])
text = path.read_text()
text = text.replace('"skbuild-cudaq"]', '"skbuild-cudaq", "nvidia-cuda-nvrtc-cu12==12.9.*", '
                    '"nvidia-cuda-runtime-cu12==12.9.*", "nvidia-cuda-cccl-cu12==12.9.*"]', 1)
text = text.replace('"skbuild-cudaq[runtime]"', '"skbuild-cudaq[cu12]"')
assert "nvidia-cuda-nvrtc-cu12" in text and "skbuild-cudaq[cu12]" in text
path.write_text(text)
PYEOF
  env -u CUDACXX -u CMAKE_CUDA_COMPILER PATH="$WORK/venv/bin:/usr/bin:/bin" \
    "$V" -m pip wheel -q --no-deps --find-links "$WHL" -w "$WHL" \
    -C "cmake.define.CMAKE_IGNORE_PATH=/usr/local/bin;/usr/local/cuda/bin;/usr/local/cuda-13.0/bin" \
    -C build-dir="$WORK/build-example_app" "$WORK/example_app"
  "$V" -m pip download -q --no-deps -d "$WHL" "cuda-bindings==12.9.*" \
    "nvidia-nvjitlink-cu12==12.9.*" "cuda-pathfinder~=1.1"
  "$V" -m skbuild_cudaq inspect "$WORK/build-example_app"/_core*.so | grep -c "code version 1.64"
  ls -la "$WHL"
  du -sh "$WHL"
  exit 0
fi

OUT=${OUT:-bench/results/gpu-run}/cu12
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
log() { echo "== $*" | tee -a "$OUT/gpu-cu12.log"; }
if ! compgen -G "$WHL/*.whl" >/dev/null; then
  log "no $WHL/*.whl: run 'bash tools/gpu-cu12.sh --prepare' on the CPU machine and carry $WHL"
  exit 2
fi
# Bytecode is compiled at install, as a plain `pip install` does (start-up figures count it).
# A target directory first on PYTHONPATH, not a venv: the machine's Python may itself be a
# venv, whose packages (pytest, numpy, pyelftools) a --system-site-packages venv would not see.
SITE=${CU12_SITE:-/tmp/skbuild-cudaq-cu12-site}
rm -rf "$SITE" && mkdir -p "$SITE"
log "installing the CUDA 12 stack into $SITE"
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" \
  "$WHL"/cuda_bindings-*.whl "$WHL"/cuda_pathfinder-*.whl "$WHL"/nvidia_nvjitlink_cu12-*.whl \
  "$WHL"/example_app-*.whl "$WHL"/skbuild_cudaq-*.whl 2>&1 | tail -5
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
# cuda-pathfinder looks in site-packages (not PYTHONPATH) and takes libnvJitLink.so.13 as
# readily as .so.12: with the machine's nvidia-nvjitlink 13 there, cuda-bindings 12.9 would load
# nvJitLink 13. It takes a library already loaded first, so preload nvJitLink 12.
export LD_LIBRARY_PATH="$SITE/nvidia/nvjitlink/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_PRELOAD="$SITE/nvidia/nvjitlink/lib/libnvJitLink.so.12${LD_PRELOAD:+:$LD_PRELOAD}"
# the run time's device code: the carried wheel's sets (cu12 and cu13), whichever
# skbuild_cudaq module is imported (tests run from the source tree)
export SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR="$SITE/skbuild_cudaq/_device"
export SKBUILD_CUDAQ_LINK_CACHE="${CU12_LINK_CACHE:-/tmp/skbuild-cudaq-cu12-link-cache}"
status=0
log "versions and one lookup (get_device_kernel on example_app built with NVRTC 12)"
"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/gpu-cu12.log"
import cuda.bindings, example_app._core as core
from skbuild_cudaq.fatbin import read_relfatbin_sections
from skbuild_cudaq.realtime import get_device_kernel
from skbuild_cudaq.realtime.link.device_runtime import runtime_dir
from skbuild_cudaq.realtime.link._nvjitlink import nvjitlink_version
versions = sorted({e.code_version_str for s in read_relfatbin_sections(core.__file__)
                   for c in s.containers for e in c.entries})
print("cuda-bindings", cuda.bindings.__version__, "from", cuda.bindings.__file__)
print("nvJitLink", nvjitlink_version(), "device run time", runtime_dir())
print("example_app LTO-IR code versions", versions, "from", core.__file__)
print("kernel", get_device_kernel(core, "single_thread_dispatcher"))
assert nvjitlink_version()[0] == 12 and versions == ["1.64"], (nvjitlink_version(), versions)
assert runtime_dir().name == "cu12", runtime_dir()
EOF
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The GPU tests that use example_app (the test binaries of test_library_gpu/test_bridge_gpu are
# compiled by this machine's nvcc 13: CUDA 13 IR, which nvJitLink 12 must refuse).
log "pytest -m gpu (CUDA 12 stack)"
"$PY" -m pytest -m gpu -p no:cacheprovider -o addopts="" -ra --strict-markers -W error \
  --junitxml "$OUT/gpu-tests-cu12.xml" ${PYTEST_ARGS:-} \
  tests/test_dispatcher_gpu.py tests/test_server.py 2>&1 | tee "$OUT/gpu-tests-cu12.log" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
log "bench/startup.py (CUDA 12 stack)"
"$PY" bench/startup.py --no-cuda-core --out "$OUT/startup_cu12.json" 2>&1 | tee "$OUT/bench-startup-cu12.log" | tail -30
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
log "done (status $status)"
exit $status
