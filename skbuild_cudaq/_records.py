"""The build records: what each fatbin container of a binary holds, named by the build.

The one definition of the record format, neutral ground between the build side (which writes
records: :mod:`skbuild_cudaq.build._device_info`) and the readers (the run time's link and
``check``, ``skbuild-cudaq inspect``). Imports neither side.

The fatbins in ``__nv_relfatbin`` do not name their kernels and handlers in a
readable way (entries are compressed LTO-IR). So the build places, next to them,
one small JSON record per device source in its own section, ``__cudaq_rt_info``
(flags ``"aR"``: allocated and retained against ``--gc-sections``; 8-aligned; from
a C file's top-level ``__asm__``, so no executable-stack marking), and readers join the
records with the containers by the SHA-256 of each container's bytes
(:func:`container_digest`). A record holds::

    {"source": "src/kernel.cu",          # relative to the project when inside it
     "compiled": "side" | "nvcc",         # side-compiled fatbin, or an nvcc object
     "compiler": "nvcc 13.0.88",          # or "NVRTC 13.0": the device compiler that built it
     "architectures": ["80"],
     "kernels": ["my_dispatcher"],        # extern "C" __global__ functions it defines
     "handlers": ["rpc_increment"],       # CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION names
     "containers": ["<sha256 hex>", ...]} # of each fatbin container the source became

A record in the section is framed like a fatbin container: 16 bytes (``b"CQRTINFO"``,
``u32`` version 1, ``u32`` JSON length), the JSON, zero padding to 8 bytes; the
assembler computes the length (:func:`asm_record`). Modules built without records read as
``[]``. Never imports ``cuda.*``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skbuild_cudaq.errors import DeviceCodeError

__all__ = [
    "HANDLER_PREFIX",
    "MAGIC",
    "SECTION",
    "SHAPE_THREAD_PREFIX",
    "VERSION",
    "asm_record",
    "container_digest",
    "read_records",
    "records_in",
    "records_of_sections",
]

#: The section holding the records (next to ``__nv_relfatbin``).
SECTION = "__cudaq_rt_info"
MAGIC = b"CQRTINFO"
_HEADER = struct.Struct("<8sII")  # magic, version, JSON length
VERSION = 1
#: The prefix of the device global ``CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(name)`` defines.
HANDLER_PREFIX = "cudaq_handler_"
#: The marker global of a thread-shaped handler (``CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION``).
SHAPE_THREAD_PREFIX = "cudaq_shape_thread_"


def container_digest(data: bytes) -> str:
    """The join key of a fatbin container: SHA-256 (hex) of its bytes, header included."""
    import hashlib  # here: `inspect` of a binary without records never needs it

    return hashlib.sha256(data).hexdigest()


def asm_record(json_path: Path) -> str:
    """One top-level C statement placing the record file (absolute path) in :data:`SECTION`."""
    text = str(Path(json_path).resolve())
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text) or '"' in text or "\\" in text:
        msg = f"cannot .incbin a path with control characters, quotes or backslashes: {text!r}"
        raise DeviceCodeError(msg)
    body = (
        f'.section {SECTION},"aR"\n.balign 8\n.ascii "{MAGIC.decode()}"\n.long {VERSION}\n'
        f'.long 2f - 1f\n1:\n.incbin "{text}"\n2:\n.balign 8\n.previous'
    )
    escaped = body.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'__asm__("{escaped}");'


def records_in(data: bytes, where: str) -> list[dict[str, Any]]:
    """The records in one section's bytes (``where`` names it in errors)."""
    records: list[dict[str, Any]] = []
    pos = 0
    while pos < len(data):
        if not any(data[pos : pos + 8]):
            pos += 8
            continue
        if pos + _HEADER.size > len(data):
            msg = f"{where}: truncated record header at offset {pos}"
            raise DeviceCodeError(msg)
        magic, version, length = _HEADER.unpack_from(data, pos)
        if magic != MAGIC or pos + _HEADER.size + length > len(data):
            msg = f"{where}: malformed record at offset {pos}"
            raise DeviceCodeError(msg)
        body = data[pos + _HEADER.size : pos + _HEADER.size + length]
        if version == VERSION:
            try:
                record = json.loads(body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                msg = f"{where}: record at offset {pos} is not JSON"
                raise DeviceCodeError(msg) from None
            if isinstance(record, dict):
                records.append(record)
        pos += _HEADER.size + (length + 7) // 8 * 8
    return records


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record in the ``__cudaq_rt_info`` sections of an ELF file (none: ``[]``)."""
    from skbuild_cudaq._elf import elf_sections, open_regular

    path = Path(path)
    records: list[dict[str, Any]] = []
    try:
        with open_regular(path) as stream:
            for section in elf_sections(stream, path):
                if section.name != SECTION or section.type == 8:  # SHT_NOBITS
                    continue
                stream.seek(section.offset)
                data = stream.read(section.size)
                records += records_in(data, f"{path}: {SECTION} (section {section.index})")
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    return records


def records_of_sections(
    path: Path, found: Sequence[tuple[int, int, int, bytes]]
) -> list[dict[str, Any]]:
    """The records of the ``__cudaq_rt_info`` sections ``found`` in the file at ``path`` (as
    :func:`~skbuild_cudaq._elf.read_sections` returns them)."""
    records: list[dict[str, Any]] = []
    for index, _offset, _flags, data in found:
        records += records_in(data, f"{path}: {SECTION} (section {index})")
    return records
