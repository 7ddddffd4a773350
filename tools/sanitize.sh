#!/usr/bin/env bash
# The native core (skbuild_cudaq/realtime/host/native/, ring/fastcall/) under a sanitizer:
# builds it instrumented into a virtual environment of its own (an editable install of this
# checkout) and runs the tests that drive it -- the host path, the UDP feeder, the test
# server, the rings, the shared ring, host-path graphs through the fake driver, the native
# threads' stress tests -- with the sanitizer's run time preloaded into every Python process
# they start.
#   bash tools/sanitize.sh [PYTEST ARGS...]           AddressSanitizer + UndefinedBehaviorSanitizer
#                                                     (build/sanitize/)
#   bash tools/sanitize.sh --thread [PYTEST ARGS...]  ThreadSanitizer (build/sanitize-thread/)
# Fails when a test fails or any process wrote a sanitizer report (kept in the build folder).
#
# ThreadSanitizer: CPython and numpy are not instrumented. TSan still sees their threads and
# locks (the GIL) through the pthread calls it intercepts, and their memcpy/memset, but not
# their plain loads and stores: the flag accesses of the ring's Python paths (x86-TSO) among
# them. tools/tsan-suppressions.txt lists the copies of theirs that look unordered for that
# reason, one reason each; everything of host/native/ and ring/fastcall/ stays checked. libtsan is
# preloaded into Python processes only (venv/bin/python-tsan, which is sys.executable): the
# cmake and compilers a test starts (a wheel build) hang under it.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=address
if [ "${1:-}" = "--thread" ]; then
  mode=thread
  shift
fi
python=${PYTHON:-python3}
tests=(tests/test_host_path.py tests/test_native_handlers.py tests/test_host_handlers.py
       tests/test_host_graphs.py tests/test_udp.py tests/test_server.py tests/test_ring.py
       tests/test_ring_compiled.py tests/test_wire.py tests/test_parity.py
       tests/test_client_api.py tests/test_native_threads.py)
status=0
if [ "$mode" = address ]; then
  root=$PWD/build/sanitize
  libasan=$(gcc -print-file-name=libasan.so)
  [ -e "$libasan" ] || { echo "sanitize.sh: no libasan (gcc's AddressSanitizer)" >&2; exit 2; }
  mkdir -p "$root"
  [ -x "$root/venv/bin/python" ] || "$python" -m venv "$root/venv"
  echo "sanitize.sh: building the native core with -fsanitize=address,undefined" >&2
  "$root/venv/bin/python" -m pip install -q -e ".[runtime,test]" \
    -C cmake.build-type=Debug \
    -C cmake.define.CMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -g"
  rm -f "$root"/asan.* "$root"/ubsan.*
  # leaks: CPython's own allocations at exit are not ours; a ring too large to allocate must
  # come back as NULL (the tests check the out-of-memory message), not abort in the allocator
  LD_PRELOAD=$libasan \
  ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:log_exe_name=1:log_path=$root/asan \
  UBSAN_OPTIONS=print_stacktrace=1:log_exe_name=1:log_path=$root/ubsan \
    "$root/venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@" || status=$?
  reports=$(find "$root" -maxdepth 1 -name 'asan.*' -o -maxdepth 1 -name 'ubsan.*')
else
  root=$PWD/build/sanitize-thread
  libtsan=$(gcc -print-file-name=libtsan.so)
  [ -e "$libtsan" ] || { echo "sanitize.sh: no libtsan (gcc's ThreadSanitizer)" >&2; exit 2; }
  mkdir -p "$root"
  [ -x "$root/venv/bin/python" ] || "$python" -m venv "$root/venv"
  echo "sanitize.sh: building the native core with -fsanitize=thread" >&2
  "$root/venv/bin/python" -m pip install -q -e ".[runtime,test]" \
    -C cmake.build-type=Debug -C build-dir="$root/cmake" \
    -C cmake.define.CMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer -g"
  # python-tsan: the venv's Python with libtsan preloaded; a .pth drops LD_PRELOAD from the
  # environment at start-up, so that only Python processes (through sys.executable) get it
  printf '#!/bin/bash\nLD_PRELOAD=%q exec -a "$0" %q "$@"\n' "$libtsan" \
    "$root/venv/bin/python3" > "$root/venv/bin/python-tsan"
  chmod +x "$root/venv/bin/python-tsan"
  site=$("$root/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  echo 'import os; os.environ.pop("LD_PRELOAD", None)' > "$site/_sanitize_thread.pth"
  rm -f "$root"/tsan.*
  # exitcode=0: a report fails the run through its log, not the exit status of the process
  # a test checks; die_after_fork=0: a test forks the threaded process and starts a serving
  # thread in the child (host/native/life.c makes its locks anew there); allocator_may_return_null:
  # as above
  TSAN_OPTIONS="log_path=$root/tsan:exitcode=0:die_after_fork=0:allocator_may_return_null=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan-suppressions.txt" \
    "$root/venv/bin/python-tsan" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@" \
    || status=$?
  reports=$(find "$root" -maxdepth 1 -name 'tsan.*')
fi
if [ -n "$reports" ]; then
  echo "sanitize.sh: sanitizer reports:" >&2
  for f in $reports; do echo "== $f" >&2; head -40 "$f" >&2; done
  status=1
fi
[ "$status" = 0 ] && echo "sanitize.sh: clean" >&2
exit "$status"
