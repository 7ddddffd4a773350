"""The __nv_relfatbin reader: containers, entries, every section, errors."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.errors import DeviceCodeError
from skbuild_cudaq.fatbin import (
    CONTAINER_MAGIC,
    read_fatbin_file,
    read_relfatbin_sections,
    split_containers,
)


def _entry(kind: int, arch: int, code: bytes, version: tuple[int, int] = (1, 65)) -> bytes:
    header = struct.pack(
        "<HHIQIIHHIIIQQQ",
        kind,
        0x0101,
        64,
        len(code),
        0,
        0,
        version[1],
        version[0],
        arch,
        0,
        0,
        0x11,
        0,
        len(code),
    )
    return header + code


def _container(*entries: bytes) -> bytes:
    payload = b"".join(entries)
    return struct.pack("<IHHQ", CONTAINER_MAGIC, 1, 16, len(payload)) + payload


def test_split_containers_skips_zero_padding_and_lists_entries() -> None:
    a = _container(_entry(8, 80, b"\x01" * 16), _entry(2, 90, b"\x02" * 8, (0, 0)))
    b = _container(_entry(1, 100, b"\x03" * 24, (9, 0)))
    data = a + b"\0" * 8 + b + b"\0" * 16
    containers = split_containers(data, "test")
    assert [c.offset for c in containers] == [0, len(a) + 8]
    assert [c.data for c in containers] == [a, b]
    kinds = [(e.kind, e.sm, e.code_version_str) for c in containers for e in c.entries]
    assert kinds == [
        ("lto-ir", "sm_80", "1.65"),
        ("cubin", "sm_90", "0.0"),
        ("ptx", "sm_100", "9.0"),
    ]
    assert not containers[0].entries[0].compressed


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x01" * 32, "no fatbin container at offset 0"),
        (struct.pack("<IHHQ", CONTAINER_MAGIC, 1, 16, 4096) + b"\x01" * 64, "truncated"),
        (_container(_entry(8, 80, b"\x01" * 16))[:-8] + b"\0" * 0, "truncated"),
        (b"\0" * 8 + struct.pack("<IHH", CONTAINER_MAGIC, 1, 16), "truncated"),
    ],
)
def test_garbage_and_truncation_raise_one_clear_line(data: bytes, words: str) -> None:
    with pytest.raises(DeviceCodeError, match=words) as info:
        split_containers(data, "where")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("where")


def test_entry_running_past_its_container_is_reported() -> None:
    entry = _entry(8, 80, b"\x01" * 16)
    bad = entry[:8] + struct.pack("<Q", 4096) + entry[16:]
    with pytest.raises(DeviceCodeError, match="malformed fatbin entry"):
        split_containers(_container(bad), "x")


@pytest.mark.toolchain
def test_reads_every_container_of_a_linked_module(bins: DeviceBinaries) -> None:
    sections = read_relfatbin_sections(bins.app)
    assert len(sections) == 1
    section = sections[0]
    assert section.flags & 0x2  # SHF_ALLOC
    assert len(section.containers) == 3  # incbin'd kernel + two nvcc -rdc objects
    for container in section.containers:
        assert [(e.kind, e.sm) for e in container.entries] == [("lto-ir", "sm_80")]
        assert container.entries[0].compressed  # nvcc 13 compresses by default
        assert container.data[:4] == struct.pack("<I", CONTAINER_MAGIC)
    # the incbin'd container is byte for byte the fatbin nvcc wrote
    assert read_fatbin_file(bins.dispatcher_fatbin)[0].data in {c.data for c in section.containers}


@pytest.mark.toolchain
def test_reads_every_section_of_that_name(bins: DeviceBinaries) -> None:
    sections = read_relfatbin_sections(bins.two_sections)
    assert len(sections) == 2
    assert sorted(len(s.containers) for s in sections) == [1, 1]
    assert {s.flags & 0x2 for s in sections} == {0, 0x2}


@pytest.mark.toolchain
def test_binary_without_device_code(bins: DeviceBinaries) -> None:
    with pytest.raises(DeviceCodeError, match="no __nv_relfatbin section"):
        read_relfatbin_sections(bins.plain)


def test_not_an_elf_file(tmp_path: Path) -> None:
    path = tmp_path / "x.so"
    path.write_bytes(b"this is not ELF" * 10)
    with pytest.raises(DeviceCodeError, match="not an ELF file"):
        read_relfatbin_sections(path)
    with pytest.raises(DeviceCodeError, match="cannot read"):
        read_relfatbin_sections(tmp_path / "absent.so")


@pytest.mark.toolchain
def test_truncated_file(bins: DeviceBinaries, tmp_path: Path) -> None:
    data = bins.app.read_bytes()
    section = read_relfatbin_sections(bins.app)[0]
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[: section.file_offset + 100])
    with pytest.raises(DeviceCodeError):
        read_relfatbin_sections(cut)


@pytest.mark.toolchain
def test_garbage_inside_the_section(bins: DeviceBinaries, tmp_path: Path) -> None:
    data = bytearray(bins.app.read_bytes())
    section = read_relfatbin_sections(bins.app)[0]
    second = section.file_offset + section.containers[1].offset
    data[second : second + 4] = b"JUNK"
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(
        DeviceCodeError, match=f"no fatbin container at offset {section.containers[1].offset}"
    ):
        read_relfatbin_sections(bad)


@pytest.mark.toolchain
def test_section_reader_agrees_with_pyelftools(bins: DeviceBinaries) -> None:
    from elftools.elf.elffile import ELFFile

    from skbuild_cudaq._elf import elf_sections

    for binary in (bins.app, bins.two_sections, bins.plain, bins.root / "handlers_a.o"):
        with binary.open("rb") as stream:
            ours = [
                (s.index, s.name, s.flags, s.offset, s.size) for s in elf_sections(stream, binary)
            ]
        with binary.open("rb") as stream:
            theirs = [
                (i, s.name, s["sh_flags"], s["sh_offset"], s["sh_size"])
                for i, s in enumerate(ELFFile(stream).iter_sections())
            ]
        assert ours == theirs
