"""Reader of the device code embedded in a binary's ``__nv_relfatbin`` sections.

(Over 400 lines: one reader of hostile input -- ELF headers, containers, entries -- whose
checks belong together.)

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

The input is not trusted: every size and offset decoded (ELF section headers,
container and entry headers) is checked against what holds it before anything
is read or handed to nvJitLink, two section headers naming the same bytes are
read once and overlapping sections are refused, so any malformed file gives one
:class:`~skbuild_cudaq.errors.DeviceCodeError` line in time and memory linear in
the file's size. What no reader can check (the compressed code itself) is why
``python -m skbuild_cudaq link`` runs nvJitLink in a child process.

This module never imports ``cuda.*``: it is the build-side inspector
(``python -m skbuild_cudaq inspect``) and the run time's reader. It reads ELF
section headers and symbol tables itself (a few dozen lines; a warm start and the
first answer cannot afford importing pyelftools, 25-100 ms); pyelftools cross-checks
this reader in the tests.
"""

from __future__ import annotations

import itertools
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import BinaryIO, NamedTuple

from .errors import DeviceCodeError

__all__ = [
    "CONTAINER_MAGIC",
    "MAX_SECTION_NAME",
    "SECTION_NAME",
    "ElfSection",
    "ElfSymbol",
    "FatbinContainer",
    "FatbinEntry",
    "FatbinSection",
    "elf_sections",
    "elf_symbols",
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
_OPTIONS = struct.Struct("<II")  # at the options offset: option string offset and length
_CONTAINER_VERSION = 1
_COMPRESSED_FLAGS = 0x2000 | 0x8000
_LTOIR_MAGIC = b"\xedCN\x7f"  # raw LTO-IR (NVVM) starts ED 43 4E 7F, then u8 major, u8 minor
#: Entry flags nvcc writes for LTO-IR on Linux x86-64: 0x1 64-bit, 0x10 Linux.
_LTOIR_FLAGS = 0x11
#: The options nvcc records in an LTO-IR entry (its defaults, which are NVRTC's too).
_LTOIR_OPTIONS = b"-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1 "
#: Section names are read up to this many bytes (only ``__nv_relfatbin`` matters).
MAX_SECTION_NAME = 4096

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
    if hsize < _ENTRY_HEADER.size or hsize % 8:
        return f"header size {hsize} (expected a multiple of 8, at least {_ENTRY_HEADER.size})"
    if hsize + psize > left:
        return f"header {hsize} bytes, code {psize} bytes, {left} bytes left"
    if head.flags & _COMPRESSED_FLAGS:
        if not 0 < csize <= psize:
            return f"compressed size {csize} outside the {psize} bytes of code"
    elif csize > psize:
        return f"compressed size {csize} past the {psize} bytes of code"
    if head.options:
        # options record: u32 offset, u32 length of the option string, both within the header
        if head.options < _ENTRY_HEADER.size or head.options + _OPTIONS.size > hsize:
            return f"options record at {head.options} outside the {hsize}-byte header"
        text, length = _OPTIONS.unpack_from(payload, pos + head.options)
        if text < _ENTRY_HEADER.size or text + length > hsize:
            return f"option string at {text} ({length} bytes) outside the {hsize}-byte header"
    if (head.name or head.name_len) and (
        head.name < _ENTRY_HEADER.size or head.name + head.name_len > hsize
    ):
        return f"name at {head.name} ({head.name_len} bytes) outside the {hsize}-byte header"
    return None


def _entries(payload: bytes | memoryview, base: int, where: str) -> tuple[FatbinEntry, ...]:
    entries: list[FatbinEntry] = []
    pos = 0
    while pos < len(payload):
        if not any(payload[pos : pos + _ENTRY_HEADER.size]):
            if any(payload[pos:]):  # zero padding ends the entries: nothing may follow it
                msg = f"{where}: malformed fatbin entry at offset {base + pos} (zero header)"
                raise DeviceCodeError(msg)
            break
        if pos + _ENTRY_HEADER.size > len(payload):
            msg = f"{where}: truncated fatbin entry header at offset {base + pos}"
            raise DeviceCodeError(msg)
        head = _EntryHeader._make(_ENTRY_HEADER.unpack_from(payload, pos))
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
        if version != _CONTAINER_VERSION or hsize != _CONTAINER_HEADER.size:
            msg = (
                f"{where}: unsupported fatbin container at offset {pos} (version {version}, "
                f"header {hsize} bytes; expected version {_CONTAINER_VERSION}, "
                f"{_CONTAINER_HEADER.size} bytes)"
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
_NAME = SECTION_NAME.encode()


def _is_relfatbin(names: bytes, offset: int) -> bool:
    """Whether the name at ``offset`` is ``__nv_relfatbin`` (constant time, whatever follows)."""
    stop = offset + len(_NAME)
    return names.startswith(_NAME, offset) and names[stop : stop + 1] in (b"", b"\0")


@dataclass(frozen=True)
class ElfSection:
    """One ELF section header (what the reader needs of it)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int


def _malformed(path: Path, what: str) -> DeviceCodeError:
    return DeviceCodeError(f"{path}: malformed ELF file ({what})")


def _read_at(stream: BinaryIO, offset: int, size: int, what: str, path: Path, *, end: int) -> bytes:
    """``size`` bytes at ``offset``, both checked against the file's ``end`` before reading."""
    if offset + size > end:
        msg = f"{path}: truncated ELF file ({what} at offset {offset} runs past the end)"
        raise DeviceCodeError(msg)
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:  # the file shrank while being read
        msg = f"{path}: truncated ELF file ({what} at offset {offset} runs past the end)"
        raise DeviceCodeError(msg)
    return data


class _SectionTable(NamedTuple):  # (a NamedTuple: cheaper to create than a dataclass at import)
    """An ELF file's section header table and section name table, checked against its size."""

    rows: bytes  #: the raw section header table
    entry_size: int
    header_count: int
    shdr: struct.Struct
    names: bytes

    def headers(self) -> Iterator[tuple[int, ...]]:
        for index in range(self.header_count):
            yield self.shdr.unpack_from(self.rows, index * self.entry_size)


def _section_table(stream: BinaryIO, path: Path, end: int) -> _SectionTable | None:
    stream.seek(0)
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
        head = _read_at(stream, 0x28, 0x18, "ELF header", path, end=end)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "QIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIQQQQIIQQ")
    else:
        head = _read_at(stream, 0x20, 0x14, "ELF header", path, end=end)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "IIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIIIIIIIII")
    if shoff == 0:
        return None
    if shentsize < shdr.size:
        raise _malformed(path, f"section header size {shentsize}")
    first = shdr.unpack(_read_at(stream, shoff, shdr.size, "section header", path, end=end))
    if shnum == 0:  # extended numbering: the count is in section 0's sh_size
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    # the table must lie inside the file: its size is then bounded by the file's
    rows = _read_at(stream, shoff, shnum * shentsize, "section header table", path, end=end)
    if not 0 <= shstrndx < shnum:
        raise _malformed(path, f"section name table index {shstrndx}")
    names_header = shdr.unpack_from(rows, shstrndx * shentsize)
    if names_header[1] == _SHT_NOBITS:
        raise _malformed(path, "section name table has no file data")
    names = _read_at(stream, names_header[4], names_header[5], "section name table", path, end=end)
    return _SectionTable(rows, shentsize, shnum, shdr, names)


