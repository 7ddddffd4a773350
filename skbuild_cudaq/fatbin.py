"""Reader of the device code embedded in a binary's ``__nv_relfatbin`` sections.

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

This module never imports ``cuda.*``: it is the build-side inspector
(``python -m skbuild_cudaq inspect``) and the run time's reader. It reads ELF
section headers itself (a few dozen lines; a warm start cannot afford importing
pyelftools, ~25 ms); pyelftools reads cubin symbol tables elsewhere and
cross-checks this reader in the tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import BinaryIO

from .errors import DeviceCodeError

__all__ = [
    "CONTAINER_MAGIC",
    "SECTION_NAME",
    "ElfSection",
    "FatbinContainer",
    "FatbinEntry",
    "FatbinSection",
    "elf_sections",
    "ltoir_code_version",
    "make_ltoir_container",
    "read_fatbin_file",
    "read_relfatbin_sections",
    "split_containers",
]

SECTION_NAME = "__nv_relfatbin"
CONTAINER_MAGIC = 0xBA55ED50
_CONTAINER_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, payload size
_ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes, see the module docstring
_COMPRESSED_FLAGS = 0x2000 | 0x8000
_LTOIR_MAGIC = b"\xedCN\x7f"  # raw LTO-IR (NVVM) starts ED 43 4E 7F, then u8 major, u8 minor
#: Entry flags nvcc writes for LTO-IR on Linux x86-64: 0x1 64-bit, 0x10 Linux.
_LTOIR_FLAGS = 0x11
#: The options nvcc records in an LTO-IR entry (its defaults, which are NVRTC's too).
_LTOIR_OPTIONS = b"-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1 "

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
    code_version: tuple[int, int]  #: (major, minor) of the code format (LTO-IR: 1.65 = CUDA 13.0)

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


def _entries(payload: bytes, base: int, where: str) -> tuple[FatbinEntry, ...]:
    entries: list[FatbinEntry] = []
    pos = 0
    while pos < len(payload):
        if not any(payload[pos : pos + _ENTRY_HEADER.size]):
            break  # zero tail padding
        if pos + _ENTRY_HEADER.size > len(payload):
            msg = f"{where}: truncated fatbin entry header at offset {base + pos}"
            raise DeviceCodeError(msg)
        (kind, _ver, hsize, psize, csize, _opt, minor, major, arch, _no, _nl, flags, _x, usize) = (
            _ENTRY_HEADER.unpack_from(payload, pos)
        )
        if hsize < _ENTRY_HEADER.size or pos + hsize + psize > len(payload):
            msg = (
                f"{where}: malformed fatbin entry at offset {base + pos} "
                f"(header {hsize} bytes, code {psize} bytes, {len(payload) - pos} bytes left)"
            )
            raise DeviceCodeError(msg)
        entries.append(
            FatbinEntry(
                kind_code=kind,
                arch=arch,
                offset=base + pos,
                header_size=hsize,
                payload_size=psize,
                compressed_size=csize,
                uncompressed_size=usize,
                flags=flags,
                code_version=(major, minor),
            )
        )
        pos += hsize + psize
    return tuple(entries)


def split_containers(data: bytes, where: str) -> tuple[FatbinContainer, ...]:
    """Split ``data`` (a section's or a ``.fatbin`` file's bytes) into containers.

    Zero padding between and after containers is skipped; anything else that is
    not a container header, or a container running past the end, raises
    :class:`~skbuild_cudaq.errors.DeviceCodeError` naming ``where`` and the offset.
    """
    containers: list[FatbinContainer] = []
    pos = 0
    size = len(data)
    while pos < size:
        # containers are 8-byte aligned; skip zero padding 8 bytes at a time
        if not any(data[pos : pos + 8]):
            pos += 8
            continue
        if pos + _CONTAINER_HEADER.size > size:
            msg = f"{where}: truncated fatbin container header at offset {pos}"
            raise DeviceCodeError(msg)
        magic, version, hsize, psize = _CONTAINER_HEADER.unpack_from(data, pos)
        if magic != CONTAINER_MAGIC:
            msg = (
                f"{where}: no fatbin container at offset {pos} "
                f"(magic 0x{magic:08X}, expected 0x{CONTAINER_MAGIC:08X})"
            )
            raise DeviceCodeError(msg)
        if hsize < _CONTAINER_HEADER.size or pos + hsize + psize > size:
            msg = (
                f"{where}: fatbin container at offset {pos} is truncated "
                f"(needs {hsize + psize} bytes, {size - pos} left)"
            )
            raise DeviceCodeError(msg)
        body = data[pos + hsize : pos + hsize + psize]
        containers.append(
            FatbinContainer(
                offset=pos,
                version=version,
                header_size=hsize,
                payload_size=psize,
                entries=_entries(body, hsize, f"{where}, container at offset {pos}"),
                data=bytes(data[pos : pos + hsize + psize]),
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


def _pad8(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 8)


def make_ltoir_container(entries: list[tuple[int, bytes]]) -> bytes:
    """A fatbin container holding raw LTO-IR, one entry per ``(arch, ltoir)``.

    The layout nvcc writes for ``-fatbin -rdc=true code=lto_XX`` without
    compression (a 120-byte entry header with the options record), so that
    NVRTC's output takes the same embed, reader and link path as nvcc's.
    """
    body = b""
    for arch, ltoir in entries:
        major, minor = ltoir_code_version(ltoir)
        payload = _pad8(ltoir)
        options_offset = _ENTRY_HEADER.size
        options = (
            struct.pack("<II", options_offset + 8, len(_LTOIR_OPTIONS)) + _LTOIR_OPTIONS + b"\0"
        )
        header_size = options_offset + len(_pad8(options))
        header = _ENTRY_HEADER.pack(
            8,
            0x0101,
            header_size,
            len(payload),
            0,
            options_offset,
            minor,
            major,
            arch,
            0,
            0,
            _LTOIR_FLAGS,
            0,
            0,
        )
        body += header + _pad8(options) + payload
    return _CONTAINER_HEADER.pack(CONTAINER_MAGIC, 1, _CONTAINER_HEADER.size, len(body)) + body


_SHT_NOBITS = 8
_SHN_XINDEX = 0xFFFF


@dataclass(frozen=True)
class ElfSection:
    """One ELF section header (what the reader needs of it)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int


