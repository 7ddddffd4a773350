"""The shared embedding core (``skbuild_cudaq.build._embed``): commands, generated C, staleness."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import skbuild_cudaq
from skbuild_cudaq.build import _embed
from skbuild_cudaq.build._embed import CompileFlags, Macro


def test_gencode_is_lto_only() -> None:
    assert _embed.gencode_flags(["80", "90"]) == [
        "-gencode",
        "arch=compute_80,code=lto_80",
        "-gencode",
        "arch=compute_90,code=lto_90",
    ]


def test_fatbin_command_carries_target_flags_in_order() -> None:
    flags = CompileFlags(
        include_dirs=("/p/include",),
        macros=(Macro("A", "1"), Macro("B"), Macro("A", undefine=True)),
        std="c++20",
    )
    cmd = _embed.fatbin_command(
        "nvcc",
        Path("/p/k.cu"),
        Path("/b/k.fatbin"),
        architectures=("80",),
        flags=flags,
        depfile=Path("/b/k.fatbin.d"),
    )
    assert cmd[:3] == ["nvcc", "-fatbin", "-rdc=true"]
    assert "arch=compute_80,code=lto_80" in cmd
    assert "-std=c++20" in cmd
    # macros keep their order: the later -U wins, as with the host compiler
    assert cmd.index("-DA=1") < cmd.index("-DB") < cmd.index("-UA")
    includes = [c for c in cmd if c.startswith("-I")]
    assert includes == ["-I/p/include", f"-I{skbuild_cudaq.include_dir()}"]
    assert cmd[-3:] == ["-o", "/b/k.fatbin", "/p/k.cu"]
    assert cmd[cmd.index("-MF") + 1] == "/b/k.fatbin.d"


def test_rdc_object_command_is_position_independent() -> None:
    cmd = _embed.rdc_object_command(
        "nvcc", Path("h.cu"), Path("h.o"), architectures=("80",), flags=CompileFlags()
    )
    assert cmd[:6] == ["nvcc", "-c", "-rdc=true", "-Xcompiler", "-fPIC", "-gencode"]
    assert "-std=c++17" in cmd
    assert "-MF" not in cmd


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "c++17"),
        (["-O3"], "c++17"),
        (["-std=c++20"], "c++20"),
        (["-std=gnu++14", "-std=c++2a"], "c++2a"),
        (["-std=c11"], "c++17"),
        (["/std:c++20"], "c++20"),
    ],
)
def test_std_from_args(args: list[str], expected: str) -> None:
    assert _embed.std_from_args(args) == expected


def test_preprocessor_from_args_both_spellings() -> None:
    macros, includes = _embed.preprocessor_from_args(
        ["-DX=1", "-D", "Y", "-UZ", "-O2", "-I", "inc", "-Iother", "-Wall"]
    )
    assert [m.option() for m in macros] == ["-DX=1", "-DY", "-UZ"]
    assert includes == ["inc", "other"]


def test_asm_incbin_has_the_required_properties(tmp_path: Path) -> None:
    rel = Path(os.path.relpath(tmp_path / "k.fatbin"))
    stmt = _embed.asm_incbin(rel)
    assert stmt.startswith("__asm__(") and stmt.endswith(");")
    assert '.section __nv_relfatbin,\\"aR\\"' in stmt
    assert "\\n.balign 8\\n" in stmt
    assert f'.incbin \\"{(tmp_path / "k.fatbin").resolve()}\\"' in stmt
    assert "\\n.previous" in stmt


def test_asm_incbin_escapes_quotes_and_rejects_newlines(tmp_path: Path) -> None:
    stmt = _embed.asm_incbin(tmp_path / 'we"ird')
    # gas sees we\"ird; in C that is we\\\"ird
    assert 'we\\\\\\"ird' in stmt
    with pytest.raises(_embed.KernelCompileError, match="control characters"):
        _embed.asm_incbin(tmp_path / "new\nline")


def test_embed_source_stubs_are_hidden_and_validated() -> None:
    text = _embed.embed_c_source([Path("/b/k.fatbin")], ["abc_11_h_cu_1", "abc_11_h_cu_1"])
    assert text.count("__asm__(") == 1
    assert text.count("__attribute__((visibility(") == 1  # duplicates collapse
    assert "void __cudaRegisterLinkedBinary_abc_11_h_cu_1(" in text
    with pytest.raises(_embed.KernelCompileError, match="module id"):
        _embed.linked_binary_stubs(["bad id; system()"])


def test_read_depfile_handles_continuations_and_escapes(tmp_path: Path) -> None:
    dep = tmp_path / "k.d"
    dep.write_text("k.fatbin : /a/k.cu \\\n    /a/with\\ space.h \\\n  /b/c.h\n", encoding="utf-8")
    assert _embed.read_depfile(dep) == [Path("/a/k.cu"), Path("/a/with space.h"), Path("/b/c.h")]


def test_is_stale_follows_depfile_and_command(tmp_path: Path) -> None:
    src, header, out, dep = (tmp_path / n for n in ("k.cu", "k.h", "k.fatbin", "k.fatbin.d"))
    for p in (src, header):
        p.write_text("x", encoding="utf-8")
    cmd = ["nvcc", str(src)]
    assert _embed.is_stale(out, cmd, dep, [src])  # nothing built yet
    out.write_bytes(b"fatbin")
    dep.write_text(f"{out}: {src} {header}\n", encoding="utf-8")
    (tmp_path / "k.fatbin.cmd").write_text('["nvcc", "' + str(src) + '"]', encoding="utf-8")
    now = out.stat().st_mtime_ns
    os.utime(src, ns=(now - 10**9, now - 10**9))
    os.utime(header, ns=(now - 10**9, now - 10**9))
    assert not _embed.is_stale(out, cmd, dep, [src])
    assert _embed.is_stale(out, [*cmd, "-DX"], dep, [src])  # another command line
    os.utime(header, ns=(now + 10**9, now + 10**9))
    assert _embed.is_stale(out, cmd, dep, [src])  # a header from the depfile changed
    os.utime(header, ns=(now - 10**9, now - 10**9))
    header.unlink()
    assert _embed.is_stale(out, cmd, dep, [src])  # a prerequisite vanished


def test_write_if_changed_keeps_mtime(tmp_path: Path) -> None:
    path = tmp_path / "e.c"
    assert _embed.write_if_changed(path, "a")
    before = path.stat().st_mtime_ns
    assert not _embed.write_if_changed(path, "a")
    assert path.stat().st_mtime_ns == before
    assert _embed.write_if_changed(path, "b")
    assert path.read_text(encoding="utf-8") == "b"


def _sections(path: Path) -> list[tuple[str, str, int, int]]:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        elf = ELFFile(f)
        return [
            (s.name, s["sh_type"], int(s["sh_flags"]), int(s["sh_addralign"]))
            for s in elf.iter_sections()
        ]


@pytest.mark.toolchain
def test_embed_object_section_flags_and_no_exec_stack(tmp_path: Path) -> None:
    """The generated C, compiled by the host compiler: aR, align 8, .note.GNU-stack present."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no host C compiler")
    fatbin = tmp_path / "k.fatbin"
    fatbin.write_bytes(bytes(range(40)))
    source = tmp_path / "embed.c"
    source.write_text(_embed.embed_c_source([fatbin], ["x_1_h_cu_2"]), encoding="utf-8")
    obj = tmp_path / "embed.o"
    subprocess.run([cc, "-c", "-fPIC", "-O2", str(source), "-o", str(obj)], check=True)
    sections = {name: rest for name, *rest in _sections(obj)}
    sh_type, flags, align = sections["__nv_relfatbin"]
    shf_alloc, shf_gnu_retain, shf_execinstr = 0x2, 0x200000, 0x4
    assert sh_type == "SHT_PROGBITS"
    assert flags & shf_alloc and flags & shf_gnu_retain and not flags & shf_execinstr
    assert align == 8
    gnu_stack = sections[".note.GNU-stack"]
    assert not gnu_stack[1] & shf_execinstr
    from elftools.elf.elffile import ELFFile

    with obj.open("rb") as f:
        data = ELFFile(f).get_section_by_name("__nv_relfatbin").data()
        assert data == fatbin.read_bytes()


@pytest.mark.toolchain
def test_module_ids_read_from_an_rdc_object(tmp_path: Path, nvcc: Path) -> None:
    source = tmp_path / "h.cu"
    source.write_text(
        "#include <cudaq/realtime/unified_dispatch_device.cuh>\n"
        "__device__ int h(const void *, uint32_t, void *, uint32_t, uint32_t *n)"
        " { *n = 0; return 0; }\n"
        "CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(h);\n",
        encoding="utf-8",
    )
    obj = tmp_path / "h.o"
    cmd = _embed.rdc_object_command(nvcc, source, obj, architectures=("80",), flags=CompileFlags())
    _embed.run_compile(cmd, obj, "nvcc h.cu")
    ids = _embed.linked_binary_module_ids([obj])
    assert len(ids) == 1 and "h_cu" in ids[0]
    assert not _embed.is_stale(obj, cmd, None, [source])
    assert _embed.cudart_static_library(nvcc).name == "libcudart_static.a"
