"""Shared fixtures. Nothing here touches CUDA at import or collection time."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_APP = ROOT / "example_app"
PACKAGES = Path(__file__).resolve().parent / "packages"


@functools.cache
def _gpu_reason() -> str | None:
    """None if a CUDA GPU is usable, else why not (checked lazily, in a subprocess)."""
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from cuda.bindings import driver as d;"
                "r=d.cuInit(0)[0];assert r==d.CUresult.CUDA_SUCCESS,r;"
                "r,n=d.cuDeviceGetCount();assert n>0,'no device';print(n)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot probe CUDA: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no usable CUDA GPU ({tail})"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    reason = None
    for item in items:
        if item.get_closest_marker("gpu"):
            reason = _gpu_reason() if reason is None else reason
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def nvcc() -> Path:
    from skbuild_cudaq.build._toolchain import find_nvcc
    from skbuild_cudaq.errors import ToolchainError

    try:
        return find_nvcc()
    except ToolchainError as exc:
        pytest.skip(str(exc))