def _file_size(stream: BinaryIO, path: Path) -> int:
    """The size of the regular file behind ``stream`` (of an in-memory stream: its length)."""
    try:
        fd = stream.fileno()
    except (OSError, AttributeError):  # io.BytesIO and the like
        return stream.seek(0, os.SEEK_END)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        msg = f"{path}: not a regular file"
        raise DeviceCodeError(msg)
    return info.st_size


def elf_sections(stream: BinaryIO, path: Path) -> list[ElfSection]:
    """The section headers of an ELF file (32/64-bit, either byte order).

    A small reader of the section header table only: reading a module's
    sections must stay cheap on a warm start, where importing pyelftools alone
    would cost more than the rest of the lookup. Cross-checked against pyelftools
    in the tests. Every offset and size is checked against the file's size
    before anything is read (a :class:`~skbuild_cudaq.errors.DeviceCodeError`
    otherwise); section names are cut at :data:`MAX_SECTION_NAME` bytes.
    """
    table = _section_table(stream, path, _file_size(stream, path))
    if table is None:
        return []
    names = table.names
    sections = []
    for index, (name_off, sh_type, flags, _addr, offset, size, *_rest) in enumerate(
        table.headers()
    ):
        stop = min(name_off + MAX_SECTION_NAME, len(names))
        end = names.find(b"\0", name_off, stop)
        name = names[name_off : end if end >= 0 else stop].decode("latin-1")
        sections.append(ElfSection(index, name, sh_type, flags, offset, size))
    return sections


_SHT_SYMTAB = 2
_SHT_DYNSYM = 11


@dataclass(frozen=True)
class ElfSymbol:
    """One ELF symbol (what the run time needs of it): ``bind`` and ``kind`` are the
    ``st_info`` halves (STB_GLOBAL 1, STB_WEAK 2; STT_OBJECT 1, STT_FUNC 2), ``section``
    the ``st_shndx`` (0: undefined)."""

    name: str
    bind: int
    kind: int
    section: int


