"""Python handlers to LTO-IR with numba-cuda: the C ABI, the export globals, no GPU.

Each handler becomes, per architecture, one NVVM program (``numba.cuda.compile(...,
abi="c", output="ltoir")``) holding:

* ``int <name>(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
  uint32_t *result_len)``: a wrapper written in Python that views the two buffers as 1-D
  arrays (``carray``), calls the handler (numba inlines it) and turns its return value
  into the status and ``*result_len`` (:func:`skbuild_cudaq.numba.status`);
* the export global ``cudaq_handler_<name>`` holding its address, what
  ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION`` defines for a C++ handler (and for a
  thread-shaped one the marker ``cudaq_shape_thread_<name>``), emitted by an intrinsic in
  the wrapper and kept through nvJitLink's LTO by ``@llvm.used`` (without it nvJitLink
  drops the global and the function: nothing in the module refers to them).

numba-cuda asks the current GPU for its compute capability when it types a call to a device
function or an overload (``dispatcher.get_current_device``), even under ``cuda.compile(...,
cc=...)``, and NVRTC for the architectures it supports before it hands NVVM the one asked
for (``nvrtc.get_arch_option``): :func:`_target` answers both with the architecture being
compiled (NVVM checks it), so this works on a machine without a GPU, a driver or NVRTC (the
build of a project whose device code is all Python). The LTO-IR of each handler goes in a fatbin
container of its own (one entry per architecture; :mod:`skbuild_cudaq.build._container`),
linked like nvcc's.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq._cuda_majors import cuda_major
from skbuild_cudaq.errors import CompileError, ToolchainError
from skbuild_cudaq.numba import (
    SHAPE_THREAD,
    PyHandler,
    PyKernel,
    address,
    rank,
    size,
    status,
    words,
)

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.link.device_code import DeviceCode

__all__ = [
    "cache_key",
    "check_versions",
    "compile_handler",
    "handler_containers",
    "handlers_device_code",
    "numba_compiler",
]

_HANDLER_PREFIX = "cudaq_handler_"
_SHAPE_PREFIX = "cudaq_shape_thread_"
_lock = threading.Lock()
_registered: list[bool] = []


def _numba() -> Any:
    """``numba.cuda``, or a :class:`ToolchainError` saying what to install."""
    try:
        from numba import cuda
    except ImportError as exc:
        msg = (
            f"Python device code needs numba-cuda and NVVM ({exc}): pip install "
            "'skbuild-cudaq[numba]' (numba-cuda, and NVVM pinned with the run time's nvJitLink)"
        )
        raise ToolchainError(msg) from None
    return cuda


def numba_compiler() -> str:
    """``"numba-cuda X.Y.Z (NVVM CUDA 13.0)"``: what compiles, for records and messages."""
    from importlib import metadata

    try:
        numba_cuda = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        numba_cuda = "?"
    return f"numba-cuda {numba_cuda}"


class _Device:
    """What numba-cuda asks the current device for while typing calls: its capability."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc


@contextlib.contextmanager
def _target(cc: tuple[int, int]) -> Iterator[None]:
    """numba-cuda's current-device query answers ``cc`` (no GPU needed), for one compile."""
    from numba.cuda import cuda_paths, dispatcher
    from numba.cuda.cudadrv import nvrtc

    def arch_option(major: int, minor: int, arch: str = "") -> str:
        return f"compute_{major}{minor}{arch}"

    find_nvrtc = cuda_paths._get_nvrtc_path

    def nvrtc_path() -> Any:  # found when NVRTC is there; no NVRTC is no error (NVVM is used)
        try:
            return find_nvrtc()
        except Exception:  # cuda-pathfinder's not-found errors vary
            return cuda_paths._env_path_tuple("<no NVRTC>", None)

    with _lock:
        saved = dispatcher.get_current_device, nvrtc.get_arch_option, find_nvrtc
        dispatcher.get_current_device = lambda: _Device(cc)
        nvrtc.get_arch_option = arch_option
        cuda_paths._get_nvrtc_path = nvrtc_path
        try:
            yield
        finally:
            dispatcher.get_current_device, nvrtc.get_arch_option = saved[:2]
            cuda_paths._get_nvrtc_path = saved[2]


