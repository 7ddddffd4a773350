"""The reader on hostile input: every size and offset it decodes is checked, each byte range is
read once, and every malformed file is one ``DeviceCodeError`` line (plain tier: forged files)."""

from __future__ import annotations

import os
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from _elf_forge import (
    COMPRESSED,
    EHDR,
    SHDR,
    SHT_NOBITS,
    Shdr,
    container,
    entry,
    forge_elf,
)

from skbuild_cudaq.errors import DeviceCodeError
from skbuild_cudaq.fatbin import read_relfatbin_sections, split_containers

SECTION = "__nv_relfatbin"
OPTIONS = struct.pack("<II", 72, 8) + b"-O3 -ftz"  # the options record nvcc writes, at 64
#: A hang guard, never a figure (tests/test_no_timing.py): what no working code comes near.
HANG_GUARD_S = 60.0


def _one_line_error(call: object, words: str) -> str:
    with pytest.raises(DeviceCodeError, match=words) as info:
        call()  # type: ignore[operator]
    text = str(info.value)
    assert "\n" not in text
    return text


# --- entry and container headers -------------------------------------------------------


def test_well_formed_entries_with_options_and_compression_pass() -> None:
    good = container(
        entry(header_size=80, options=64, tail=OPTIONS),
        entry(b"\x02" * 24, compressed_size=20, flags=0x11 | COMPRESSED),
    )
    (only,) = split_containers(good, "x")
    assert [e.compressed for e in only.entries] == [False, True]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        # the crashes: nvJitLink trusted these
        (entry(compressed_size=4096, flags=0x11 | COMPRESSED), "compressed size 4096 outside"),
        (entry(header_size=80, options=0x7FFFFFF0, tail=OPTIONS), "options record at 2147483632"),
        (entry(compressed_size=0, flags=0x11 | COMPRESSED), "compressed size 0 outside"),
        (entry(compressed_size=17), "compressed size 17 past the 16 bytes"),
        (entry(header_size=80, options=76, tail=OPTIONS), "options record at 76"),
        (entry(header_size=80, options=8, tail=OPTIONS), "options record at 8 outside"),
        (
            entry(header_size=80, options=64, tail=struct.pack("<II", 72, 0xFFFFFFFF)),
            "option string at 72 .4294967295 bytes. outside",
        ),
        (entry(header_size=80, options=64, tail=struct.pack("<II", 4, 8)), "option string at 4"),
        (entry(name=(64, 200)), "name at 64 .200 bytes. outside the 64-byte header"),
        (entry(name=(0, 5)), "name at 0"),
        (entry(header_size=60), "header size 60"),
        (entry(header_size=68), "header size 68"),
        (entry(header_size=0xFFFFFFF8), "header 4294967288 bytes"),
        (entry(payload_size=2**64 - 1), "code 18446744073709551615 bytes"),
    ],
    ids=lambda v: v.split(" outside")[0].split(" past")[0] if isinstance(v, str) else "",
)
def test_entry_sizes_and_offsets_are_checked(bad: bytes, words: str) -> None:
    text = _one_line_error(lambda: split_containers(container(bad), "where"), words)
    assert text.startswith("where, container at offset 0: malformed fatbin entry at offset 16")


def test_data_after_zero_padding_inside_a_container_is_refused() -> None:
    hidden = container(entry(), b"\0" * 64, entry())
    _one_line_error(lambda: split_containers(hidden, "x"), r"offset 96 \(zero header\)")
    # zero padding at the end of a container is fine
    assert len(split_containers(container(entry(), b"\0" * 24), "x")[0].entries) == 1


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (container(entry(), version=2), "unsupported fatbin container at offset 0 .version 2"),
        (container(entry(), header_size=32), "header 32 bytes; expected version 1, 16 bytes"),
        (container(entry(), header_size=0), "header 0 bytes"),
        (container(), "the container holds no entry"),
        (container(b"\0" * 64), "the container holds no entry"),
        (struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 2**64 - 1), "needs 18446744073709551631 bytes"),
    ],
    ids=["version-2", "header-32", "header-0", "empty", "zero-entry", "huge-payload"],
)
def test_container_headers_are_checked(data: bytes, words: str) -> None:
    _one_line_error(lambda: split_containers(data, "where"), words)


