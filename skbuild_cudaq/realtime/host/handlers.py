"""Native host handlers: C functions of an extension module served by the host path.

A native host handler has the device handlers' signature and is exported with
``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(name)`` from ``<cudaq/realtime/host_handler.h>``
(the package's include directory: ``skbuild-cudaq --include-dir``, CMake
``SKBUILD_CUDAQ_INCLUDE_DIR``)::

    int name(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
             uint32_t *result_len);

The macro defines an exported record ``cudaq_host_handler_<name>`` in the binary's
dynamic symbol table (it survives ``-fvisibility=hidden``, ``--gc-sections`` and
stripping). :func:`get_host_handler` lists those records from the binary's file
(the project's own ELF reader) and resolves the one asked for with ``dlsym`` in the
binary already loaded. The :class:`NativeHostHandler` it returns goes wherever a
Python host handler goes (``HostDispatcher(handlers=)``, ``FunctionTable.add_host``):
the host path's serving thread calls it without the GIL. No CUDA anywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime.errors import InvalidArgumentError, RealtimeError

__all__ = ["EXPORT_PREFIX", "NativeHostHandler", "exported_host_handlers", "get_host_handler"]

#: The prefix of the records ``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION`` defines.
EXPORT_PREFIX = "cudaq_host_handler_"
#: The result buffer of a direct call (:meth:`NativeHostHandler.__call__`) by default.
DEFAULT_MAX_RESULT = 1 << 16


@dataclass(frozen=True)
class NativeHostHandler:
    """A native host handler found by :func:`get_host_handler` (contract).

    Accepted wherever a Python host handler is: ``HostDispatcher(handlers={...})``,
    ``HostDispatcher.add_handler``, ``FunctionTable.add_host``; the host path calls it
    on its serving thread without the GIL. Calling it from Python runs it once (without
    the GIL) and returns ``(status, result)``, the form a Python handler may return.
    """

    name: str  #: the name it was exported under
    address: int  #: the C function's address in this process
    path: Path  #: the binary that exports it
    #: what keeps the binary loaded (the module object), not compared
    module: Any = field(default=None, repr=False, compare=False)

    def __call__(
        self, args: bytes | bytearray | memoryview = b"", max_result_len: int = DEFAULT_MAX_RESULT
    ) -> tuple[int, bytes]:
        """One call: ``(status, result)``; a result longer than ``max_result_len`` is
        answered ``(STATUS_RESULT_TOO_LONG, b"")``, as the host path does."""
        from skbuild_cudaq.realtime.host import _native

        if not 0 <= max_result_len <= 0xFFFFFFFF:
            msg = f"max_result_len={max_result_len} is not a 32-bit length"
            raise InvalidArgumentError(msg)
        try:
            data = bytes(memoryview(args))  # not bytes(args): an int would be that many zeros
        except TypeError:
            msg = f"a native host handler takes bytes-like arguments, not {type(args).__name__}"
            raise TypeError(msg) from None
        status, result = _native.call_handler(self.address, data, max_result_len)
        return int(status), bytes(result)


def _binary_of(module: ModuleType | str | os.PathLike[str]) -> tuple[Path, bool]:
    """The file of ``module`` and whether it is loaded already (a module object is)."""
    if isinstance(module, ModuleType):
        file = getattr(module, "__file__", None)
        if not file:
            msg = (
                f"module {module.__name__!r} has no file: native host handlers are exported "
                "by compiled extension modules (CUDAQ_REALTIME_EXPORT_HOST_FUNCTION)"
            )
            raise InvalidArgumentError(msg)
        path, loaded = Path(file), True
    elif isinstance(module, (str, os.PathLike)):
        path, loaded = Path(module), False
    else:
        msg = (
            "get_host_handler(module, name): module must be an extension module object or the "
            f"path of a shared library, got {type(module).__name__}"
        )
        raise InvalidArgumentError(msg)
    try:
        path = path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        msg = f"cannot read {str(path)!r}: {exc}"
        raise InvalidArgumentError(msg) from None
    if not path.is_file():
        msg = f"{path}: no such file (native host handlers live in a compiled extension module)"
        raise InvalidArgumentError(msg)
    return path, loaded


def exported_host_handlers(module: ModuleType | str | os.PathLike[str]) -> list[str]:
    """The names of every native host handler ``module``'s binary exports (sorted)."""
    return sorted(_exports(_binary_of(module)[0])[0])


