"""Forges small ELF64 files and fatbin containers for the reader's hostile-input tests.

Independent of ``skbuild_cudaq.fatbin``: it writes the layouts the reader
decodes (ELF header, section header table, section name table; fatbin container
and entry headers) with whatever sizes and offsets a test asks for.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONTAINER_MAGIC = 0xBA55ED50
EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # 64 bytes
SHDR = struct.Struct("<IIQQQQIIQQ")  # 64 bytes
ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # 64 bytes
SHT_PROGBITS, SHT_STRTAB, SHT_NOBITS = 1, 3, 8
SHF_ALLOC = 0x2
COMPRESSED = 0x8000


@dataclass
class Shdr:
    """One section header; ``offset`` is relative to the blob (which starts at file offset 64)."""

    name: str
    offset: int = 0
    size: int = 0
    type: int = SHT_PROGBITS
    flags: int = SHF_ALLOC
    absolute: bool = False  #: ``offset`` is a file offset, not relative to the blob


def forge_elf(blob: bytes, headers: list[Shdr], **ehdr: int) -> bytes:
    """An ELF64 LE shared object: header, ``blob``, name table, section header table.

    ``ehdr`` overrides fields of the ELF header (``shoff``, ``shentsize``,
    ``shnum``, ``shstrndx``) after the layout is computed.
    """
    names = b"\0"
    offsets: dict[str, int] = {}
    for name in [h.name for h in headers] + [".shstrtab"]:
        if name not in offsets:
            offsets[name] = len(names)
            names += name.encode() + b"\0"
    base = EHDR.size
    strtab_at = base + len(blob)
    table_at = (strtab_at + len(names) + 7) // 8 * 8
    rows = [SHDR.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)]
    for h in headers:
        at = h.offset if h.absolute else base + h.offset
        rows.append(SHDR.pack(offsets[h.name], h.type, h.flags, 0, at, h.size, 0, 0, 8, 0))
    rows.append(
        SHDR.pack(offsets[".shstrtab"], SHT_STRTAB, 0, 0, strtab_at, len(names), 0, 0, 1, 0)
    )
    fields = {
        "shoff": table_at,
        "shentsize": SHDR.size,
        "shnum": len(rows),
        "shstrndx": len(rows) - 1,
    }
    fields.update(ehdr)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header = EHDR.pack(
        ident, 3, 62, 1, 0, 0, fields["shoff"], 0, EHDR.size, 56, 0,
        fields["shentsize"], fields["shnum"], fields["shstrndx"],
    )  # fmt: skip
    pad = b"\0" * (table_at - strtab_at - len(names))
    return header + blob + names + pad + b"".join(rows)


def entry(
    code: bytes = b"\x01" * 16,
    *,
    kind: int = 8,
    arch: int = 80,
    header_size: int = 64,
    payload_size: int | None = None,
    compressed_size: int = 0,
    options: int = 0,
    name: tuple[int, int] = (0, 0),
    flags: int = 0x11,
    tail: bytes = b"",
) -> bytes:
    """One entry: a header (64 bytes, then ``tail`` up to ``header_size``) and ``code``."""
    header = ENTRY.pack(
        kind, 0x0101, header_size,
        len(code) if payload_size is None else payload_size,
        compressed_size, options, 65, 1, arch, name[0], name[1], flags, 0, len(code),
    )  # fmt: skip
    # the header is padded to ``header_size`` unless that is a lie too big to write
    extra = tail.ljust(max(header_size - ENTRY.size, 0), b"\0") if header_size <= 4096 else tail
    return header + extra + code


def container(*entries: bytes, version: int = 1, header_size: int = 16) -> bytes:
    payload = b"".join(entries)
    head = struct.pack("<IHHQ", CONTAINER_MAGIC, version, header_size, len(payload))
    return head + b"\0" * (header_size - 16) + payload