def elf_symbols(stream: BinaryIO, path: Path, *, dynamic: bool = False) -> list[ElfSymbol]:
    """The named symbols of an ELF file's symbol tables (``SHT_SYMTAB``), in table order;
    with ``dynamic``, of its dynamic symbol table (``SHT_DYNSYM``: what a shared library
    exports, kept by ``strip``).

    The same small reader as :func:`elf_sections`: a linked module's symbols are read
    on the way to the first answer, where importing pyelftools costs ~100 ms.
    Cross-checked against pyelftools in the tests; every offset and size is checked
    against the file's size (:class:`~skbuild_cudaq.errors.DeviceCodeError`).
    """
    end = _file_size(stream, path)
    table = _section_table(stream, path, end)
    if table is None:
        return []
    order = table.shdr.format[0]
    is64 = table.shdr.size == 64
    sym = struct.Struct(order + ("IBBHQQ" if is64 else "IIIBBH"))
    headers = list(table.headers())
    out: list[ElfSymbol] = []
    wanted = _SHT_DYNSYM if dynamic else _SHT_SYMTAB
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in headers:
        if sh_type != wanted:
            continue
        if entsize < sym.size or not 0 <= link < len(headers):
            raise _malformed(path, f"symbol table entry size {entsize} or link {link}")
        strtab = headers[link]
        names = _read_at(stream, strtab[4], strtab[5], "symbol name table", path, end=end)
        rows = _read_at(stream, offset, size, "symbol table", path, end=end)
        for pos in range(0, size - sym.size + 1, entsize):
            fields = sym.unpack_from(rows, pos)
            if is64:
                name_off, info, _other, shndx = fields[:4]
            else:
                name_off, _value, _size, info, _other, shndx = fields
            if name_off == 0 or name_off >= len(names):
                continue
            stop = names.find(b"\0", name_off)
            name = names[name_off : stop if stop >= 0 else len(names)].decode("latin-1")
            out.append(ElfSymbol(name, info >> 4, info & 0xF, shndx))
    return out


def _relfatbin_ranges(
    table: _SectionTable, path: Path, end: int
) -> list[tuple[int, int, int, int]]:
    """``(offset, size, index, flags)`` of every distinct ``__nv_relfatbin`` section.

    Sections are checked against the file; two headers naming the same bytes
    count once, and sections that overlap otherwise are refused, so the bytes
    read never exceed the file's size.
    """
    found: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    for index, (name_off, sh_type, flags, _addr, offset, size, *_rest) in enumerate(
        table.headers()
    ):
        if not _is_relfatbin(table.names, name_off):
            continue
        if sh_type == _SHT_NOBITS:
            msg = f"{path}: section {SECTION_NAME} (index {index}) has no file data"
            raise DeviceCodeError(msg)
        if offset + size > end:
            msg = (
                f"{path}: section {SECTION_NAME} (index {index}) is truncated "
                f"({offset + size - end} bytes past the end of the file)"
            )
            raise DeviceCodeError(msg)
        found.setdefault((offset, size), (offset, size, index, flags))
    ranges = sorted(found.values())
    for before, after in itertools.pairwise(ranges):
        if after[0] < before[0] + before[1]:
            raise _malformed(path, f"sections {before[2]} and {after[2]} ({SECTION_NAME}) overlap")
    return sorted(ranges, key=lambda r: r[2])


def read_relfatbin_sections(path: str | PathLike[str]) -> tuple[FatbinSection, ...]:
    """Every ``__nv_relfatbin`` section of the ELF file at ``path``, split into containers.

    Raises :class:`~skbuild_cudaq.errors.DeviceCodeError` (one line) for a file
    that is not ELF, has no such section, or whose sections are truncated, overlap
    or hold something other than well-formed fatbin containers. Reads each byte
    range once: time and memory are linear in the file's size.
    """
    path = Path(path)
    found: list[tuple[int, int, int, bytes]] = []
    try:
        with path.open("rb") as stream:
            end = _file_size(stream, path)
            table = _section_table(stream, path, end)
            for offset, size, index, flags in _relfatbin_ranges(table, path, end) if table else []:
                data = _read_at(stream, offset, size, f"section {index}", path, end=end)
                found.append((index, offset, flags, data))
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc}"
        raise DeviceCodeError(msg) from None
    except ValueError as exc:  # e.g. a NUL byte in the path
        msg = f"cannot read {path!r}: {exc}"
        raise DeviceCodeError(msg) from None
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
    path = Path(path)
    try:
        with path.open("rb") as stream:
            _file_size(stream, path)
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
