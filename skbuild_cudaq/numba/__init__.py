"""GPU handlers written in Python, compiled to LTO-IR by numba-cuda (contract module).

A handler is a Python function ``def name(args, result)``: ``args`` holds the request's
arguments and ``result`` is the response's result area (its length is the room there), both
1-D arrays (``uint8`` unless the decorator says otherwise). It returns the number of result
*elements* written (status 0), or :func:`status` to answer a handler-specific status::

    from skbuild_cudaq.numba import handler, rank, size, status, thread_handler

    @thread_handler                       # one thread serves one request
    def py_echo(args, result):
        n = min(args.size, result.size)
        for i in range(n):
            result[i] = args[i]
        return n

    @handler                              # launch-wide: every thread of the launch calls it
    def py_rpc_increment(args, result):
        n = min(args.size, result.size)
        for i in range(rank(), n, size()):
            result[i] = args[i] + 1
        return n                          # the same value from every thread

Listed in ``[tool.cudaq.dispatch-kernels]`` like a ``.cu`` file, the file is compiled at build
time for every declared architecture (``python -m skbuild_cudaq.numba``) and each handler is
exported under the function's name, as ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION`` (``handler``)
or ``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION`` (``thread_handler``) export a C++ one. At run time
:func:`device_binary` compiles decorated functions defined in a notebook into a binary file the
run time's lookups take like a built module (the notebook path; see the guide "GPU handlers
in Python").

Importing this module loads neither numba nor CUDA: the decorators only mark the function;
compiling needs numba-cuda and NVVM (``pip install "skbuild-cudaq[numba]"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import os
    from pathlib import Path
    from types import ModuleType

    from skbuild_cudaq.realtime.link.device_code import DeviceCode

__all__ = [
    "DEVICE_STATUS_MAX",
    "PyHandler",
    "PyKernel",
    "address",
    "device_binary",
    "device_code",
    "dispatch_kernel",
    "handler",
    "rank",
    "size",
    "status",
    "thread_handler",
    "words",
]

#: Shapes, as the device header numbers them (CUDAQ_HANDLER_SHAPE_LAUNCH / _THREAD).
SHAPE_LAUNCH = 0
SHAPE_THREAD = 1
#: The largest status a handler may answer (the run time reserves 0x7FFFFF00 and up).
DEVICE_STATUS_MAX = 0x7FFFFEFF
#: Element types a handler may view its arguments and result as (numpy dtype names).
DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32",
          "float64")  # fmt: skip


@dataclass(frozen=True)
class PyHandler:
    """A Python function marked as a GPU handler (what :func:`handler` returns).

    Calling it calls the Python function (on the CPU, for tests); the build and
    :func:`device_code` compile it for the GPU.
    """

    function: Callable[..., Any]
    shape: int = SHAPE_LAUNCH  #: SHAPE_LAUNCH (launch-wide) or SHAPE_THREAD
    args: str = "uint8"  #: element type of ``args``
    result: str = "uint8"  #: element type of ``result``
    name: str = field(default="")  #: the exported name (the function's)

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.function.__name__)
        if not self.name.isidentifier():
            msg = f"a handler's name must be an identifier (the C symbol), not {self.name!r}"
            raise ValueError(msg)
        for what in ("args", "result"):
            value = getattr(self, what)
            if value not in DTYPES:
                msg = f"{self.name}: {what}={value!r} is not an element type; use one of {DTYPES}"
                raise ValueError(msg)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


@dataclass(frozen=True)
class PyKernel:
    """A Python function marked as a dispatch kernel (what :func:`dispatch_kernel` returns):
    ``extern "C"`` entry ``name`` with the six parameters of every dispatch kernel."""

    function: Callable[..., Any]
    name: str = field(default="")  #: the kernel's name (the function's)

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.function.__name__)
        if not self.name.isidentifier():
            msg = f"a dispatch kernel's name must be an identifier, not {self.name!r}"
            raise ValueError(msg)


def dispatch_kernel(function: Callable[..., Any]) -> PyKernel:
    """Mark a dispatch kernel written in Python: ``def name(transport_ctx, slot_size, table,
    table_count, shutdown_flag, stats)``, driving the transport with
    :mod:`skbuild_cudaq.numba.dispatch`; ``get_device_kernel(module, "name")`` finds it."""
    return PyKernel(function)


def _decorate(shape: int, function: Callable[..., Any] | None, args: str, result: str) -> Any:
    if function is not None:
        return PyHandler(function, shape, args, result)
    return lambda f: PyHandler(f, shape, args, result)


@overload
def handler(function: Callable[..., Any], /) -> PyHandler: ...
@overload
def handler(*, args: str = ..., result: str = ...) -> Callable[[Callable[..., Any]], PyHandler]: ...
def handler(
    function: Callable[..., Any] | None = None, /, *, args: str = "uint8", result: str = "uint8"
) -> Any:
    """Mark a launch-wide handler: every thread of the dispatch kernel's launch calls it for
    the same request; it strides its work with :func:`rank` / :func:`size` and returns the
    same value from every thread. ``args`` / ``result``: the element types of the two arrays
    (``@handler(args="float32", result="float32")``; a trailing part of a byte that does not
    fill an element is not seen)."""
    return _decorate(SHAPE_LAUNCH, function, args, result)


@overload
def thread_handler(function: Callable[..., Any], /) -> PyHandler: ...
@overload
def thread_handler(
    *, args: str = ..., result: str = ...
) -> Callable[[Callable[..., Any]], PyHandler]: ...
def thread_handler(
    function: Callable[..., Any] | None = None, /, *, args: str = "uint8", result: str = "uint8"
) -> Any:
    """Mark a thread-shaped handler (CUDAQ_HANDLER_SHAPE_THREAD): one thread serves one
    request on its own, with no barrier and no warp collective."""
    return _decorate(SHAPE_THREAD, function, args, result)


def rank() -> int:
    """The calling thread's rank in the group serving the request (launch-wide handlers:
    the linear thread index over the grid, ``cudaq_handler_rank()``). On the CPU: 0."""
    return 0


def size() -> int:
    """The number of threads serving the request (``cudaq_handler_size()``). On the CPU: 1."""
    return 1


def address(array: Any) -> int:
    """The address of ``array``'s first element (on the GPU: its device address), e.g. to
    check that a buffer is 8-byte aligned before reading it a word at a time
    (:func:`words`); on the CPU: NumPy's."""
    return int(array.ctypes.data)


