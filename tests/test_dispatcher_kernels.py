"""The example dispatch kernels and the block-cooperative handler link with the run time.

Toolchain tier (nvcc + nvJitLink, no GPU): every example kernel is compiled on its
own to LTO-IR, exactly like cudaq_realtime_add_dispatch_kernel does, and linked by
nvJitLink with the device run time (built-in kernel + host-ring hooks) and the
handler; the hooks must resolve (no ``Unresolved extern``) and every kernel and the
exported handler global must be in the cubin.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from skbuild_cudaq._paths import include_dir

pytestmark = pytest.mark.toolchain

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "example_app" / "src"
RUNTIME = ROOT / "skbuild_cudaq" / "device"

KERNELS = {
    "cooperative_grid_dispatcher": ("cooperative_grid_dispatcher.cu", "80"),
    "warp_parallel_dispatcher": ("warp_parallel_dispatcher.cu", "80"),
    "single_thread_dispatcher": ("single_thread_dispatcher.cu", "80"),
    "cluster_dispatcher": ("cluster_dispatcher.cu", "90"),
}


def lto_fatbin(nvcc: Path, source: Path, arch: str, out: Path) -> bytes:
    subprocess.run(
        [
            str(nvcc),
            "-fatbin",
            "-rdc=true",
            "-std=c++17",
            f"-gencode=arch=compute_{arch},code=lto_{arch}",
            f"-I{include_dir()}",
            "-o",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.read_bytes()


def link(inputs: list[tuple[str, bytes]], arch: str, info: list[str] | None = None) -> bytes:
    """Link ``inputs``; with ``info``, verbosely, appending nvJitLink's info log to it."""
    from cuda.bindings import nvjitlink

    options = [f"-arch=sm_{arch}", "-lto", *(["-verbose"] if info is not None else [])]
    handle = nvjitlink.create(len(options), options)
    try:
        for name, data in inputs:
            nvjitlink.add_data(handle, nvjitlink.InputType.FATBIN, data, len(data), name)
        try:
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError:
            size = nvjitlink.get_error_log_size(handle)
            log = bytearray(size)
            nvjitlink.get_error_log(handle, log)
            pytest.fail(f"nvJitLink failed:\n{log.decode(errors='replace')}")
        if info is not None:
            log = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, log)
            info.append(log.decode(errors="replace").replace("\0", ""))
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def global_symbols(cubin: bytes) -> dict[str, str]:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(cubin))
    symtab = elf.get_section_by_name(".symtab")
    return {
        sym.name: sym["st_info"]["type"]
        for sym in symtab.iter_symbols()
        if sym["st_info"]["bind"] == "STB_GLOBAL" and sym["st_shndx"] != "SHN_UNDEF"
    }


@pytest.mark.parametrize("arch", ["80", "90"])
def test_example_kernels_link_with_the_run_time(nvcc: Path, tmp_path: Path, arch: str) -> None:
    pytest.importorskip("cuda.bindings.nvjitlink")
    inputs = [
        (name, lto_fatbin(nvcc, RUNTIME / f"{name}.cu", "80", tmp_path / f"{name}.fatbin"))
        for name in ("unified_dispatch_kernel", "hook_defaults", "host_ring_bridge")
    ]
    inputs.append(
        ("block_handlers", lto_fatbin(nvcc, SRC / "block_handlers.cu", "80", tmp_path / "bh.fb"))
    )
    expected = {"cudaq_realtime_unified_dispatch", "cudaq_realtime_unified_dispatch_1024"}
    for kernel, (source, kernel_arch) in KERNELS.items():
        if int(kernel_arch) > int(arch):
            continue
        out = tmp_path / f"{kernel}.fatbin"
        inputs.append((kernel, lto_fatbin(nvcc, SRC / source, kernel_arch, out)))
        expected.add(kernel)
    symbols = global_symbols(link(inputs, arch))
    for kernel in expected:
        assert symbols.get(kernel) == "STT_FUNC", kernel
    assert symbols.get("cudaq_handler_block_reverse") == "STT_OBJECT"