def _register() -> None:
    """Teach numba-cuda :func:`skbuild_cudaq.numba.rank`, ``size``, ``status``, ``address``
    and ``words`` (once)."""
    if _registered:
        return
    cuda = _numba()
    from numba.cuda import extending, types

    overload: Any = extending.overload

    def _rank() -> Any:
        def impl() -> Any:
            block = cuda.blockIdx.x + cuda.gridDim.x * (
                cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z
            )
            per_block = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
            thread = cuda.threadIdx.x + cuda.blockDim.x * (
                cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z
            )
            return block * per_block + thread

        return impl

    def _size() -> Any:
        def impl() -> Any:
            per_block = cuda.blockDim.x * cuda.blockDim.y * cuda.blockDim.z
            return per_block * cuda.gridDim.x * cuda.gridDim.y * cuda.gridDim.z

        return impl

    def _status(code: Any, count: Any = 0) -> Any:
        import numpy as np

        def impl(code: Any, count: Any = 0) -> Any:
            return (np.int64(code) << 32) | (np.int64(count) & 0xFFFFFFFF)

        return impl

    from skbuild_cudaq.numba._kernels import pointer_intrinsics

    as_int, data_ptr = (pointer_intrinsics()[k] for k in ("as_int", "data_ptr"))

    def _address(array: Any) -> Any:
        def impl(array: Any) -> Any:
            return as_int(data_ptr(array))

        return impl

    def _words(array: Any) -> Any:
        import numpy as np
        from numba.cuda.np.numpy_support import carray

        if not isinstance(array, types.Array) or array.ndim != 1:
            return None
        itemsize = array.dtype.bitwidth // 8

        def impl(array: Any) -> Any:
            # the same address as a uint64 array of the whole words: a shift, no bounds or
            # shape checks (a slice and a view clamp the bounds and test the byte count)
            return carray(data_ptr(array), (array.size * itemsize) >> 3, np.uint64)

        return impl

    typers = (
        (rank, _rank),
        (size, _size),
        (status, _status),
        (address, _address),
        (words, _words),
    )
    for function, typer in typers:
        overload(function, target="cuda", inline="always")(typer)
    _registered.append(True)