def words(array: Any) -> Any:
    """``array``'s whole 8-byte words: a 1-D ``uint64`` array over the same memory, of
    ``array.nbytes // 8`` elements (the bytes after the last whole word are not in it).

    For a buffer :func:`address` says is 8-byte aligned (on the GPU an unaligned word is a
    misaligned-address fault): each word is then one load or one store, where ``result`` may
    be host memory mapped over PCIe and each store a transaction. On the GPU it is the
    buffer's address and length alone, no arithmetic: ``args[:k].view(numpy.uint64)`` does
    the same with some twenty instructions and a branch of bounds and shape checks. On the
    CPU: NumPy's view of the same bytes.
    """
    import numpy as np

    raw = np.asarray(array).view(np.uint8)
    return raw[: raw.size // 8 * 8].view(np.uint64)


def status(code: int, count: int = 0) -> int:
    """What a handler returns to answer status ``code`` (1 .. :data:`DEVICE_STATUS_MAX`)
    with ``count`` result elements: ``return status(3)`` answers status 3 and no result.
    The value is ``code << 32 | count``; a plain count (below 2**32) is status 0."""
    return (code << 32) | count


def device_code(
    *handlers: PyHandler | PyKernel, architectures: tuple[int, ...] = (80,)
) -> DeviceCode:
    """Compile ``handlers`` (defined anywhere: a notebook, a test) into device code the run
    time links with its built-in kernel (:func:`skbuild_cudaq.realtime.link_device_code`,
    :func:`skbuild_cudaq.realtime.get_device_handler`). Needs numba-cuda and NVVM, no GPU."""
    from skbuild_cudaq.numba._compile import handlers_device_code

    return handlers_device_code(handlers, architectures)


def device_binary(
    *handlers: PyHandler | PyKernel,
    extension: ModuleType | str | os.PathLike[str] | None = None,
    architectures: tuple[int, ...] = (80,),
) -> Path:
    """The notebook path: ``handlers`` (defined at run time) compiled and written, with
    ``extension``'s device code when given (its kernels and handlers), into a binary file the
    run time's lookups take like a built module::

        path = device_binary(py_twice)                      # alone with the built-in kernel
        address = get_device_handler(path, "py_twice")

    LTO-IR for an architecture links for that GPU and every newer one: the default, 80, serves
    every GPU the run time does. The link is cached like every link (keyed by each function's
    code). Needs numba-cuda and NVVM (``skbuild-cudaq[numba]``), no GPU.
    """
    from skbuild_cudaq.numba._notebook import device_binary as write

    return write(handlers, extension, architectures)
