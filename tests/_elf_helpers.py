"""Minimal readers for the integration tests (independent of skbuild_cudaq.fatbin).

Reads every ``__nv_relfatbin`` section of an ELF file with pyelftools and splits
it into fatbin containers (16-byte header: u32 magic 0xBA55ED50, u16 version,
u16 header size, u64 payload size; containers back to back, zero padding
tolerated), and reports the ``PT_GNU_STACK`` flags.
"""

from __future__ import annotations

import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile

FATBIN_MAGIC = 0xBA55ED50
SECTION = "__nv_relfatbin"
PF_X = 0x1


def relfatbin_sections(path: Path) -> list[bytes]:
    """The data of every section named ``__nv_relfatbin``."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        return [bytes(s.data()) for s in elf.iter_sections() if s.name == SECTION]


def split_containers(data: bytes) -> list[bytes]:
    """Fatbin containers of one section, in order; raises on anything else."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] == struct.pack("<I", FATBIN_MAGIC):
            _, _, header_size, payload = struct.unpack_from("<IHHQ", data, pos)
            end = pos + header_size + payload
            if end > len(data):
                raise ValueError(f"container at {pos} runs past the section ({end} > {len(data)})")
            out.append(data[pos:end])
            pos = end
        elif data[pos] == 0:
            pos += 1  # alignment padding between containers
        else:
            raise ValueError(f"unexpected byte {data[pos]:#x} at offset {pos}")
    return out


def relfatbin_containers(path: Path) -> list[bytes]:
    """Every fatbin container in every ``__nv_relfatbin`` section of ``path``."""
    return [c for section in relfatbin_sections(path) for c in split_containers(section)]


def gnu_stack_flags(path: Path) -> int | None:
    """``p_flags`` of the ``PT_GNU_STACK`` header, or None when there is none."""
    with path.open("rb") as f:
        for segment in ELFFile(f).iter_segments():
            if segment["p_type"] == "PT_GNU_STACK":
                return int(segment["p_flags"])
    return None
