"""A small reader of ELF files: section headers, symbols, the bytes of named sections.

What the package needs of an ELF file (an extension module, a linked cubin), read without
pyelftools: a warm start and the first answer cannot afford importing it (25-100 ms), and
pyelftools cross-checks this reader in the tests. The input is not trusted: every offset
and size is checked against the file's size before anything is read, and a malformed file
is one :class:`~skbuild_cudaq.errors.DeviceCodeError` line, in time and memory linear in
the file's size. Never imports ``cuda.*``. The fatbin format in those sections is
:mod:`skbuild_cudaq.fatbin`.
"""

from __future__ import annotations

import itertools
import os
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

from skbuild_cudaq.errors import DeviceCodeError

__all__ = [
    "MAX_SECTION_NAME",
    "ElfSection",
    "ElfSymbol",
    "elf_sections",
    "elf_symbols",
    "file_size",
    "named_path",
    "open_regular",
    "read_at",
    "read_named_sections",
]

_SHT_NOBITS = 8
_SHN_XINDEX = 0xFFFF
#: Section names are read up to this many bytes (only a few names matter).
MAX_SECTION_NAME = 4096


def _is_named(names: bytes, offset: int, name: bytes) -> bool:
    """Whether the name at ``offset`` is ``name`` (constant time, whatever follows)."""
    stop = offset + len(name)
    return names.startswith(name, offset) and names[stop : stop + 1] in (b"", b"\0")


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


def read_at(stream: BinaryIO, offset: int, size: int, what: str, path: Path, *, end: int) -> bytes:
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
        head = read_at(stream, 0x28, 0x18, "ELF header", path, end=end)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "QIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIQQQQIIQQ")
    else:
        head = read_at(stream, 0x20, 0x14, "ELF header", path, end=end)
        shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = struct.unpack(
            order + "IIHHHHHH", head
        )
        shdr = struct.Struct(order + "IIIIIIIIII")
    if shoff == 0:
        return None
    if shentsize < shdr.size:
        raise _malformed(path, f"section header size {shentsize}")
    first = shdr.unpack(read_at(stream, shoff, shdr.size, "section header", path, end=end))
    if shnum == 0:  # extended numbering: the count is in section 0's sh_size
        shnum = first[5]
    if shstrndx == _SHN_XINDEX:
        shstrndx = first[6]
    # the table must lie inside the file: its size is then bounded by the file's
    rows = read_at(stream, shoff, shnum * shentsize, "section header table", path, end=end)
    if not 0 <= shstrndx < shnum:
        raise _malformed(path, f"section name table index {shstrndx}")
    names_header = shdr.unpack_from(rows, shstrndx * shentsize)
    if names_header[1] == _SHT_NOBITS:
        raise _malformed(path, "section name table has no file data")
    names = read_at(stream, names_header[4], names_header[5], "section name table", path, end=end)
    return _SectionTable(rows, shentsize, shnum, shdr, names)


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def named_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a :class:`~pathlib.Path`; an empty one (which ``Path`` would read as the
    current directory) is a :class:`~skbuild_cudaq.errors.DeviceCodeError` line."""
    if not os.fspath(path):
        msg = "'': an empty path names no file: pass the path of a file"
        raise DeviceCodeError(msg)
    return Path(path)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading, only when it is a regular file (links followed).

    What is not -- an empty path, a directory, a FIFO (whose open would wait for a
    writer), a device such as ``/dev/zero`` (endless), a socket -- is one
    :class:`~skbuild_cudaq.errors.DeviceCodeError` line before a byte is read: the open
    never blocks (``O_NONBLOCK``) and the file's type is checked on the descriptor
    opened, not on a name that may change. ``OSError`` (no such file, no permission) and
    ``ValueError`` (a NUL byte) are the caller's to report.
    """
    text = os.fspath(named_path(path))
    fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            msg = f"{text}: {_kind(mode)}, not a regular file: refusing to read it"
            raise DeviceCodeError(msg)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_size(stream: BinaryIO, path: Path) -> int:
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
    table = _section_table(stream, path, file_size(stream, path))
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
    end = file_size(stream, path)
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
        names = read_at(stream, strtab[4], strtab[5], "symbol name table", path, end=end)
        rows = read_at(stream, offset, size, "symbol table", path, end=end)
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


def _named_ranges(
    table: _SectionTable, path: Path, end: int, name: str, *, skip_empty: bool = False
) -> list[tuple[int, int, int, int]]:
    """``(offset, size, index, flags)`` of every distinct section called ``name``.

    Sections are checked against the file; two headers naming the same bytes
    count once, and sections that overlap otherwise are refused, so the bytes
    read never exceed the file's size. A section with no file data (``SHT_NOBITS``) is
    refused, or left out with ``skip_empty``.
    """
    found: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    wanted = name.encode()
    for index, (name_off, sh_type, flags, _addr, offset, size, *_rest) in enumerate(
        table.headers()
    ):
        if not _is_named(table.names, name_off, wanted):
            continue
        if sh_type == _SHT_NOBITS:
            if skip_empty:
                continue
            msg = f"{path}: section {name} (index {index}) has no file data"
            raise DeviceCodeError(msg)
        if offset + size > end:
            msg = (
                f"{path}: section {name} (index {index}) is truncated "
                f"({offset + size - end} bytes past the end of the file)"
            )
            raise DeviceCodeError(msg)
        found.setdefault((offset, size), (offset, size, index, flags))
    ranges = sorted(found.values())
    for before, after in itertools.pairwise(ranges):
        if after[0] < before[0] + before[1]:
            raise _malformed(path, f"sections {before[2]} and {after[2]} ({name}) overlap")
    return sorted(ranges, key=lambda r: r[2])


def read_named_sections(path: Path, name: str) -> list[tuple[int, int, int, bytes]]:
    """``(index, file offset, flags, bytes)`` of every distinct section called ``name`` of the
    ELF file at ``path``, in section order (none: an empty list).

    Sections are checked against the file (no file data, truncated, overlapping: a
    :class:`~skbuild_cudaq.errors.DeviceCodeError` line); each byte range is read once, so
    time and memory are linear in the file's size. ``OSError`` and ``ValueError`` (a path
    that cannot name a file) are the caller's to report.
    """
    return read_sections(path, (name,))[name]


def read_sections(
    path: Path, names: Sequence[str], *, may_be_empty: Sequence[str] = ()
) -> dict[str, list[tuple[int, int, int, bytes]]]:
    """:func:`read_named_sections` of several names, the file opened (a regular file only:
    :func:`open_regular`) and its section table read once: by name, ``(index, file offset,
    flags, bytes)`` of each section so called. A section of a name in ``may_be_empty`` that
    has no file data is left out (the others' are refused)."""
    found: dict[str, list[tuple[int, int, int, bytes]]] = {name: [] for name in names}
    with open_regular(path) as stream:
        end = file_size(stream, path)
        table = _section_table(stream, path, end)
        for name in names if table else ():
            assert table is not None
            ranges = _named_ranges(table, path, end, name, skip_empty=name in may_be_empty)
            for offset, size, index, flags in ranges:
                data = read_at(stream, offset, size, f"section {index}", path, end=end)
                found[name].append((index, offset, flags, data))
    return found