# --- ELF section headers ---------------------------------------------------------------


def _write(tmp_path: Path, data: bytes, name: str = "m.so") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


GOOD = container(entry(), entry(b"\x03" * 8, arch=90))


def test_forged_module_reads(tmp_path: Path) -> None:
    path = _write(tmp_path, forge_elf(GOOD, [Shdr(SECTION, 0, len(GOOD))]))
    (section,) = read_relfatbin_sections(path)
    assert [c.data for c in section.containers] == [GOOD]


@pytest.mark.parametrize(
    ("ehdr", "words"),
    [
        ({"shoff": 2**63}, r"truncated ELF file \(section header at offset 9223372036854775808"),
        ({"shoff": 2**64 - 1}, "truncated ELF file"),
        ({"shentsize": 0xFFFF}, r"section header table at offset \d+ runs past the end"),
        ({"shentsize": 8}, r"malformed ELF file \(section header size 8\)"),
        ({"shnum": 0xFFFE}, "section header table"),
        ({"shstrndx": 200}, r"malformed ELF file \(section name table index 200\)"),
    ],
)
def test_elf_header_fields_are_checked_against_the_file(
    tmp_path: Path, ehdr: dict[str, int], words: str
) -> None:
    path = _write(tmp_path, forge_elf(GOOD, [Shdr(SECTION, 0, len(GOOD))], **ehdr))
    _one_line_error(lambda: read_relfatbin_sections(path), words)


def test_extended_section_count_is_bounded_by_the_file(tmp_path: Path) -> None:
    """``e_shnum == 0``: the count is section 0's ``sh_size``; 2**60 must not be allocated."""
    data = bytearray(forge_elf(GOOD, [Shdr(SECTION, 0, len(GOOD))], shnum=0))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<Q", data, shoff + 32, 2**60)  # section 0's sh_size
    path = _write(tmp_path, bytes(data))
    _one_line_error(lambda: read_relfatbin_sections(path), "section header table at offset")


@pytest.mark.parametrize(
    ("header", "words"),
    [
        (Shdr(SECTION, 2**64 - 16, 16, absolute=True), r"__nv_relfatbin \(index 1\) is truncated"),
        (Shdr(SECTION, 0, 2**63), "is truncated"),
        (Shdr(SECTION, 0, len(GOOD), type=SHT_NOBITS), "has no file data"),
        (Shdr(SECTION, 0, 2**32, absolute=True), "is truncated"),
    ],
)
def test_section_ranges_are_checked_against_the_file(
    tmp_path: Path, header: Shdr, words: str
) -> None:
    path = _write(tmp_path, forge_elf(GOOD, [header]))
    _one_line_error(lambda: read_relfatbin_sections(path), words)


def test_name_table_without_file_data(tmp_path: Path) -> None:
    data = bytearray(forge_elf(GOOD, [Shdr(SECTION, 0, len(GOOD))]))
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    struct.pack_into("<I", data, shoff + 2 * SHDR.size + 4, SHT_NOBITS)  # .shstrtab's type
    path = _write(tmp_path, bytes(data))
    _one_line_error(lambda: read_relfatbin_sections(path), "section name table has no file data")


def test_overlapping_sections_are_refused(tmp_path: Path) -> None:
    blob = GOOD + GOOD
    headers = [Shdr(SECTION, 0, len(blob)), Shdr(SECTION, len(GOOD), len(GOOD))]
    path = _write(tmp_path, forge_elf(blob, headers))
    _one_line_error(lambda: read_relfatbin_sections(path), r"sections 1 and 2 .* overlap")


def test_repeated_headers_at_the_same_bytes_are_read_once(tmp_path: Path) -> None:
    headers = [Shdr(SECTION, 0, len(GOOD)) for _ in range(1000)]
    path = _write(tmp_path, forge_elf(GOOD, headers))
    (section,) = read_relfatbin_sections(path)
    assert section.index == 1
    assert len(section.containers) == 1