def _exports(path: Path) -> tuple[set[str], set[str]]:
    """(handlers in the dynamic symbol table, records only in the static one: hidden)."""
    from skbuild_cudaq._elf import elf_symbols
    from skbuild_cudaq.errors import DeviceCodeError

    try:
        with path.open("rb") as f:
            dynamic = elf_symbols(f, path, dynamic=True)
            static = elf_symbols(f, path)
            f.seek(16)
            e_type = f.read(2)
        if e_type not in (b"\x03\x00", b"\x00\x03"):  # ET_DYN, in either byte order
            msg = f"{path}: not a shared library (ELF type {e_type.hex()})"
            raise DeviceCodeError(msg)
    except DeviceCodeError as exc:
        msg = (
            f"{exc}: native host handlers are exported by a compiled extension module "
            "(a shared library)"
        )
        raise InvalidArgumentError(msg) from None
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise InvalidArgumentError(msg) from None

    def names(symbols: list[Any]) -> set[str]:
        n = len(EXPORT_PREFIX)
        return {s.name[n:] for s in symbols if s.name.startswith(EXPORT_PREFIX) and s.section}

    exported = names(dynamic)
    return exported, names(static) - exported


@typed_arguments(module="an extension module object or the path of a shared library")
def get_host_handler(module: ModuleType | str | os.PathLike[str], name: str) -> NativeHostHandler:
    """The native host handler ``name`` exported by ``module`` (contract).

    ``module`` is an imported extension module (its binary, already loaded) or the
    path of a shared library (loaded here, and kept loaded). Raises
    :class:`InvalidArgumentError` (a ``ValueError``) when ``module`` is no binary or
    does not export ``name`` (``.available`` lists what it exports), and
    :class:`RealtimeError` for a record it cannot read.
    """
    from skbuild_cudaq.realtime.host import _native

    checked: object = name
    if not isinstance(checked, str) or not name:
        msg = f"get_host_handler(module, name): name must be a non-empty str, got {name!r}"
        raise InvalidArgumentError(msg)
    if name.startswith(EXPORT_PREFIX):
        name = name[len(EXPORT_PREFIX) :]
    path, loaded = _binary_of(module)
    exported, hidden = _exports(path)
    if name not in exported:
        hint = ""
        if name in hidden:
            hint = (
                f" ({EXPORT_PREFIX}{name} is in the binary but not among its dynamic "
                "symbols: a linker version script or --exclude-libs hid it; export "
                f"{EXPORT_PREFIX}* there too)"
            )
        elif isinstance(module, ModuleType) and callable(getattr(module, name, None)):
            hint = f" ({name!r} is a Python function of the module: pass it as a Python handler)"
        available = sorted(exported)
        msg = (
            f"no native host handler {name!r} exported by {path}{hint} (export it with "
            f"CUDAQ_REALTIME_EXPORT_HOST_FUNCTION({name}) from <cudaq/realtime/host_handler.h>); "
            f"exported host handlers: {', '.join(available) or '(none)'}"
        )
        raise InvalidArgumentError(msg, available)
    symbol = EXPORT_PREFIX + name
    try:
        found = _native.host_export(os.fsdecode(path), symbol, not loaded)
    except OSError as exc:
        msg = f"cannot load {path} to call its host handlers: {exc}"
        raise InvalidArgumentError(msg) from None
    except ValueError as exc:
        raise RealtimeError(str(exc)) from None
    if found is None:  # in the file, not in the loaded binary: another file by that path
        msg = f"{symbol} is in {path} but not in the binary loaded from it (was it rebuilt?)"
        raise RealtimeError(msg)
    address, _exported_name, _version = found
    return NativeHostHandler(name, int(address), path, module if loaded else None)
