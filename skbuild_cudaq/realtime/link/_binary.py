"""Which files a link takes: a binary (module object or path) and a bridge's device code.

No fatbin reading here: this is on the lookup path and must be cheap to import.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from skbuild_cudaq.realtime.errors import DeviceCodeError

__all__ = ["Binary", "BridgeCode", "binary_path", "bridge_files"]

#: An extension module object, or the path of a binary.
Binary = ModuleType | str | os.PathLike[str]
#: A bridge's device code: LTO-IR fatbin paths (one or several); None: the host-ring hooks.
BridgeCode = Iterable[str | os.PathLike[str]] | str | os.PathLike[str] | None


def binary_path(binary: Binary) -> Path:
    """The resolved file of a module object or a path."""
    if isinstance(binary, ModuleType):
        file = getattr(binary, "__file__", None)
        if not file:
            msg = f"module {binary.__name__!r} has no file: it carries no device code"
            raise DeviceCodeError(msg)
        return _resolve(file)
    return _resolve(binary)


def _resolve(path: str | os.PathLike[str]) -> Path:
    """``path`` resolved; a path that cannot name a file is a :class:`DeviceCodeError`."""
    try:
        return Path(path).resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # NUL byte, symlink loop (3.10-3.12)
        msg = f"cannot read {path!r}: {exc}"
        raise DeviceCodeError(msg) from None


def bridge_files(bridge: BridgeCode) -> tuple[Path, ...] | None:
    """A bridge's device code (LTO-IR fatbins) as resolved paths; None: the host-ring hooks."""
    if bridge is None:
        return None
    if isinstance(bridge, (str, os.PathLike)):
        bridge = (bridge,)
    files = tuple(_resolve(f) for f in bridge)
    if not files:
        msg = (
            "a bridge's device code must name at least one fatbin (pass None for the "
            "built-in host-ring hooks)"
        )
        raise DeviceCodeError(msg)
    return files
