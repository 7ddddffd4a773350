"""A stand-in for ``cuda.bindings.driver`` for the run time's error paths and call order.

Never the proof that a feature works (the GPU tests are); it lets CPU tests drive
start-up and lookup code down paths a real driver rarely takes.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class Result(int):
    """Stands in for a CUresult member (an int with a name)."""

    def __new__(cls, code: int, name: str) -> Result:
        obj = super().__new__(cls, code)
        obj.name = name  # type: ignore[attr-defined]
        return obj


OK = Result(0, "CUDA_SUCCESS")


def startup_driver(events: list[str], retain: Any) -> SimpleNamespace:
    """A driver with no context current and device 0 an sm_90; ``events`` records the calls.

    ``retain`` stands in for ``cuDevicePrimaryCtxRetain``; loads succeed.
    """
    attrs = SimpleNamespace(
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
    )

    def record(name: str, value: Any = None) -> Any:
        events.append(name)
        return (OK, value)

    return SimpleNamespace(
        cuInit=lambda flags: OK,
        cuCtxGetCurrent=lambda: record("cuCtxGetCurrent", None),
        cuDeviceGet=lambda ordinal: (OK, ordinal),
        CUdevice_attribute=attrs,
        cuDeviceGetAttribute=lambda attr, dev: record(attr, 9 if attr == "major" else 0),
        cuDevicePrimaryCtxRetain=retain,
        cuCtxSetCurrent=lambda ctx: OK,
        cuLibraryLoadData=lambda *a: record("cuLibraryLoadData", "library-handle"),
        cuLibraryGetKernel=lambda lib, name: (OK, f"kernel:{name.decode()}"),
        cuLibraryUnload=lambda h: OK,
        cuGetErrorString=lambda r: (OK, b"described"),
    )
