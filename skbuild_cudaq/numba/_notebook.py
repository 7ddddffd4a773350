"""The notebook path: handlers defined at run time, served with no build step.

:func:`skbuild_cudaq.numba.device_binary` compiles decorated functions (numba-cuda, as the
build does) and writes their fatbin containers -- with every container of an extension
module's ``__nv_relfatbin`` when one is given -- into a small ELF file of its own: an
``__nv_relfatbin`` section and the ``__cudaq_rt_info`` build records, as a built module
carries them. That file *is* the binary the run time's lookups take
(``get_device_kernel(path, ...)``, ``get_device_handler(path, ...)``,
``DispatcherConfig``, ``inspect``, ``check``): it links like any module, with the built-in
kernel (and the extension's kernels and handlers), and its link is cached like every link,
keyed by every container's bytes -- so by each function's code.

The file is named by the SHA-256 of its content, in a per-user directory (0700) of the
user's cache (``$XDG_CACHE_HOME/skbuild-cudaq/python-device``, or
``SKBUILD_CUDAQ_PYTHON_DEVICE_DIR``), written atomically; the same handlers give the same
file. Compiling is cached there too (``ltoir/``, keyed by each function's code, its closure
and the globals it names: :func:`skbuild_cudaq.numba._compile.cache_key`): numba-cuda
names its functions anew on every compile, so without it the same code would be new bytes
(a new link) in every process.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from skbuild_cudaq.numba import PyHandler, PyKernel

__all__ = ["device_binary", "elf_with_sections", "notebook_dir"]

_SHT_PROGBITS = 1
_SHT_STRTAB = 3
_SHF_ALLOC = 0x2
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")


def _pad8(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


def elf_with_sections(sections: Sequence[tuple[str, bytes]]) -> bytes:
    """A relocatable ELF64 (x86-64, little-endian) holding ``sections`` (name, bytes), each
    allocated and 8-byte aligned: the smallest file the package's ELF reader reads."""
    names = b"\0"
    offsets: list[int] = []
    for name, _ in sections:
        offsets.append(len(names))
        names += name.encode() + b"\0"
    shstrtab_name = len(names)
    names += b".shstrtab\0"
    body = b""
    headers = [_SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    position = _EHDR.size
    for (_, data), name_offset in zip(sections, offsets, strict=True):
        headers.append(
            _SHDR.pack(name_offset, _SHT_PROGBITS, _SHF_ALLOC, 0, position, len(data), 0, 0, 8, 0)
        )
        body += _pad8(data)
        position = _EHDR.size + len(body)
    headers.append(_SHDR.pack(shstrtab_name, _SHT_STRTAB, 0, 0, position, len(names), 0, 0, 1, 0))
    body += _pad8(names)
    table = _EHDR.size + len(body)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9  # 64-bit, little-endian, version 1
    head = _EHDR.pack(
        ident, 1, 62, 1, 0, 0, table, 0, _EHDR.size, 0, 0, _SHDR.size, len(headers),
        len(headers) - 1,
    )  # fmt: skip
    return head + body + b"".join(headers)


def notebook_dir() -> Path:
    """Where notebook binaries go (made 0700 on first use)."""
    given = os.environ.get("SKBUILD_CUDAQ_PYTHON_DEVICE_DIR")
    if given:
        root = Path(given)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(cache) / "skbuild-cudaq" / "python-device"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _record(
    handlers: Sequence[PyHandler | PyKernel], archs: Sequence[int], containers: list[bytes]
) -> bytes:
    from skbuild_cudaq._records import MAGIC, VERSION, container_digest
    from skbuild_cudaq.numba._compile import numba_compiler

    where = sorted({getattr(h.function, "__module__", "?") or "?" for h in handlers})
    record = {
        "source": f"<python handlers of {', '.join(where)}>",
        "compiled": "side",
        "compiler": numba_compiler(),
        "architectures": [str(a) for a in archs],
        "kernels": sorted(k.name for k in handlers if isinstance(k, PyKernel)),
        "handlers": sorted(h.name for h in handlers if isinstance(h, PyHandler)),
        "containers": [container_digest(c) for c in containers],
    }
    text = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return _pad8(struct.pack("<8sII", MAGIC, VERSION, len(text)) + text)


def _extension_sections(module: ModuleType | str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """The extension's containers (its ``__nv_relfatbin`` sections' bytes, zero padding
    dropped) and its records section."""
    from skbuild_cudaq._elf import read_named_sections
    from skbuild_cudaq._records import SECTION
    from skbuild_cudaq.fatbin import read_relfatbin_sections

    file = Path(module.__file__ or "") if isinstance(module, ModuleType) else Path(module)
    containers = b"".join(
        _pad8(c.data) for s in read_relfatbin_sections(file) for c in s.containers
    )
    records = b"".join(_pad8(data) for *_, data in read_named_sections(file, SECTION))
    return containers, records


def device_binary(
    handlers: Sequence[PyHandler | PyKernel],
    extension: ModuleType | str | os.PathLike[str] | None = None,
    architectures: Sequence[int] = (80,),
) -> Path:
    """:func:`skbuild_cudaq.numba.device_binary`."""
    from skbuild_cudaq._records import SECTION
    from skbuild_cudaq.numba._compile import handler_containers

    ltoir = notebook_dir() / "ltoir"
    ltoir.mkdir(mode=0o700, exist_ok=True)
    containers = handler_containers(handlers, architectures, cache=ltoir)
    relfatbin = b"".join(_pad8(c) for c in containers)
    records = _record(handlers, architectures, containers)
    if extension is not None:
        more, more_records = _extension_sections(extension)
        relfatbin, records = more + relfatbin, more_records + records
    data = elf_with_sections([("__nv_relfatbin", relfatbin), (SECTION, records)])
    root = notebook_dir()
    path = root / f"{hashlib.sha256(data).hexdigest()[:32]}.o"
    if not path.is_file() or path.read_bytes() != data:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        Path(tmp).replace(path)
    return path