def test_a_5mb_file_of_repeated_headers_costs_linear_time_and_memory(tmp_path: Path) -> None:
    """The issue's case: a 5 MB section named by tens of thousands of headers cost 5 GB and 20 s."""
    big = container(*(entry(bytes([i % 251 + 1]) * 4096) for i in range(1200)))
    headers = [Shdr(SECTION, 0, len(big)) for _ in range(20_000)]
    data = forge_elf(big, headers)
    path = _write(tmp_path, data)
    size = len(data)
    assert size > 5_000_000
    tracemalloc.start()
    try:
        started = time.perf_counter()
        (section,) = read_relfatbin_sections(path)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(section.containers) == 1
    assert len(section.containers[0].entries) == 1200
    assert peak < 3 * size, f"peak {peak} bytes for a {size}-byte file"
    # linear memory is the behaviour (the 5 GB); the time is only a hang guard
    # (~0.2 s here, 20 s in the issue): how fast the reader is belongs in bench/
    assert elapsed < HANG_GUARD_S, f"{elapsed:.1f} s"


def test_many_distinct_overlapping_ranges_are_refused_early(tmp_path: Path) -> None:
    """Headers at every 8 bytes of one big section: refused, never read N times."""
    big = container(entry(b"\x01" * 1_000_000))
    headers = [Shdr(SECTION, 8 * i, len(big) - 8 * i) for i in range(5000)]
    path = _write(tmp_path, forge_elf(big, headers))
    tracemalloc.start()
    try:
        _one_line_error(lambda: read_relfatbin_sections(path), "overlap")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * path.stat().st_size


def test_long_and_unterminated_section_names(tmp_path: Path) -> None:
    """Names are compared in constant time; a name table without NULs costs no more."""
    from skbuild_cudaq._elf import MAX_SECTION_NAME, elf_sections

    long_name = "x" * 100_000
    headers = [Shdr(long_name, 0, 8) for _ in range(2000)] + [Shdr(SECTION, 0, len(GOOD))]
    path = _write(tmp_path, forge_elf(GOOD, headers))
    (section,) = read_relfatbin_sections(path)
    assert len(section.containers) == 1
    with path.open("rb") as stream:
        names = [s.name for s in elf_sections(stream, path)]
    assert len(names[1]) == MAX_SECTION_NAME
    assert names[-2] == SECTION


def test_not_a_regular_file_and_bad_paths(tmp_path: Path) -> None:
    _one_line_error(lambda: read_relfatbin_sections(os.devnull), "not a regular file")
    _one_line_error(lambda: read_relfatbin_sections(tmp_path), "a directory, not a regular file")
    _one_line_error(lambda: read_relfatbin_sections("a\0b.so"), "cannot read")
    _one_line_error(lambda: read_relfatbin_sections("x" * 300 + ".so"), "cannot read")


@pytest.mark.parametrize("cut", [3, 16, 40, EHDR.size, 200])
def test_truncated_forged_module(tmp_path: Path, cut: int) -> None:
    data = forge_elf(GOOD, [Shdr(SECTION, 0, len(GOOD))])
    path = _write(tmp_path, data[:cut])
    with pytest.raises(DeviceCodeError) as info:
        read_relfatbin_sections(path)
    assert "\n" not in str(info.value)


def test_bad_paths_through_the_run_time_and_fatbin_files(tmp_path: Path) -> None:
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.link.device_code import bridge_files, device_code_of

    _one_line_error(lambda: device_code_of("a\0b.so"), "cannot read")
    _one_line_error(lambda: bridge_files(["a\0b.fatbin"]), "cannot read")
    _one_line_error(lambda: read_fatbin_file(os.devnull), "not a regular file")  # never /dev/zero
    _one_line_error(lambda: read_fatbin_file("a\0b.fatbin"), "cannot read")
    loop = tmp_path / "loop.so"
    loop.symlink_to(loop)
    _one_line_error(lambda: device_code_of(loop), "cannot read")
