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


class TwoGpuDriver:
    """Two GPUs of different architectures (device 0 sm_90, device 1 sm_80 by default).

    Models what the per-device logic depends on: a per-thread stack of current
    contexts (``cuCtxSetCurrent``/``Push``/``Pop``), one primary context per device,
    context-independent libraries, and device globals whose *values* (the handler
    addresses) differ per context. ``calls`` records ``(call, current context)``.
    For the run time's per-device logic and error paths only; the GPU tests prove
    the real thing.
    """

    CTX_BASE = 0x1000

    def __init__(self, archs: tuple[tuple[int, int], ...] = ((9, 0), (8, 0))) -> None:
        import threading

        self.archs = archs
        self.calls: list[tuple[str, int | None]] = []
        self.retained: dict[int, int] = {}
        self.loaded: list[str] = []
        self._globals: dict[int, int] = {}  # fake dptr -> the handler address it holds
        self._tls = threading.local()
        self.CUdevice_attribute = SimpleNamespace(
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
        )

    # -- contexts -------------------------------------------------------------------
    def _stack(self) -> list[int]:
        stack: list[int] | None = getattr(self._tls, "stack", None)
        if stack is None:
            stack = self._tls.stack = []
        return stack

    def current(self) -> int | None:
        stack = self._stack()
        return stack[-1] if stack else None

    def _record(self, call: str) -> None:
        self.calls.append((call, self.current()))

    def cuInit(self, flags: int) -> Result:
        return OK

    def cuDeviceGetCount(self) -> tuple[Result, int]:
        return (OK, len(self.archs))

    def cuDeviceGet(self, ordinal: int) -> tuple[Result, int | None]:
        if not 0 <= ordinal < len(self.archs):
            return (Result(101, "CUDA_ERROR_INVALID_DEVICE"), None)
        return (OK, ordinal)

    def cuDeviceGetAttribute(self, attr: str, dev: int) -> tuple[Result, int]:
        major, minor = self.archs[dev]
        return (OK, major if attr == "major" else minor)

    def cuDevicePrimaryCtxRetain(self, dev: int) -> tuple[Result, int]:
        self._record(f"cuDevicePrimaryCtxRetain({dev})")
        self.retained[dev] = self.retained.get(dev, 0) + 1
        return (OK, self.CTX_BASE + dev)

    def cuDevicePrimaryCtxRelease(self, dev: int) -> Result:
        self.retained[dev] -= 1
        return OK

    def cuCtxGetCurrent(self) -> tuple[Result, int | None]:
        return (OK, self.current())

    def cuCtxGetDevice(self) -> tuple[Result, int | None]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return (OK, ctx - self.CTX_BASE)

    def cuCtxSetCurrent(self, ctx: int) -> Result:
        stack = self._stack()
        if stack:
            stack[-1] = int(ctx)
        else:
            stack.append(int(ctx))
        return OK

    def cuCtxPushCurrent(self, ctx: int) -> Result:
        self._stack().append(int(ctx))
        return OK

    def cuCtxPopCurrent(self) -> tuple[Result, int | None]:
        stack = self._stack()
        if not stack:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return (OK, stack.pop())

    # -- libraries ------------------------------------------------------------------
    def cuLibraryLoadData(self, cubin: bytes, *rest: Any) -> tuple[Result, str]:
        self._record("cuLibraryLoadData")
        handle = f"library{len(self.loaded)}"
        self.loaded.append(handle)
        return (OK, handle)

    def cuLibraryUnload(self, handle: str) -> Result:
        return OK

    def cuLibraryGetKernel(self, library: str, name: bytes) -> tuple[Result, str]:
        return (OK, f"{library}:{name.decode()}")

    def cuKernelGetFunction(self, kernel: str) -> tuple[Result, str | None]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None)
        return (OK, f"{kernel}@{ctx:#x}")

    def cuLibraryGetGlobal(self, library: str, name: bytes) -> tuple[Result, int | None, int]:
        ctx = self.current()
        if ctx is None:
            return (Result(201, "CUDA_ERROR_INVALID_CONTEXT"), None, 0)
        self._record(f"cuLibraryGetGlobal({name.decode()})")
        device = ctx - self.CTX_BASE
        dptr = 0x7000_0000 + len(self._globals) * 8
        # the handler's code address: a different range per device, as with UVA
        self._globals[dptr] = (0x7F00_0000_0000 + device * 0x10_0000_0000) | (
            sum(name) * 0x100 + len(self._globals) * 0x10
        )
        return (OK, dptr, 8)

    def cuMemcpyDtoH(self, dst: int, src: int, size: int) -> Result:
        import ctypes

        ctypes.c_uint64.from_address(dst).value = self._globals[src]
        return OK

    def cuGetErrorString(self, result: Any) -> tuple[Result, bytes]:
        return (OK, b"described")
