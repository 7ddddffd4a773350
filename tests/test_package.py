from __future__ import annotations

import subprocess
import sys

import skbuild_cudaq


def test_cmake_dir_cli_prints_package_directory() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "--cmake-dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(skbuild_cudaq.cmake_dir())
    assert (skbuild_cudaq.cmake_dir() / "skbuild_cudaqConfig.cmake").is_file()


def test_device_header_ships() -> None:
    header = skbuild_cudaq.include_dir() / "cudaq" / "realtime" / "unified_dispatch_device.cuh"
    assert header.is_file()


def test_device_runtime_fatbins_ship() -> None:
    names = sorted(p.name for p in skbuild_cudaq.device_runtime_dir().glob("*.fatbin"))
    assert names == ["host_ring_bridge.fatbin", "unified_dispatch_kernel.fatbin"]


def test_device_runtime_ships_one_set_per_cuda_major() -> None:
    """Built from NVRTC 12.9 and 13.0 (build-system.requires): each set's LTO-IR comes from
    its own major, and no newer than the oldest nvJitLink its extra accepts."""
    from skbuild_cudaq._paths import device_runtime_sets
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime._nvjitlink import ir_release

    root = skbuild_cudaq.device_runtime_dir().parent
    sets = device_runtime_sets(root)
    assert set(sets) == {12, 13}, f"{root}: {sorted(p.name for p in root.iterdir())}"
    for major, directory in sets.items():
        assert sorted(p.name for p in directory.glob("*.fatbin")) == [
            "host_ring_bridge.fatbin",
            "unified_dispatch_kernel.fatbin",
        ]
        for fatbin in directory.glob("*.fatbin"):
            for container in read_fatbin_file(fatbin):
                for entry in container.entries:
                    assert entry.kind == "lto-ir" and entry.arch == 80
                    assert ir_release(entry.code_version) == {12: (12, 9), 13: (13, 0)}[major]


def test_the_package_is_marked_typed() -> None:
    """PEP 561: without py.typed, type checkers skip the package's annotations."""
    from pathlib import Path

    assert (Path(skbuild_cudaq.__file__).parent / "py.typed").is_file()