def _export_intrinsic(name: str, shape: int) -> Any:
    """An intrinsic that, called in the wrapper, defines its export globals (no code)."""
    from llvmlite import ir
    from numba.cuda import extending, types

    intrinsic: Any = extending.intrinsic

    def export(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            module, function = builder.module, builder.function
            address = ir.GlobalVariable(module, function.type, _HANDLER_PREFIX + name, 1)
            address.initializer = function
            address.global_constant = True
            kept = [address]
            if shape == SHAPE_THREAD:
                marker = ir.GlobalVariable(module, ir.IntType(32), _SHAPE_PREFIX + name, 1)
                marker.initializer = ir.Constant(ir.IntType(32), SHAPE_THREAD)
                kept.append(marker)
            byte_ptr = ir.IntType(8).as_pointer()
            used = ir.GlobalVariable(module, ir.ArrayType(byte_ptr, len(kept)), "llvm.used")
            used.linkage = "appending"
            used.section = "llvm.metadata"
            used.initializer = ir.Constant(
                used.value_type,
                [
                    ir.FormattedConstant(
                        byte_ptr, f"addrspacecast ({g.type} {g.get_reference()} to {byte_ptr})"
                    )
                    for g in kept
                ],
            )
            return context.get_dummy_value()

        return types.void(), codegen

    return intrinsic(export)


def _wrapper(h: PyHandler, body: Any) -> Any:
    """The C-ABI function around ``body`` (the handler as a numba device function)."""
    import numpy as np
    from numba.cuda.np.numpy_support import carray

    export = _export_intrinsic(h.name, h.shape)
    args_t, result_t = np.dtype(h.args), np.dtype(h.result)
    args_size, result_size = args_t.itemsize, result_t.itemsize
    low = np.int64(0xFFFFFFFF)

    def wrapper(a: Any, alen: Any, r: Any, rmax: Any, rlen: Any) -> Any:
        export()
        args = carray(a, alen // args_size, args_t)
        room = np.uint32(rmax // result_size)
        result = carray(r, room, result_t)
        out = np.int64(body(args, result))
        # at most the room's whole elements, bounded in 32 bits (one min; a count times the
        # element size compared in 64 bits was a compare pair and a select each call)
        count = np.uint32(out & low)
        rlen[0] = np.uint32((count if count < room else room) * result_size)
        return np.int32(out >> 32)

    return wrapper


def _signature() -> Any:
    from numba.cuda import types

    u32 = types.uint32
    return types.int32(types.voidptr, u32, types.voidptr, u32, types.CPointer(u32))


def _reason(exc: Exception) -> str:
    """numba's reason in one line: the message's first line that says something, with the
    source line it names."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Failed in ", "During:", "- "))]
    where = next((line for line in lines if line.startswith("File ")), "")
    text = said[0] if said else (lines[0] if lines else type(exc).__name__)
    if where and where not in text:
        text += f" ({where.rstrip(':')})"
    return text


def _code_digest(value: Any, seen: set[int], depth: int = 0) -> bytes:
    """What a function's compiled code depends on: its bytecode and constants, its closure
    cells and the globals it names (numbers, strings, arrays; functions and handlers it
    calls, recursively). Another value of any of them is another key."""
    import marshal

    if id(value) in seen or depth > 8:
        return b""
    seen.add(id(value))
    function = getattr(value, "py_func", None) or getattr(value, "function", None) or value
    code = getattr(function, "__code__", None)
    if code is None:
        data = getattr(value, "tobytes", None)
        if callable(data):  # a numpy array
            return repr(
                (str(getattr(value, "dtype", "")), getattr(value, "shape", ()))
            ).encode() + bytes(data())
        return (
            repr(value).encode()
            if isinstance(value, (int, float, complex, str, bytes, bool, tuple))
            else type(value).__name__.encode()
        )
    parts = [marshal.dumps(code)]
    for cell in function.__closure__ or ():
        parts.append(_code_digest(cell.cell_contents, seen, depth + 1))
    names = function.__globals__
    for name in code.co_names:
        if name in names:
            parts.append(name.encode() + b"=" + _code_digest(names[name], seen, depth + 1))
    return b"\0".join(parts)


#: What compile_handler asks of numba-cuda beyond the code (its options): a change makes
#: earlier cached LTO-IR stale.
_RECIPE = "forceinline"
#: This package's sources that go into every handler's and kernel's code (the C ABI wrapper,
#: the dispatch API and its intrinsics): a change in them makes earlier cached LTO-IR stale.
_OWN_SOURCES = ("__init__.py", "_compile.py", "_kernels.py", "dispatch.py")


def _own_code() -> str:
    """The digest of :data:`_OWN_SOURCES` (read once a process)."""
    if "digest" not in _OWN_DIGEST:
        import hashlib

        digest = hashlib.sha256()
        for name in _OWN_SOURCES:
            digest.update((Path(__file__).parent / name).read_bytes())
        _OWN_DIGEST["digest"] = digest.hexdigest()
    return _OWN_DIGEST["digest"]


_OWN_DIGEST: dict[str, str] = {}


def cache_key(h: PyHandler | PyKernel, arch: int) -> str:
    """The key of ``h``'s LTO-IR for ``sm_<arch>``: its code (:func:`_code_digest`), name,
    shape, element types, the architecture, the compiler's version and this package's own
    device-side code (:func:`_own_code`: the intrinsics are not Python functions the code
    digest can follow)."""
    import hashlib

    digest = hashlib.sha256(_code_digest(h.function, set()))
    shape = (h.shape, h.args, h.result) if isinstance(h, PyHandler) else "kernel"
    digest.update(repr((h.name, shape, arch, numba_compiler(), _RECIPE, _own_code())).encode())
    return digest.hexdigest()


def _other_reason(exc: Exception) -> str:
    """Not a typing error (NVVM, a library numba-cuda could not load): its type and first
    line; the whole traceback with ``-C cudaq.verbose=true``."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"


def compile_handler(
    h: PyHandler | PyKernel, arch: int, source: str = "", cache: Path | None = None
) -> bytes:
    """The LTO-IR of handler ``h`` for ``sm_<arch>``; :class:`CompileError` naming the
    function, ``source`` (its file) and numba's reason when numba rejects it. ``cache``: a
    directory of earlier results, by :func:`cache_key` (numba-cuda names its functions
    anew on every compile: the same code compiled twice is not the same bytes)."""
    if cache is not None:
        stored = cache / f"{cache_key(h, arch)}.ltoir"
        if stored.is_file():
            return stored.read_bytes()
        ltoir = compile_handler(h, arch, source)
        tmp = stored.with_name(f".{stored.name}.{os.getpid()}.tmp")
        tmp.write_bytes(ltoir)
        tmp.replace(stored)
        return ltoir
    cuda = _numba()
    _register()
    cc = (arch // 10, arch % 10)
    where = source or getattr(h.function, "__module__", "?")
    what = "handler" if isinstance(h, PyHandler) else "dispatch kernel"
    try:
        if isinstance(h, PyKernel):
            from skbuild_cudaq.numba._kernels import compile_kernel

            return compile_kernel(h, arch, _target(cc))
        with _target(cc):
            # forceinline: LTO inlines the handler into each dispatch kernel that calls it
            # directly (the handler switch), as it does a C++ handler, so the kernel's
            # register budget holds for it too (__launch_bounds__(1024) leaves 64 registers a
            # thread, and ptxas refuses a call from there to a function compiled with more)
            body = cuda.jit(device=True, forceinline=True)(h.function)
            ltoir, _ = cuda.compile(
                _wrapper(h, body),
                _signature(),
                device=True,
                abi="c",
                abi_info={"abi_name": h.name},
                output="ltoir",
                cc=cc,
                forceinline=True,
            )
    except Exception as exc:  # numba's and NVVM's errors have no common base: one line each
        import traceback

        from numba.core.errors import NumbaError

        reason = _reason(exc) if isinstance(exc, NumbaError) else _other_reason(exc)
        msg = f"numba-cuda could not compile {what} {h.name} of {where}: {reason}"
        raise CompileError(msg, traceback.format_exc(), numba_compiler()) from None
    return bytes(ltoir)


def handler_containers(
    handlers: Iterable[PyHandler | PyKernel],
    architectures: Sequence[int],
    source: str = "",
    cache: Path | None = None,
) -> list[bytes]:
    """One fatbin container per handler, one LTO-IR entry per architecture."""
    from skbuild_cudaq.build._container import make_ltoir_container

    return [
        make_ltoir_container(
            [(arch, compile_handler(h, arch, source, cache)) for arch in architectures]
        )
        for h in handlers
    ]


def handlers_device_code(
    handlers: Sequence[PyHandler | PyKernel], architectures: Sequence[int]
) -> DeviceCode:
    """:func:`skbuild_cudaq.numba.device_code`."""
    from pathlib import Path

    from skbuild_cudaq.fatbin import split_containers
    from skbuild_cudaq.realtime.link.device_code import DeviceCode, LinkInput

    inputs = []
    for h, data in zip(handlers, handler_containers(handlers, architectures), strict=True):
        for number, container in enumerate(split_containers(data, h.name)):
            inputs.append(LinkInput(f"<python handler {h.name}>:{number}", container))
    return DeviceCode(Path("<python handlers>"), tuple(inputs))


def check_versions(container: bytes) -> None:
    """Fail (:class:`ToolchainError`, naming both versions and the fix) when the NVVM that
    wrote ``container``'s LTO-IR is newer than the nvJitLink the run time may link it with
    (:data:`NVVM_PINS`: the oldest its extra accepts); ``SKBUILD_CUDAQ_NVJITLINK=13.5``
    says the run time's nvJitLink is that one instead."""
    import os

    from skbuild_cudaq.build._requires import NVVM_PINS
    from skbuild_cudaq.fatbin import split_containers
    from skbuild_cudaq.realtime.link._nvjitlink import ir_release

    for entry in split_containers(container, "Python handlers")[0].entries:
        release = ir_release(entry.code_version)
        if release is None:
            continue
        given = os.environ.get("SKBUILD_CUDAQ_NVJITLINK", "")
        parts = given.split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            linker = (int(parts[0]), int(parts[1]))
        else:
            linker = NVVM_PINS.get(release[0], release)
        if release[0] == linker[0] and release[1] <= linker[1]:
            continue
        have, need = f"{release[0]}.{max(release[1], 0)}", f"{linker[0]}.{linker[1]}"
        major = linker[0]
        facts = cuda_major(major)
        pin = facts.nvvm_wheel if facts is not None else f"the NVVM of CUDA {major}"
        msg = (
            f"NVVM of CUDA {have} wrote this LTO-IR (code version "
            f"{entry.code_version[0]}.{entry.code_version[1]}), newer than nvJitLink {need}, "
            f"the oldest the run time (CUDA {major}) links with: it would not link there. Pin "
            f"NVVM to it: '{pin}=={need}.*' in build-system.requires (the skbuild_cudaq.build "
            f"backend adds it itself), or set SKBUILD_CUDAQ_NVJITLINK={have} where every "
            "machine that runs the package has an nvJitLink that new"
        )
        raise ToolchainError(msg)