def test_dispatch_kernels_keep_their_registers(nvcc: Path, tmp_path: Path) -> None:
    """No dispatch kernel of example_app's module spills registers (sm_90).

    The module as its build links it: the run time, the handlers, every example
    kernel and the handler switch over the thread-shaped exports. A spill in a
    dispatch kernel is a local-memory store and load on its polling thread's path
    every round trip: the built-in and the cluster kernel used to spill the
    request's words the host ring had loaded (a word a predicated load may leave
    unwritten stayed live around the loop). Handlers that are not inlined may
    spill in their own frames (they run only when called).
    """
    pytest.importorskip("cuda.bindings.nvjitlink")
    from skbuild_cudaq.build._handler_switch import write_switch

    switch = tmp_path / "handler_switch.cu"
    write_switch(switch, "_core", [SRC / "handlers.cu", SRC / "block_handlers.cu"])
    sources = [
        (RUNTIME / "unified_dispatch_kernel.cu", "80"),
        (RUNTIME / "hook_defaults.cu", "80"),
        (RUNTIME / "host_ring_bridge.cu", "80"),
        (SRC / "handlers.cu", "80"),
        (SRC / "block_handlers.cu", "80"),
        *((SRC / source, arch) for source, arch in KERNELS.values()),
        (switch, "80"),
    ]
    inputs = [
        (src.name, lto_fatbin(nvcc, src, arch, tmp_path / f"{i}.fatbin"))
        for i, (src, arch) in enumerate(sources)
    ]
    info: list[str] = []
    link(inputs, "90", info)
    entries = re.findall(
        r"Function properties for (\w+)\n[^\n]*?(\d+) bytes spill stores, (\d+) bytes spill loads",
        info[0],
    )
    spills = {name: (int(st), int(ld)) for name, st, ld in entries}
    kernels = ["cudaq_realtime_unified_dispatch", *KERNELS]
    assert set(kernels) <= set(spills), info[0][-2000:]
    assert {k: spills[k] for k in kernels} == {k: (0, 0) for k in kernels}
    # The built-in kernel's 1024-thread build fits 1024 threads in an sm_90 block's
    # registers (65536): at most 64 a thread, which its __launch_bounds__(1024, 1) asks for.
    registers = dict(
        re.findall(r"Function properties for (\w+)\n[^\n]*\n[^\n]*?Used (\d+) registers", info[0])
    )
    assert 0 < int(registers["cudaq_realtime_unified_dispatch_1024"]) <= 64


