"""The writer of fatbin containers: raw LTO-IR in the layout nvcc writes.

NVRTC emits raw LTO-IR; wrapped here in the container nvcc writes for
``-fatbin -rdc=true code=lto_XX`` (uncompressed), it takes the same embed, reader and
link path as nvcc's output (:mod:`skbuild_cudaq.build._nvrtc`). The format is
:mod:`skbuild_cudaq.fatbin`'s, which reads what this writes.
"""

from __future__ import annotations

import struct

from skbuild_cudaq.fatbin import (
    CONTAINER_HEADER,
    CONTAINER_MAGIC,
    CONTAINER_VERSION,
    ENTRY_HEADER,
    ltoir_code_version,
)

__all__ = ["make_ltoir_container"]

#: Entry flags nvcc writes for LTO-IR on Linux x86-64: 0x1 64-bit, 0x10 Linux.
_LTOIR_FLAGS = 0x11
#: The options nvcc records in an LTO-IR entry (its defaults, which are NVRTC's too).
_LTOIR_OPTIONS = b"-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1 "
_KIND_LTO_IR = 8


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
        options_offset = ENTRY_HEADER.size
        options = (
            struct.pack("<II", options_offset + 8, len(_LTOIR_OPTIONS)) + _LTOIR_OPTIONS + b"\0"
        )
        header_size = options_offset + len(_pad8(options))
        header = ENTRY_HEADER.pack(
            _KIND_LTO_IR,
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
    head = CONTAINER_HEADER.pack(
        CONTAINER_MAGIC, CONTAINER_VERSION, CONTAINER_HEADER.size, len(body)
    )
    return head + body
