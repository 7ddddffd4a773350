"""The example dispatch kernels and the block-cooperative handler link with the run time.

Toolchain tier (nvcc + nvJitLink, no GPU): every example kernel is compiled on its
own to LTO-IR, exactly like cudaq_realtime_add_dispatch_kernel does, and linked by
nvJitLink with the device run time (built-in kernel + host-ring hooks) and the
handler; the hooks must resolve (no ``Unresolved extern``) and every kernel and the
exported handler global must be in the cubin.
"""

from __future__ import annotations

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


def link(inputs: list[tuple[str, bytes]], arch: str) -> bytes:
    from cuda.bindings import nvjitlink

    options = [f"-arch=sm_{arch}", "-lto"]
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
        for name in ("unified_dispatch_kernel", "host_ring_bridge")
    ]
    inputs.append(
        ("block_handlers", lto_fatbin(nvcc, SRC / "block_handlers.cu", "80", tmp_path / "bh.fb"))
    )
    expected = {"cudaq_realtime_unified_dispatch"}
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


def test_cluster_dispatcher_refuses_pre_hopper_targets(nvcc: Path, tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as info:
        lto_fatbin(nvcc, SRC / "cluster_dispatcher.cu", "80", tmp_path / "c.fatbin")
    assert "sm_90 or newer" in info.value.stderr
