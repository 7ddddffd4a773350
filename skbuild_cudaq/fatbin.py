"""The fatbin format, and the device code embedded in a binary's ``__nv_relfatbin`` sections.

An extension module built with relocatable device code carries its device code
in ELF sections named ``__nv_relfatbin``: nvcc puts the handlers' fatbins there,
and skbuild-cudaq's ``cudaq_realtime_add_dispatch_kernel`` embeds the custom
dispatch kernel's LTO-IR fatbin next to them with ``.incbin``. The linker concatenates
what it finds into one section (or several, when flags differ), so a section
holds fatbin *containers* back to back, possibly separated by zero padding::

    container header (16 bytes, LE): u32 magic 0xBA55ED50, u16 version,
                                     u16 header size, u64 payload size
    payload: entries back to back, each an entry header then its code

Entry header (LE, ``header_size`` bytes, at least 64)::

    0  u16 kind (1 PTX, 2 cubin, 8 LTO-IR)   2  u16 (0x0101)
    4  u32 header size                        8  u64 payload size
    16 u32 compressed size                    20 u32 options offset
    24 u16 code version minor                 26 u16 code version major
    28 u32 arch (80 = sm_80)                  32 u32 name offset, 36 u32 name length
    40 u64 flags (0x2000 / 0x8000: compressed)
    48 u64 (unused here)                      56 u64 uncompressed size

At the options offset (within the header) sits ``u32 offset, u32 length`` of the
option string, also within the header.

The input is not trusted: every size and offset decoded (container and entry
headers here, ELF section headers in :mod:`skbuild_cudaq._elf`) is checked against
what holds it before anything is read or handed to nvJitLink, so any malformed file
gives one :class:`~skbuild_cudaq.errors.DeviceCodeError` line in time and memory
linear in the file's size. What no reader can check (the compressed code itself) is
why ``python -m skbuild_cudaq link`` runs nvJitLink in a child process.

This module never imports ``cuda.*``: it is the build-side inspector
(``python -m skbuild_cudaq inspect``) and the run time's reader. The writer of
containers (NVRTC's LTO-IR in nvcc's layout) is build-side:
:mod:`skbuild_cudaq.build._container`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import NamedTuple

from skbuild_cudaq._elf import file_size, named_path, open_regular, read_named_sections
from skbuild_cudaq.errors import DeviceCodeError

__all__ = [
    "CONTAINER_HEADER",
    "CONTAINER_MAGIC",
    "CONTAINER_VERSION",
    "ENTRY_HEADER",
    "SECTION_NAME",
    "FatbinContainer",
    "FatbinEntry",
    "FatbinSection",
    "ltoir_code_version",
    "read_fatbin_file",
    "read_relfatbin_sections",
    "relfatbin_sections",
    "split_containers",
]

#: The ELF section that holds a binary's relocatable device code.
SECTION_NAME = "__nv_relfatbin"
#: The first field of every container header.
CONTAINER_MAGIC = 0xBA55ED50
#: The container header (16 bytes, LE) holds magic, version, header size and payload size.
CONTAINER_HEADER = struct.Struct("<IHHQ")
#: The container version this reader and the build's writer know.
CONTAINER_VERSION = 1
#: The entry header (64 bytes, LE; the fields in the module docstring).
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")
_OPTIONS = struct.Struct("<II")  # at the options offset: option string offset and length
_COMPRESSED_FLAGS = 0x2000 | 0x8000
_LTOIR_MAGIC = b"\xedCN\x7f"  # raw LTO-IR (NVVM) starts ED 43 4E 7F, then u8 major, u8 minor

KIND_NAMES = {1: "ptx", 2: "cubin", 8: "lto-ir"}


@dataclass(frozen=True)
class FatbinEntry:
    """One code entry of a fatbin container (PTX, cubin or LTO-IR for one architecture)."""

    kind_code: int  #: 1 PTX, 2 cubin, 8 LTO-IR
    arch: int  #: e.g. 80 for sm_80
    offset: int  #: of the entry header within the container
    header_size: int
    payload_size: int  #: bytes of code stored (compressed or not, padded to 8)
    compressed_size: int  #: stored size when compressed, else 0
    uncompressed_size: int  #: size after decompression (0 when not recorded)
    flags: int
    code_version: tuple[int, int]  #: (major, minor) of the code format; LTO-IR 1.65 is CUDA 13.0

    @property
    def kind(self) -> str:
        """``"ptx"``, ``"cubin"``, ``"lto-ir"`` (or ``"kind-N"`` for anything else)."""
        return KIND_NAMES.get(self.kind_code, f"kind-{self.kind_code}")

    @property
    def sm(self) -> str:
        """The architecture as nvcc spells it, e.g. ``"sm_80"``."""
        return f"sm_{self.arch}"

    @property
    def compressed(self) -> bool:
        return bool(self.flags & _COMPRESSED_FLAGS)

    @property
    def code_version_str(self) -> str:
        return f"{self.code_version[0]}.{self.code_version[1]}"

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "arch": self.sm,
            "compressed": self.compressed,
            "size": self.payload_size,
            "uncompressed_size": self.uncompressed_size,
            "code_version": self.code_version_str,
            "flags": self.flags,
            "offset": self.offset,
        }


@dataclass(frozen=True)
class FatbinContainer:
    """One fatbin container: header plus entries. ``data`` is the whole container."""

    offset: int  #: within its section (or file, for a plain ``.fatbin`` file)
    version: int
    header_size: int
    payload_size: int
    entries: tuple[FatbinEntry, ...]
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return self.header_size + self.payload_size

    def to_json(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "version": self.version,
            "size": self.size,
            "entries": [e.to_json() for e in self.entries],
        }


@dataclass(frozen=True)
class FatbinSection:
    """One ``__nv_relfatbin`` section of an ELF file and the containers in it."""

    index: int  #: ELF section index
    file_offset: int
    size: int
    flags: int  #: ELF sh_flags (SHF_ALLOC = 0x2, SHF_GNU_RETAIN = 0x200000)
    containers: tuple[FatbinContainer, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "file_offset": self.file_offset,
            "size": self.size,
            "flags": self.flags,
            "containers": [c.to_json() for c in self.containers],
        }


class _EntryHeader(NamedTuple):
    kind: int
    version: int
    header_size: int
    payload_size: int
    compressed_size: int
    options: int
    minor: int
    major: int
    arch: int
    name: int
    name_len: int
    flags: int
    unused: int
    uncompressed_size: int


def _entry_problem(payload: bytes | memoryview, pos: int, head: _EntryHeader) -> str | None:
    """What is wrong with the sizes and offsets of the entry header at ``pos``, or None.

    Every size and offset an entry header declares must lie inside what it
    describes: nvJitLink trusts them (a compressed size past the code, or an
    options record outside the header, crashes it).
    """
    left = len(payload) - pos
    hsize, psize, csize = head.header_size, head.payload_size, head.compressed_size
    if hsize < ENTRY_HEADER.size or hsize % 8:
        return f"header size {hsize} (expected a multiple of 8, at least {ENTRY_HEADER.size})"
    if hsize + psize > left:
        return f"header {hsize} bytes, code {psize} bytes, {left} bytes left"
    if head.flags & _COMPRESSED_FLAGS:
        if not 0 < csize <= psize:
            return f"compressed size {csize} outside the {psize} bytes of code"
    elif csize > psize:
        return f"compressed size {csize} past the {psize} bytes of code"
    if head.options:
        # options record: u32 offset, u32 length of the option string, both within the header
        if head.options < ENTRY_HEADER.size or head.options + _OPTIONS.size > hsize:
            return f"options record at {head.options} outside the {hsize}-byte header"
        text, length = _OPTIONS.unpack_from(payload, pos + head.options)
        if text < ENTRY_HEADER.size or text + length > hsize:
            return f"option string at {text} ({length} bytes) outside the {hsize}-byte header"
    if (head.name or head.name_len) and (
        head.name < ENTRY_HEADER.size or head.name + head.name_len > hsize
    ):
        return f"name at {head.name} ({head.name_len} bytes) outside the {hsize}-byte header"
    return None


def _entries(payload: bytes | memoryview, base: int, where: str) -> tuple[FatbinEntry, ...]:
    entries: list[FatbinEntry] = []
    pos = 0
    while pos < len(payload):
        if not any(payload[pos : pos + ENTRY_HEADER.size]):
            if any(payload[pos:]):  # zero padding ends the entries: nothing may follow it
                msg = f"{where}: malformed fatbin entry at offset {base + pos} (zero header)"
                raise DeviceCodeError(msg)
            break
        if pos + ENTRY_HEADER.size > len(payload):
            msg = f"{where}: truncated fatbin entry header at offset {base + pos}"
            raise DeviceCodeError(msg)
        head = _EntryHeader._make(ENTRY_HEADER.unpack_from(payload, pos))
        problem = _entry_problem(payload, pos, head)
        if problem is not None:
            msg = f"{where}: malformed fatbin entry at offset {base + pos} ({problem})"
            raise DeviceCodeError(msg)
        entries.append(
            FatbinEntry(
                kind_code=head.kind,
                arch=head.arch,
                offset=base + pos,
                header_size=head.header_size,
                payload_size=head.payload_size,
                compressed_size=head.compressed_size,
                uncompressed_size=head.uncompressed_size,
                flags=head.flags,
                code_version=(head.major, head.minor),
            )
        )
        pos += head.header_size + head.payload_size
    return tuple(entries)


def split_containers(data: bytes, where: str) -> tuple[FatbinContainer, ...]:
    """Split ``data`` (a section's or a ``.fatbin`` file's bytes) into containers.

    Zero padding between and after containers is skipped; anything else that is
    not a container header (version 1, 16 bytes), a container running past the
    end, or an entry whose sizes and offsets do not fit raises
    :class:`~skbuild_cudaq.errors.DeviceCodeError` naming ``where`` and the
    offset. Time and memory are linear in ``len(data)``.
    """
    containers: list[FatbinContainer] = []
    view = memoryview(data)
    pos = 0
    size = len(data)
    while pos < size:
        # containers are 8-byte aligned; skip zero padding 8 bytes at a time
        if not any(view[pos : pos + 8]):
            pos += 8
            continue
        if pos + CONTAINER_HEADER.size > size:
            msg = f"{where}: truncated fatbin container header at offset {pos}"
            raise DeviceCodeError(msg)
        magic, version, hsize, psize = CONTAINER_HEADER.unpack_from(data, pos)
        if magic != CONTAINER_MAGIC:
            msg = (
                f"{where}: no fatbin container at offset {pos} "
                f"(magic 0x{magic:08X}, expected 0x{CONTAINER_MAGIC:08X})"
            )
            raise DeviceCodeError(msg)
        if version != CONTAINER_VERSION or hsize != CONTAINER_HEADER.size:
            msg = (
                f"{where}: unsupported fatbin container at offset {pos} (version {version}, "
                f"header {hsize} bytes; expected version {CONTAINER_VERSION}, "
                f"{CONTAINER_HEADER.size} bytes)"
            )
            raise DeviceCodeError(msg)
        if pos + hsize + psize > size:
            msg = (
                f"{where}: fatbin container at offset {pos} is truncated "
                f"(needs {hsize + psize} bytes, {size - pos} left)"
            )
            raise DeviceCodeError(msg)
        if pos == 0 and hsize + psize == size and isinstance(data, bytes):
            whole = data  # the container is all of it: no second copy of a huge section
        else:
            whole = bytes(view[pos : pos + hsize + psize])
        inside = f"{where}, container at offset {pos}"
        entries = _entries(memoryview(whole)[hsize:], hsize, inside)
        if not entries:
            msg = f"{inside}: the container holds no entry"
            raise DeviceCodeError(msg)
        containers.append(
            FatbinContainer(
                offset=pos,
                version=version,
                header_size=hsize,
                payload_size=psize,
                entries=entries,
                data=whole,
            )
        )
        pos += hsize + psize
    return tuple(containers)


def ltoir_code_version(ltoir: bytes) -> tuple[int, int]:
    """The code version (major, minor) of raw LTO-IR, from its header (bytes 4 and 5).

    The same numbers nvcc writes into the fatbin entry header: 1.64 from CUDA
    12.9, 1.65 from 13.0, 1.67 from 13.5.
    """
    if len(ltoir) < 8 or ltoir[:4] != _LTOIR_MAGIC:
        msg = f"not raw LTO-IR (starts {ltoir[:4].hex(' ')}, expected {_LTOIR_MAGIC.hex(' ')})"
        raise DeviceCodeError(msg)
    return ltoir[4], ltoir[5]


def read_relfatbin_sections(path: str | PathLike[str]) -> tuple[FatbinSection, ...]:
    """Every ``__nv_relfatbin`` section of the ELF file at ``path``, split into containers.

    Raises :class:`~skbuild_cudaq.errors.DeviceCodeError` (one line) for a file
    that is not ELF, has no such section, or whose sections are truncated, overlap
    or hold something other than well-formed fatbin containers. Reads each byte
    range once: time and memory are linear in the file's size.
    """
    path = named_path(path)
    try:
        found = read_named_sections(path, SECTION_NAME)
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        msg = f"cannot read {path!r}: {exc}"
        raise DeviceCodeError(msg) from None
    return relfatbin_sections(path, found)


def relfatbin_sections(
    path: Path, found: Sequence[tuple[int, int, int, bytes]]
) -> tuple[FatbinSection, ...]:
    """The ``__nv_relfatbin`` sections ``found`` in the file at ``path`` (as
    :func:`~skbuild_cudaq._elf.read_sections` returns them), split into containers; raises
    as :func:`read_relfatbin_sections`."""
    if not found:
        msg = (
            f"{path}: no {SECTION_NAME} section: the binary carries no relocatable device code "
            "(build it with a dispatch kernel or -rdc handlers)"
        )
        raise DeviceCodeError(msg)
    result = []
    for index, offset, flags, data in found:
        where = f"{path}: {SECTION_NAME} (section {index})"
        containers = split_containers(data, where)
        if not containers:
            msg = f"{where}: section holds no fatbin container (only zero bytes)"
            raise DeviceCodeError(msg)
        result.append(FatbinSection(index, offset, len(data), flags, containers))
    return tuple(result)


def read_fatbin_file(path: str | PathLike[str]) -> tuple[FatbinContainer, ...]:
    """The containers of a plain ``.fatbin`` file (as ``nvcc -fatbin`` writes it)."""
    path = named_path(path)
    try:
        with open_regular(path) as stream:
            file_size(stream, path)
            data = stream.read()
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        msg = f"cannot read {path!r}: {exc}"
        raise DeviceCodeError(msg) from None
    containers = split_containers(data, str(path))
    if not containers:
        msg = f"{path}: empty fatbin file"
        raise DeviceCodeError(msg)
    return containers
