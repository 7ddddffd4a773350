"""Driver failures are typed errors, never a loader's exception or a TypeError (issue 11, item 6).

``Dispatcher.start()`` without ``cuda.bindings`` or without the driver library, and
example_app's launchers on any driver failure. The missing bindings are made missing for real
(``sys.modules``), the missing driver library is real where the bindings are installed and no
NVIDIA driver is (this CI machine) and a driver whose ``cuInit`` raises elsewhere; the launchers'
failures come from a fake driver (error paths only: the GPU tests prove the launches).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from _fake_driver import Result, UseDriver, failing_driver

from skbuild_cudaq.errors import CudaqError
from skbuild_cudaq.realtime.dispatcher import Dispatcher, DispatcherConfig, LaunchArgs
from skbuild_cudaq.realtime.errors import CUDAError, NoDeviceError, RealtimeError

LAUNCHERS = Path(__file__).resolve().parent.parent / "example_app/src/example_app/launchers.py"


class _Library:
    def contains(self, address: int) -> bool:
        return True


class _Launcher:
    """Never called: start() fails before any launch."""

    library = _Library()

    def __call__(self, args: LaunchArgs) -> None:
        raise AssertionError("launched without a driver")


def _dispatcher() -> Dispatcher:
    d = Dispatcher(DispatcherConfig(num_slots=4, slot_size=64))
    d.set_unified_launch(_Launcher())
    return d


def _start_fails() -> RealtimeError:
    d = _dispatcher()
    with pytest.raises(CudaqError) as info:
        d.start()
    assert isinstance(info.value, RealtimeError)
    assert not d.running
    d.close()  # nothing was allocated: closing is a no-op, not a second error
    return info.value


def test_start_without_cuda_bindings_is_a_realtime_error(
    monkeypatch: pytest.MonkeyPatch, use_driver: UseDriver
) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)  # import raises ImportError
    use_driver(None)  # the real driver() (which cannot import the bindings), state reset
    error = _start_fails()
    assert str(error).startswith("the CUDA driver bindings cannot be imported (")
    assert str(error).endswith("); install the run time: pip install 'skbuild-cudaq[runtime]'")


def _bindings_without_a_driver() -> str | None:
    """Why the real case cannot run here (None: cuda.bindings present, libcuda absent)."""
    if importlib.util.find_spec("cuda.bindings") is None:
        return "cuda-bindings is not installed"
    from conftest import _gpu_reason

    reason = _gpu_reason()  # a subprocess: this process never loads the driver here
    if reason is None or "driver" not in reason.lower():
        return f"an NVIDIA driver is installed ({reason or 'a GPU is usable'})"
    return None


@pytest.mark.parametrize("how", ["real", "cuInit-raises"])
def test_start_without_a_driver_library_is_a_realtime_error(
    use_driver: UseDriver, how: str
) -> None:
    if how == "real":
        why = _bindings_without_a_driver()
        if why is not None:
            pytest.skip(why)
        use_driver(None)  # the real driver, state reset
    else:

        def cu_init(flags: int) -> Any:  # what cuda.bindings does when libcuda.so is missing
            raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found ...')

        use_driver(SimpleNamespace(cuInit=cu_init))
    error = _start_fails()
    assert isinstance(error, NoDeviceError)  # what a test that needs a GPU skips on
    assert str(error).startswith("cannot initialise CUDA (is an NVIDIA driver installed?): ")
    assert "NVIDIA driver" in str(error).split("?): ", 1)[1]


def test_a_driver_that_sees_no_gpu_is_no_device_and_other_failures_are_not(
    use_driver: UseDriver,
) -> None:
    """cuInit's CUDA_ERROR_NO_DEVICE (a driver, no GPU, or CUDA_VISIBLE_DEVICES hiding them)
    is a NoDeviceError; another cuInit failure stays a CUDAError, not a reason to skip."""
    use_driver(SimpleNamespace(cuInit=lambda flags: (Result(100, "CUDA_ERROR_NO_DEVICE"),)))
    error = _start_fails()
    assert isinstance(error, NoDeviceError)
    assert str(error).startswith("cuInit failed: CUDA_ERROR_NO_DEVICE: the NVIDIA driver sees")
    use_driver(SimpleNamespace(cuInit=lambda flags: (Result(999, "CUDA_ERROR_UNKNOWN"),)))
    error = _start_fails()
    assert isinstance(error, CUDAError) and not isinstance(error, NoDeviceError)


# -- example_app's launchers ------------------------------------------------------------------


@pytest.fixture
def launchers(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """example_app/src/example_app/launchers.py itself (the package's extension is not needed)."""
    spec = importlib.util.spec_from_file_location("_example_app_launchers", LAUNCHERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


NO_DEVICE = Result(100, "CUDA_ERROR_NO_DEVICE")
INVALID_HANDLE = Result(400, "CUDA_ERROR_INVALID_HANDLE")


KERNEL = SimpleNamespace(handle="kernel-handle", library=None)


@pytest.mark.parametrize(
    ("fail", "run", "call"),
    [
        ("cuDeviceGet",
         lambda m: m._device_attribute(0, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
         "cuDeviceGet"),
        ("cuDeviceGetAttribute",
         lambda m: m._device_attribute(0, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
         "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)"),
        ("cuKernelGetFunction", lambda m: m.max_cooperative_blocks(KERNEL, 0, 128),
         "cuKernelGetFunction"),
        ("cuOccupancyMaxActiveBlocksPerMultiprocessor",
         lambda m: m.max_cooperative_blocks(KERNEL, 0, 128),
         "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
        ("cuFuncGetAttribute", lambda m: m.warp_shared_bytes(KERNEL, 0, 4096),
         "cuFuncGetAttribute(SHARED_SIZE_BYTES)"),
        ("cuKernelSetAttribute", lambda m: m.warp_shared_bytes(KERNEL, 0, 4096),
         "cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.startswith("cu") and "(" not in v else None,
)  # fmt: skip
def test_launcher_driver_failures_are_cuda_errors(
    launchers: ModuleType, monkeypatch: pytest.MonkeyPatch, fail: str, run: Any, call: str
) -> None:
    monkeypatch.setattr(launchers, "_driver", lambda: failing_driver(fail, NO_DEVICE))
    with pytest.raises(CUDAError) as info:
        run(launchers)
    error = info.value
    assert (error.call, error.name, error.code) == (call, "CUDA_ERROR_NO_DEVICE", 100)
    assert str(error) == f"{call} failed: CUDA_ERROR_NO_DEVICE (100)"


def test_launcher_call_reports_the_driver_error(
    launchers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through KernelLauncher.__call__ (what start() runs): a cooperative grid whose occupancy
    query fails. (The kernel lookup is the one thing replaced: it needs a linked module.)"""
    monkeypatch.setattr(launchers, "get_device_kernel", lambda module, name, device=None: KERNEL)
    monkeypatch.setattr(
        launchers, "_driver", lambda: failing_driver("cuKernelGetFunction", INVALID_HANDLE)
    )
    launcher = launchers.cooperative_grid(ModuleType("example_app._core"))
    with pytest.raises(CUDAError) as info:
        launcher(SimpleNamespace(device=0))
    assert str(info.value) == "cuKernelGetFunction failed: CUDA_ERROR_INVALID_HANDLE (400)"


def test_unnamed_result_code_is_shown_by_number(
    launchers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launchers, "_driver", lambda: failing_driver("cuDeviceGet", 999))
    with pytest.raises(CUDAError) as info:
        launchers._device_attribute(0, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    assert (info.value.call, info.value.name, info.value.code) == (
        "cuDeviceGet",
        "CUresult 999",
        999,
    )
