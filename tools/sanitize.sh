#!/usr/bin/env bash
# The native core (skbuild_cudaq/realtime/_native.c) under AddressSanitizer and
# UndefinedBehaviorSanitizer: builds it instrumented into its own virtual environment
# (build/sanitize/venv, an editable install of this checkout) and runs the tests that
# drive it -- the host path, the UDP feeder, the test server, the rings, the shared ring,
# host-path graphs through the fake driver -- with libasan preloaded into every Python
# process they start.
# Fails when a test fails or any process wrote a sanitizer report (kept in build/sanitize/).
#   bash tools/sanitize.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/build/sanitize
python=${PYTHON:-python3}
libasan=$(gcc -print-file-name=libasan.so)
[ -e "$libasan" ] || { echo "sanitize.sh: no libasan (gcc's AddressSanitizer)" >&2; exit 2; }
mkdir -p "$root"
[ -x "$root/venv/bin/python" ] || "$python" -m venv "$root/venv"
echo "sanitize.sh: building the native core with -fsanitize=address,undefined" >&2
"$root/venv/bin/python" -m pip install -q -e ".[runtime,test]" \
  -C cmake.build-type=Debug \
  -C cmake.define.CMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -g"
rm -f "$root"/asan.* "$root"/ubsan.*
tests=(tests/test_host_path.py tests/test_native_handlers.py tests/test_host_handlers.py
       tests/test_host_graphs.py tests/test_udp.py tests/test_server.py tests/test_ring.py
       tests/test_ring_compiled.py tests/test_wire.py tests/test_parity.py
       tests/test_client_api.py)
status=0
# leaks: CPython's own allocations at exit are not ours; a ring too large to allocate must
# come back as NULL (the tests check the out-of-memory message), not abort in the allocator
LD_PRELOAD=$libasan \
ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:log_exe_name=1:log_path=$root/asan \
UBSAN_OPTIONS=print_stacktrace=1:log_exe_name=1:log_path=$root/ubsan \
  "$root/venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@" || status=$?
reports=$(find "$root" -maxdepth 1 -name 'asan.*' -o -maxdepth 1 -name 'ubsan.*')
if [ -n "$reports" ]; then
  echo "sanitize.sh: sanitizer reports:" >&2
  for f in $reports; do echo "== $f" >&2; head -30 "$f" >&2; done
  status=1
fi
[ "$status" = 0 ] && echo "sanitize.sh: clean" >&2
exit "$status"