def test_cluster_dispatcher_refuses_pre_hopper_targets(nvcc: Path, tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as info:
        lto_fatbin(nvcc, SRC / "cluster_dispatcher.cu", "80", tmp_path / "c.fatbin")
    assert "sm_90 or newer" in info.value.stderr


def test_example_kernels_and_handlers_link_with_a_bridge_without_lanes(
    nvcc: Path, tmp_path: Path
) -> None:
    """Dispatch kernels use contract hooks only: the lane kernel links with any bridge.

    The mailbox bridge (tests/gpu_kernels) defines just the three transport hooks;
    the run time's default lane hooks fill in for it.
    """
    nvjitlink = pytest.importorskip("cuda.bindings.nvjitlink")
    from skbuild_cudaq.realtime.link._nvjitlink import known_defect

    major, minor = nvjitlink.version()
    defect = known_defect((int(major), int(minor)))
    if defect:  # 13.0.x segfaults linking these (13.1.80: a ptxas internal compiler error)
        pytest.skip(defect)
    gpu_kernels = Path(__file__).resolve().parent / "gpu_kernels"
    inputs = [
        ("unified", lto_fatbin(nvcc, RUNTIME / "unified_dispatch_kernel.cu", "80", tmp_path / "u")),
        ("defaults", lto_fatbin(nvcc, RUNTIME / "hook_defaults.cu", "80", tmp_path / "d")),
        ("mailbox", lto_fatbin(nvcc, gpu_kernels / "mailbox_bridge.cu", "80", tmp_path / "m")),
        ("handlers", lto_fatbin(nvcc, SRC / "handlers.cu", "80", tmp_path / "h")),
    ]
    for kernel, (source, arch) in KERNELS.items():
        inputs.append((kernel, lto_fatbin(nvcc, SRC / source, arch, tmp_path / kernel)))
    symbols = global_symbols(link(inputs, "90"))
    assert all(symbols.get(k) == "STT_FUNC" for k in KERNELS)
    # thread-shaped handlers carry their shape marker; launch-wide ones none
    assert symbols.get("cudaq_handler_echo_thread") == "STT_OBJECT"
    assert symbols.get("cudaq_shape_thread_echo_thread") == "STT_OBJECT"
    assert symbols.get("cudaq_shape_thread_rpc_increment_thread") == "STT_OBJECT"
    assert "cudaq_shape_thread_echo" not in symbols


LANE_PROBE = r"""
#include <cudaq/realtime/unified_dispatch_device.cuh>
extern "C" __global__ void lane_probe(void **out, volatile int *flag) {
  out[threadIdx.x] = cudaq_dev_enter_lane(nullptr, flag, threadIdx.x, 2);
}
"""
LANE_BRIDGE = r"""
#include <cudaq/realtime/unified_dispatch_device.cuh>
extern "C" __device__ void *cudaq_dev_enter_kernel(void *, volatile int *) {
  return reinterpret_cast<void *>(0x5EEDCAFE1111ull);
}
extern "C" __device__ int cudaq_dev_rx_poll(void *, void **, void **) { return 0; }
extern "C" __device__ void cudaq_dev_tx_publish(void *, void *) {}
"""
LANE_HOOKS = r"""
#include <cudaq/realtime/unified_dispatch_device.cuh>
extern "C" __device__ void *cudaq_dev_enter_lane(void *, volatile int *, uint32_t lane, uint32_t) {
  return reinterpret_cast<void *>(0x5EEDCAFE2222ull + lane);
}
extern "C" __device__ int cudaq_dev_rx_try_poll(void *, void **, void **) { return 0; }
"""


@pytest.mark.parametrize("order", ["bridge-first", "runtime-first"])
def test_a_bridges_lane_hooks_replace_the_run_times_defaults(
    nvcc: Path, tmp_path: Path, order: str
) -> None:
    pytest.importorskip("cuda.bindings.nvjitlink")
    fatbins = {}
    for name, text in (("probe", LANE_PROBE), ("bridge", LANE_BRIDGE), ("lanes", LANE_HOOKS)):
        src = tmp_path / f"{name}.cu"
        src.write_text(text)
        fatbins[name] = lto_fatbin(nvcc, src, "80", tmp_path / f"{name}.fatbin")
    runtime = lto_fatbin(nvcc, RUNTIME / "unified_dispatch_kernel.cu", "80", tmp_path / "u")
    defaults = lto_fatbin(nvcc, RUNTIME / "hook_defaults.cu", "80", tmp_path / "d")
    default_marker = (0x5EEDCAFE1111).to_bytes(8, "little")[:4]
    lane_marker = (0x5EEDCAFE2222).to_bytes(8, "little")[:4]
    # Without lane hooks of the bridge's own, the default calls cudaq_dev_enter_kernel.
    base = [
        ("probe", fatbins["probe"]),
        ("bridge", fatbins["bridge"]),
        ("runtime", runtime),
        ("defaults", defaults),
    ]
    cubin = link(base, "90")
    assert default_marker in cubin and lane_marker not in cubin
    # With them (whatever the input order), the bridge's definitions win.
    lanes = ("lanes", fatbins["lanes"])
    cubin = link([lanes, *base] if order == "bridge-first" else [*base, lanes], "90")
    assert lane_marker in cubin
