"""Build records that name each fatbin container's kernels and handlers, and ``inspect``.

A real CMake build (no GPU) of a module with a side-compiled dispatch kernel (two
architectures), a side-compiled handler source and a handler source compiled by nvcc as a
source of the extension: ``inspect`` (text and ``--json``) names every kernel and exported
handler per container with its source, nvcc version and architectures. A module without
records (the link tests' binaries) still inspects, its containers unnamed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _elf_helpers import PF_X, gnu_stack_flags
from _json_keys import assert_documented
from elftools.elf.elffile import ELFFile
from gpu_kernels.testbins import DeviceBinaries

import skbuild_cudaq
from skbuild_cudaq._records import MAGIC, SECTION, asm_record, read_records
from skbuild_cudaq.build._device_info import names_from_ptx, nvcc_version, write_record
from skbuild_cudaq.errors import DeviceCodeError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SRC = ROOT / "example_app" / "src"

PTX = """
.version 9.0
.target sm_80
.extern .func  (.param .b32 func_retval0) cudaq_dev_rx_poll
.visible .func  (.param .b32 func_retval0) _Z4echoPKvjPvjPj(
.visible .global .align 8 .u64 cudaq_handler_echo = _Z4echoPKvjPvjPj;
.global .align 8 .u64 cudaq_handler_hidden_one;
.visible .entry my_dispatcher(
.visible .entry _Z10cxx_kernelPi(
.entry internal_kernel(
"""


def test_names_from_ptx() -> None:
    kernels, handlers = names_from_ptx(PTX)
    assert kernels == ["my_dispatcher", "_Z10cxx_kernelPi"]
    assert handlers == ["echo"]


def test_malformed_record_section_is_an_error(tmp_path: Path) -> None:
    from skbuild_cudaq._records import records_in as _records_in

    good = MAGIC + (1).to_bytes(4, "little") + (2).to_bytes(4, "little") + b"{}" + bytes(6)
    assert _records_in(good + bytes(8) + good, "x") == [{}, {}]
    with pytest.raises(DeviceCodeError, match="malformed record at offset 0"):
        _records_in(b"NOTMAGIC" + bytes(8), "x")
    with pytest.raises(DeviceCodeError, match="malformed record"):
        _records_in(MAGIC + (1).to_bytes(4, "little") + (99).to_bytes(4, "little"), "x")


def test_an_nvrtc_built_record_names_nvrtc(tmp_path: Path) -> None:
    """What the CMake package's NVRTC path writes (``side --nvrtc VERSION``): the record names
    NVRTC and its version, and ``inspect`` labels the container with it -- not with an nvcc
    whose version it could not read."""
    from skbuild_cudaq.build._container import make_ltoir_container
    from skbuild_cudaq.build._device_info import main
    from skbuild_cudaq.cli._inspect import render_text

    fatbin = tmp_path / "k.fatbin"
    fatbin.write_bytes(make_ltoir_container([(80, b"\xedCN\x7f\x01\x41" + bytes(58))]))
    ptx = tmp_path / "k.ptx"
    ptx.write_text(".visible .entry my_kernel(\n)\n")
    out = tmp_path / "k.json"
    source = tmp_path / "src" / "k.cu"
    argv = ["side", "--fatbin", str(fatbin), "--ptx", str(ptx), "--source", str(source),
            "--project-dir", str(tmp_path), "--nvrtc", "13.0", "--arch", "80",
            "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    record = json.loads(out.read_text())
    assert record["compiler"] == "NVRTC 13.0" and record["kernels"] == ["my_kernel"]
    doc = {
        "file": "m.so",
        "sections": [
            {"index": 1, "file_offset": 0, "size": 0, "flags": 0,
             "containers": [{"offset": 0, "size": 0, "entries": [], "record": record}]}
        ],
    }  # fmt: skip
    text = render_text(doc)
    assert "source   src/k.cu (side-compiled, NVRTC 13.0, sm_80)" in text, text
    assert "nvcc" not in text


def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", *args],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.toolchain
def test_a_record_embedded_by_the_generated_asm(tmp_path: Path) -> None:
    """asm_record's section: flags aR, 8-aligned, framed, read back; no executable stack."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    record = {"source": "src/k.cu", "kernels": ["k"], "handlers": [], "containers": ["ab"]}
    json_path = tmp_path / "k.fatbin.json"
    assert write_record(json_path, record)
    assert not write_record(json_path, record)  # unchanged: not rewritten (no rebuild)
    (tmp_path / "r.c").write_text(asm_record(json_path) + "\nint f(void) { return 0; }\n")
    so = tmp_path / "r.so"
    proc = subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,--gc-sections", "-o", str(so), str(tmp_path / "r.c")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert read_records(so) == [record]
    with so.open("rb") as f:
        (section,) = [s for s in ELFFile(f).iter_sections() if s.name == SECTION]
        assert section["sh_flags"] & 0x2  # SHF_ALLOC
        assert section["sh_addralign"] == 8
    flags = gnu_stack_flags(so)
    assert flags is not None and not flags & PF_X  # no executable stack


# ---------------------------------------------------------------------------------------------
# A real build through the CMake package
# ---------------------------------------------------------------------------------------------
SIDE_HANDLERS = """#include <cudaq/realtime/unified_dispatch_device.cuh>
__device__ int side_echo(const void *args, uint32_t arg_len, void *result,
                         uint32_t max_result_len, uint32_t *result_len) {
  (void)args; (void)arg_len; (void)result; (void)max_result_len;
  *result_len = 0;
  return 0;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(side_echo);
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, nvcc: Path) -> Path:
    cmake, ninja = shutil.which("cmake"), shutil.which("ninja") or shutil.which("make")
    if cmake is None or ninja is None:
        pytest.skip("cmake and ninja/make are needed")
    root = tmp_path_factory.mktemp("device-info")
    src = root / "project"
    (src / "src").mkdir(parents=True)
    for name in ("single_thread_dispatcher.cu", "handlers.cu"):
        shutil.copy(EXAMPLE_SRC / name, src / "src" / name)
    (src / "src" / "side_handlers.cu").write_text(SIDE_HANDLERS)
    (src / "src" / "mod.c").write_text("int device_info_mod(void) { return 0; }\n")
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(info LANGUAGES C CUDA)\n"
        "add_library(mod MODULE src/mod.c)\n"
        'set_target_properties(mod PROPERTIES PREFIX "" SUFFIX ".so")\n'
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "cudaq_realtime_add_dispatch_kernel(mod src/single_thread_dispatcher.cu"
        " ARCHITECTURES 80 90)\n"
        "cudaq_realtime_add_device_sources(mod src/side_handlers.cu)\n"
        "cudaq_realtime_add_handlers(mod src/handlers.cu)\n"
    )
    build = root / "build"
    for cmd in (
        [cmake, "-S", str(src), "-B", str(build), f"-DCMAKE_CUDA_COMPILER={nvcc}",
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}",
         f"-DPython_EXECUTABLE={sys.executable}"],
        [cmake, "--build", str(build)],
    ):  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return build / "mod.so"


def _records(doc: dict[str, Any]) -> list[dict[str, Any] | None]:
    return [c["record"] for s in doc["sections"] for c in s["containers"]]


@pytest.mark.toolchain
def test_inspect_json_names_every_kernel_and_handler(built: Path, nvcc: Path) -> None:
    proc = _inspect(str(built), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    records = _records(doc)
    assert None not in records, records
    by_source = {r["source"]: r for r in records if r is not None}
    version = nvcc_version(nvcc)
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", version)
    assert by_source == {
        "src/single_thread_dispatcher.cu": {
            "source": "src/single_thread_dispatcher.cu",
            "compiled": "side",
            "compiler": f"nvcc {version}",
            "architectures": ["80", "90"],
            "kernels": ["single_thread_dispatcher"],
            "handlers": [],
        },
        "src/side_handlers.cu": {
            "source": "src/side_handlers.cu",
            "compiled": "side",
            "compiler": f"nvcc {version}",
            "architectures": ["80"],
            "kernels": [],
            "handlers": ["side_echo"],
        },
        "src/handlers.cu": {
            "source": "src/handlers.cu",
            "compiled": "nvcc",
            "compiler": f"nvcc {version}",
            "architectures": ["80"],
            "kernels": [],
            "handlers": ["echo", "echo_thread", "rpc_increment", "rpc_increment_thread"],
        },
        # the handler switch the CMake package generated over the target's exports: named by
        # its target, not by its build-tree path (the binary must not depend on that path)
        "<handler switch of mod>": {
            "source": "<handler switch of mod>",
            "compiled": "side",
            "compiler": f"nvcc {version}",
            "architectures": ["80"],
            "kernels": [],
            "handlers": [],
        },
    }
    # the record of the two-architecture kernel sits on the container with both entries
    (kernel,) = [
        c
        for s in doc["sections"]
        for c in s["containers"]
        if c["record"]["source"] == "src/single_thread_dispatcher.cu"
    ]
    assert [e["arch"] for e in kernel["entries"]] == ["sm_80", "sm_90"]


@pytest.mark.toolchain
def test_inspect_text_carries_the_same_as_json(built: Path) -> None:
    doc = json.loads(_inspect(str(built), "--json").stdout)
    assert doc["schema_version"] == 1
    assert_documented("inspect --json", doc)
    text = _inspect(str(built)).stdout
    blocks = re.split(r"\n    container \d+ ", text)[1:]
    records = _records(doc)
    assert len(blocks) == len(records)
    for block, record in zip(blocks, records, strict=True):
        assert record is not None
        archs = ", ".join(f"sm_{a}" for a in record["architectures"])
        how = "side-compiled" if record["compiled"] == "side" else "compiled with the extension"
        assert f"source   {record['source']} ({how}, {record['compiler']}, {archs})" in block
        assert f"kernels  {', '.join(record['kernels']) or 'none'}" in block
        assert f"handlers {', '.join(record['handlers']) or 'none'}" in block


@pytest.mark.toolchain
def test_records_survive_strip_and_are_retained(built: Path, tmp_path: Path) -> None:
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("no strip")
    stripped = tmp_path / "mod.so"
    subprocess.run([strip, "-o", str(stripped), str(built)], check=True)
    assert read_records(stripped) == read_records(built)
    assert len(read_records(built)) == 4  # three sources and the handler switch
    with built.open("rb") as f:
        (section,) = [s for s in ELFFile(f).iter_sections() if s.name == SECTION]
        assert section["sh_flags"] & 0x200002 == 0x200002  # SHF_ALLOC | SHF_GNU_RETAIN
        assert section["sh_addralign"] == 8
    flags = gnu_stack_flags(built)
    assert flags is not None and not flags & PF_X  # no executable stack


@pytest.mark.toolchain
def test_a_module_without_records_still_inspects(bins: DeviceBinaries) -> None:
    doc = json.loads(_inspect(str(bins.app), "--json").stdout)
    assert _records(doc) == [None, None, None]
    text = _inspect(str(bins.app)).stdout
    assert text.count("unnamed: no build record") == 3
