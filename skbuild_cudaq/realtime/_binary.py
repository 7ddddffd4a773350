"""Which file a binary is: a module object or a path (no fatbin reading, cheap to import)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from .errors import DeviceCodeError

__all__ = ["Binary", "binary_path"]

#: An extension module object, or the path of a binary.
Binary = ModuleType | str | os.PathLike[str]


def binary_path(binary: Binary) -> Path:
    """The resolved file of a module object or a path."""
    if isinstance(binary, ModuleType):
        file = getattr(binary, "__file__", None)
        if not file:
            msg = f"module {binary.__name__!r} has no file: it carries no device code"
            raise DeviceCodeError(msg)
        return Path(file).resolve()
    return Path(binary).resolve()