def _read_at(stream: BinaryIO, offset: int, size: int, what: str, path: Path) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        msg = f"{path}: truncated ELF file ({what} at offset {offset} runs past the end)"
        raise DeviceCodeError(msg)
    return data


def elf_sections(stream: BinaryIO, path: Path) -> list[ElfSection]:
    """The section headers of an ELF file (32/64-bit, either byte order).

    A small reader of the section header table only: reading a module's
    sections must stay cheap on a warm start, where importing pyelftools alone
    would cost more than the rest of the lookup. Cross-checked against pyelftools
    in the tests.
    """
    ident = stream.read(16)
    if (
        len(ident) < 16
        or ident[:4] != b"\x7fELF"
        or ident[4] not in (1, 2)
        or ident[5] not in (1, 2)
    ):
        msg = f"{path}: not an ELF file"
        raise DeviceCodeError(msg)
    is64, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
    if is64:
        head = _read_at(stream, 0x28, 0x18, "ELF header", path)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "QIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIQQQQIIQQ")
    else:
        head = _read_at(stream, 0x20, 0x14, "ELF header", path)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "IIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIIIIIIIII")
    if shoff == 0:
        return []
    if shentsize < shdr.size:
        msg = f"{path}: malformed ELF file (section header size {shentsize})"
        raise DeviceCodeError(msg)

    def header(index: int) -> tuple[int, ...]:
        raw = _read_at(stream, shoff + index * shentsize, shdr.size, "section header", path)
        return shdr.unpack(raw)

    first = header(0)
    if shnum == 0:  # extended numbering: the count is in section 0's sh_size
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    table = _read_at(stream, shoff, shnum * shentsize, "section header table", path)
    rows = [shdr.unpack_from(table, i * shentsize) for i in range(shnum)]
    if not 0 <= shstrndx < shnum:
        msg = f"{path}: malformed ELF file (section name table index {shstrndx})"
        raise DeviceCodeError(msg)
    names = _read_at(stream, rows[shstrndx][4], rows[shstrndx][5], "section name table", path)
    sections = []
    for index, (name_off, sh_type, flags, _addr, offset, size, *_rest) in enumerate(rows):
        end = names.find(b"\0", name_off)
        name = names[name_off : end if end >= 0 else len(names)].decode("latin-1")
        sections.append(ElfSection(index, name, sh_type, flags, offset, size))
    return sections


def read_relfatbin_sections(path: str | PathLike[str]) -> tuple[FatbinSection, ...]:
    """Every ``__nv_relfatbin`` section of the ELF file at ``path``, split into containers.

    Raises :class:`~skbuild_cudaq.errors.DeviceCodeError` (one line) for a file
    that is not ELF, has no such section, or whose section is truncated or holds
    something other than fatbin containers.
    """
    path = Path(path)
    found: list[tuple[ElfSection, bytes]] = []
    try:
        with path.open("rb") as stream:
            for section in elf_sections(stream, path):
                if section.name != SECTION_NAME:
                    continue
                if section.type == _SHT_NOBITS:
                    msg = f"{path}: section {SECTION_NAME} (index {section.index}) has no file data"
                    raise DeviceCodeError(msg)
                stream.seek(section.offset)
                data = stream.read(section.size)
                if len(data) != section.size:
                    msg = (
                        f"{path}: section {SECTION_NAME} (index {section.index}) is truncated "
                        f"({section.size - len(data)} bytes past the end of the file)"
                    )
                    raise DeviceCodeError(msg)
                found.append((section, data))
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    if not found:
        msg = (
            f"{path}: no {SECTION_NAME} section: the binary carries no relocatable device code "
            "(build it with a dispatch kernel or -rdc handlers)"
        )
        raise DeviceCodeError(msg)
    result = []
    for section, data in found:
        where = f"{path}: {SECTION_NAME} (section {section.index})"
        containers = split_containers(data, where)
        if not containers:
            msg = f"{where}: section holds no fatbin container (only zero bytes)"
            raise DeviceCodeError(msg)
        result.append(
            FatbinSection(section.index, section.offset, section.size, section.flags, containers)
        )
    return tuple(result)


def read_fatbin_file(path: str | PathLike[str]) -> tuple[FatbinContainer, ...]:
    """The containers of a plain ``.fatbin`` file (as ``nvcc -fatbin`` writes it)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    containers = split_containers(data, str(path))
    if not containers:
        msg = f"{path}: empty fatbin file"
        raise DeviceCodeError(msg)
    return containers
