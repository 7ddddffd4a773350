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


def test_the_package_is_marked_typed() -> None:
    """PEP 561: without py.typed, type checkers skip the package's annotations."""
    from pathlib import Path

    assert (Path(skbuild_cudaq.__file__).parent / "py.typed").is_file()
