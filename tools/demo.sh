#!/usr/bin/env bash
# The main job, installed the way docs/getting-started.md says (skbuild-cudaq is not
# on PyPI yet):
#   1. build skbuild-cudaq's wheel from this checkout into a local wheelhouse;
#   2. with PIP_FIND_LINKS pointing there, `pip install` skbuild-cudaq[runtime] and
#      example_app with build isolation -- scikit-build-core brings CMake and Ninja
#      from PyPI when the system has none -- into the virtual environment
#      build/demo/venv (kept between runs; the dev .venv is left alone);
#   3. show what example_app's extension module embeds (`inspect`);
#   4. link its device code for one GPU architecture with nvJitLink (no GPU needed);
#   5. serve a real two-process round trip: cudaq-realtime-test-server in one process
#      (device path on a GPU, host path without one), a UDP client in another.
#
#   bash tools/demo.sh
#   CUDAQ_DEMO_ARCH=sm_80 bash tools/demo.sh   # link for another arch (default: the GPU's, else sm_90)
#   CUDAQ_DEMO_PATH=host bash tools/demo.sh    # the host path even on a GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=build/demo
venv=$work/venv
step() { printf '\n== %s\n' "$*"; }

if [ ! -x "$venv/bin/python" ]; then
  step "creating $venv"
  "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
fi
pip=("$venv/bin/python" -m pip)

step "building skbuild-cudaq's wheel into $work/wheelhouse"
rm -rf "$work/wheelhouse"
"${pip[@]}" wheel -q --no-deps --wheel-dir "$work/wheelhouse" .
wheel=$(ls "$work"/wheelhouse/skbuild_cudaq-*.whl)
echo "$wheel"
# A file: URL: pip splits PIP_FIND_LINKS at spaces, a URL has none.
wheelhouse=$("$venv/bin/python" -c 'import pathlib, sys; print(pathlib.Path(sys.argv[1]).absolute().as_uri())' "$work/wheelhouse")
export PIP_FIND_LINKS="$wheelhouse${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"

step "pip install skbuild-cudaq[runtime] and ./example_app (build isolation)"
# The same version number as a previous run's wheel: replace it, whatever it was.
"${pip[@]}" install -q --force-reinstall --no-deps "$wheel"
"${pip[@]}" install -q "skbuild-cudaq[runtime]" ./example_app
# From here on, run where the checkout's own skbuild_cudaq/ cannot shadow the installed
# package (python -m puts the working directory first on sys.path).
work=$PWD/$work
venv=$PWD/$venv
cd "$work"
ext=$("$venv/bin/python" -c "import example_app._core as m; print(m.__file__)")
echo "example_app._core: $ext"

step "what the module embeds: python -m skbuild_cudaq inspect"
"$venv/bin/python" -m skbuild_cudaq inspect "$ext"

# A GPU? Then its architecture; else link for CUDAQ_DEMO_ARCH (default sm_90) and
# serve on the host path.
gpu_arch=$("$venv/bin/python" - <<'EOF' 2>/dev/null || true
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
err, dev = d.cuDeviceGet(0)
assert err == d.CUresult.CUDA_SUCCESS
a = d.CUdevice_attribute
major = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
minor = d.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
print(f"sm_{major}{minor}")
EOF
)
arch=${CUDAQ_DEMO_ARCH:-${gpu_arch:-sm_90}}
path=${CUDAQ_DEMO_PATH:-$([ -n "$gpu_arch" ] && echo device || echo host)}

step "linking for $arch: python -m skbuild_cudaq link (nvJitLink, no GPU needed)"
"$venv/bin/python" -m skbuild_cudaq link "$ext" --arch "$arch" -o "$work/example_app.$arch.cubin"

if [ "$path" = device ]; then
  step "serving on the device path (GPU ${gpu_arch:-?}): single_thread_dispatcher, UDP on loopback"
  server_args=(--path=device --dispatcher=single_thread_dispatcher --grid=1 --block=1)
else
  step "serving on the host path (no GPU${gpu_arch:+ used}): HOST_CALL handlers, UDP on loopback"
  server_args=(--path=host)
fi
out=$work/server.out
# made here: the background job's own redirection may open it after the first grep below
: >"$out"
"$venv/bin/cudaq-realtime-test-server" "${server_args[@]}" --timeout 120 >"$out" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  grep -q CUDAQ_REALTIME_SERVER_READY "$out" && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q CUDAQ_REALTIME_SERVER_READY "$out"; then
  cat "$out"
  echo "demo: the test server did not become ready" >&2
  exit 1
fi
echo "server (pid $server): $(grep CUDAQ_REALTIME_SERVER_READY "$out")"
port=$(sed -n 's/.*CUDAQ_REALTIME_SERVER_READY.* port=\([0-9]*\).*/\1/p' "$out")
"$venv/bin/python" - "$port" <<'EOF'
import sys

from skbuild_cudaq.realtime import UdpClient

with UdpClient("127.0.0.1", int(sys.argv[1])) as client:
    for name, payload, expected in (
        ("rpc_increment", b"\x00\x01\x02\xff", b"\x01\x02\x03\x00"),
        ("echo", b"hello, dispatcher", b"hello, dispatcher"),
    ):
        status, result = client.call(name, payload)
        ok = status == 0 and result == expected
        print(f"client (another process): {name}({payload!r}) -> status {status}, {result!r}"
              f"{'' if ok else f'  EXPECTED {expected!r}'}")
        if not ok:
            sys.exit(1)
EOF
kill -TERM "$server"
wait "$server"
trap - EXIT
grep -E "CUDAQ_REALTIME_SERVER_(BRIDGE|PROCESSED)" "$out" | sed 's/^/server: /'
grep -q "CUDAQ_REALTIME_SERVER_PROCESSED count=2" "$out"
step "done: built, inspected, linked for $arch, served 2 requests on the $path path"
