"""Shared fixtures. Nothing here touches CUDA at import or collection time."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from _fake_driver import UseDriver
    from gpu_kernels.testbins import DeviceBinaries

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_APP = ROOT / "example_app"
PACKAGES = Path(__file__).resolve().parent / "packages"
EXTENSION = "example_app._core"  # example_app's extension: the handlers and custom kernels


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


@pytest.fixture(scope="session")
def bins(nvcc: Path, tmp_path_factory: pytest.TempPathFactory) -> DeviceBinaries:
    """The test binaries of ``tests/gpu_kernels`` (built with nvcc once per session)."""
    from gpu_kernels.testbins import build_once

    return build_once(nvcc, tmp_path_factory.mktemp("testbins"))


@pytest.fixture(scope="session")
def core() -> Any:
    """example_app's extension module (``pip install ./example_app``); a skip without it.

    Imported at the first test that asks (never at collection): importing it touches no CUDA.
    """
    try:
        return importlib.import_module(EXTENSION)
    except ImportError as exc:
        pytest.skip(f"{EXTENSION} is not installed (pip install ./example_app): {exc}")


@pytest.fixture
def use_driver(monkeypatch: pytest.MonkeyPatch) -> UseDriver:
    """``use_driver(fake)`` makes ``fake`` the run time's CUDA driver for this test.

    The one seam is ``skbuild_cudaq.realtime._driver.driver``; the module's per-process
    state (``cuInit`` done, retained primary contexts, architectures) starts empty and
    is restored afterwards. ``use_driver(None)`` keeps the real driver, state reset.
    Fakes are in ``tests/_fake_driver.py``.
    """
    from skbuild_cudaq.realtime import _driver

    def install(fake: Any) -> Any:
        if fake is not None:
            monkeypatch.setattr(_driver, "driver", lambda: fake)
        monkeypatch.setattr(_driver, "_initialised", False)
        monkeypatch.setattr(_driver, "_primary", {})
        monkeypatch.setattr(_driver, "_archs", {})
        return fake

    return install
