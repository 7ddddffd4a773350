"""A cubin's ELF symbols: kernels, globals, exported handlers (no CUDA, no pyelftools)."""

from __future__ import annotations

import io
from pathlib import Path

from skbuild_cudaq._records import HANDLER_PREFIX, SHAPE_THREAD_PREFIX
from skbuild_cudaq.realtime.errors import RealtimeError

__all__ = ["HANDLER_PREFIX", "SHAPE_THREAD_PREFIX", "ModuleSymbols", "cubin_symbols"]

_SHT_NOBITS = 8


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
    """Read a cubin's symbol table (our small ELF reader; no CUDA, no pyelftools)."""
    from skbuild_cudaq._elf import elf_sections, elf_symbols
    from skbuild_cudaq.errors import DeviceCodeError

    kernels: list[str] = []
    globals_: list[str] = []
    undefined: list[str] = []
    try:
        symbols = elf_symbols(io.BytesIO(cubin), Path("<linked cubin>"))
        sections = elf_sections(io.BytesIO(cubin), Path("<linked cubin>"))
    except DeviceCodeError as exc:
        msg = f"the linked cubin is not a readable ELF file: {exc}"
        raise RealtimeError(msg) from None
    # An export global is initialized (the handler's address): in a section with contents.
    # A zero-filled one (SHT_NOBITS) is what the linker made of a handler switch's weak
    # reference to a name no source defines (an export under an #if that is off): no handler.
    zero_filled = {s.index for s in sections if s.type == _SHT_NOBITS}
    for sym in symbols:
        if sym.bind not in (1, 2):  # STB_GLOBAL, STB_WEAK
            continue
        if sym.section == 0:  # SHN_UNDEF
            undefined.append(sym.name)
        elif sym.kind == 2:  # STT_FUNC
            kernels.append(sym.name)
        elif sym.kind == 1:  # STT_OBJECT
            if sym.name.startswith(HANDLER_PREFIX) and sym.section in zero_filled:
                continue
            globals_.append(sym.name)
    return ModuleSymbols(kernels, globals_, undefined)
