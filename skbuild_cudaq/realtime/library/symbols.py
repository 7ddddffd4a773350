"""A cubin's ELF symbols: kernels, globals, exported handlers (pyelftools; no CUDA)."""

from __future__ import annotations

import io

from skbuild_cudaq.realtime.errors import RealtimeError

__all__ = ["HANDLER_PREFIX", "SHAPE_THREAD_PREFIX", "ModuleSymbols", "cubin_symbols"]

HANDLER_PREFIX = "cudaq_handler_"
#: marker global of a thread-shaped handler (CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION)
SHAPE_THREAD_PREFIX = "cudaq_shape_thread_"


class ModuleSymbols:
    """Names defined and left undefined in a cubin's ELF symbol table."""

    def __init__(self, kernels: list[str], globals_: list[str], undefined: list[str]) -> None:
        self.kernels = tuple(sorted(kernels))  #: global functions (kernels)
        self.globals = tuple(sorted(globals_))  #: global data objects
        self.undefined = tuple(sorted(undefined))

    @property
    def handlers(self) -> tuple[str, ...]:
        """Exported handler names (``cudaq_handler_<name>`` globals, prefix removed)."""
        return tuple(n[len(HANDLER_PREFIX) :] for n in self.globals if n.startswith(HANDLER_PREFIX))

    @property
    def thread_handlers(self) -> frozenset[str]:
        """Handlers exported thread-shaped (a ``cudaq_shape_thread_<name>`` marker global)."""
        n = len(SHAPE_THREAD_PREFIX)
        return frozenset(g[n:] for g in self.globals if g.startswith(SHAPE_THREAD_PREFIX))


def cubin_symbols(cubin: bytes) -> ModuleSymbols:
    """Read a cubin's symbol table (pyelftools; no CUDA)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    kernels: list[str] = []
    globals_: list[str] = []
    undefined: list[str] = []
    try:
        elf = ELFFile(io.BytesIO(cubin))
        for section in elf.iter_sections():
            if not isinstance(section, SymbolTableSection):
                continue
            for sym in section.iter_symbols():
                kind, bind = sym["st_info"]["type"], sym["st_info"]["bind"]
                if not sym.name or bind not in ("STB_GLOBAL", "STB_WEAK"):
                    continue
                if sym["st_shndx"] == "SHN_UNDEF":
                    undefined.append(sym.name)
                elif kind == "STT_FUNC":
                    kernels.append(sym.name)
                elif kind == "STT_OBJECT":
                    globals_.append(sym.name)
    except ELFError as exc:
        msg = f"the linked cubin is not a readable ELF file: {exc}"
        raise RealtimeError(msg) from None
    return ModuleSymbols(kernels, globals_, undefined)
