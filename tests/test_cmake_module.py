"""The CMake package in the projects users write: found in subdirectories (once, twice, in
siblings), outside scikit-build-core (plain ``cmake -S . -B build``), under multi-config
generators, and without leaving variables behind in the caller's scope.

Each case configures (and where it matters builds) a small project against
``skbuild_cudaq/cmake`` with the nvcc of this machine; no GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skbuild_cudaq

pytestmark = pytest.mark.toolchain

CMAKE = shutil.which("cmake")
NINJA = shutil.which("ninja")

KERNEL = 'extern "C" __global__ void k() {}\n'
HANDLER = """\
#include <cudaq/realtime/unified_dispatch_device.cuh>
extern "C" __device__ int my_h(const void *, uint32_t, void *, uint32_t, uint32_t *n) {
  *n = 0;
  return 0;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(my_h);
extern "C" __global__ void k() {}
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def cmake(
    nvcc: Path, source: Path, *args: str, build: bool = False, generator: str = "Ninja"
) -> subprocess.CompletedProcess[str]:
    """Configure ``source`` into ``source/build`` (and build it); return the last process."""
    if CMAKE is None or NINJA is None:
        pytest.skip("cmake or ninja is not on PATH")
    env = {**os.environ, "CUDACXX": str(nvcc)}
    commands = [
        [CMAKE, "-S", str(source), "-B", str(source / "build"), "-G", generator,
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}",
         f"-DPython_EXECUTABLE={sys.executable}", *args],
    ]  # fmt: skip
    if build:
        commands.append([CMAKE, "--build", str(source / "build"), "--config", "Debug"])
    proc = subprocess.CompletedProcess[str]([], 0, "", "")
    for command in commands:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            return proc
    return proc


def containers(module: Path) -> list[str]:
    """The source each embedded container names in its build record."""
    from skbuild_cudaq._records import read_records

    return sorted(str(record.get("source")) for record in read_records(module))


def test_found_in_two_sibling_subdirectories(tmp_path: Path, nvcc: Path) -> None:
    """The second find_package is skipped by the include guard; the module's tables
    (architecture grammar, nvcc recipes, unsafe path characters) must still be there."""
    top = "project(siblings LANGUAGES C)\nadd_subdirectory(a)\nadd_subdirectory(b)\n"
    files = {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.25)\n" + top}
    for sub in ("a", "b"):
        files[f"{sub}/CMakeLists.txt"] = (
            "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
            f"add_library(mod_{sub} MODULE lib.c)\n"
            f"cudaq_realtime_add_dispatch_kernel(mod_{sub} k.cu ARCHITECTURES 90)\n"
        )
        files[f"{sub}/lib.c"] = "int f(void) { return 0; }\n"
        files[f"{sub}/k.cu"] = KERNEL
    write(tmp_path, files)
    proc = cmake(nvcc, tmp_path, build=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for sub in ("a", "b"):
        from skbuild_cudaq.fatbin import read_relfatbin_sections

        module = tmp_path / "build" / sub / f"libmod_{sub}.so"
        entries = [e for s in read_relfatbin_sections(module) for c in s.containers
                   for e in c.entries]  # fmt: skip
        assert [e.arch for e in entries] == [90], entries


def test_handler_switch_of_a_target_found_in_a_subdirectory(tmp_path: Path, nvcc: Path) -> None:
    """The handler switch is written and compiled at the end of the top-level directory,
    where a subdirectory's find_package left no variables: it must still compile."""
    write(tmp_path, {
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.25)\n"
                          "project(nested LANGUAGES C)\nadd_subdirectory(sub)\n",
        "sub/CMakeLists.txt": "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
                              "add_library(mod MODULE lib.c)\n"
                              "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n",
        "sub/lib.c": "int f(void) { return 0; }\n",
        "sub/k.cu": HANDLER,
    })  # fmt: skip
    proc = cmake(nvcc, tmp_path, build=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert containers(tmp_path / "build" / "sub" / "libmod.so") == [
        "<handler switch of mod>",
        "sub/k.cu",
    ]


def test_find_package_leaves_no_variables_in_the_callers_scope(tmp_path: Path, nvcc: Path) -> None:
    """Every variable find_package adds is the package's own (skbuild_cudaq_* as CMake sets
    them, SKBUILD_CUDAQ_* and the private _SKBUILD_CUDAQ_* cache entries); a caller's variables
    keep their values."""
    write(tmp_path, {
        "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.25)
project(scope LANGUAGES NONE)
set(_key "mine")
set(_words "mine")
set(_line "mine")
get_cmake_property(_before VARIABLES)
find_package(skbuild_cudaq CONFIG REQUIRED)
find_package(skbuild_cudaq CONFIG REQUIRED)
get_cmake_property(_after VARIABLES)
list(REMOVE_ITEM _after ${_before} _before)
message(STATUS "added: ${_after}")
message(STATUS "kept: ${_key} ${_words} ${_line}")
""",
    })  # fmt: skip
    proc = cmake(nvcc, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "-- kept: mine mine mine\n" in proc.stdout, proc.stdout
    added = next(line for line in proc.stdout.splitlines() if line.startswith("-- added: "))
    names = added.removeprefix("-- added: ").split(";")
    own = ("skbuild_cudaq_", "SKBUILD_CUDAQ_", "_SKBUILD_CUDAQ_")
    foreign = [name for name in names if not name.startswith(own)]
    assert foreign == [], added


def test_multi_config_generator_builds_each_configuration(tmp_path: Path, nvcc: Path) -> None:
    """Ninja Multi-Config writes each generated file once per configuration: the steps of a
    side-compiled source (a ``$<CONFIG:...>`` definition of the target) and the object list
    of cudaq_realtime_target_skip_device_link (the objects differ per configuration)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    write(tmp_path, {
        "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.25)
project(configs LANGUAGES C CUDA)
find_package(skbuild_cudaq CONFIG REQUIRED)
add_library(mod MODULE lib.c)
target_compile_definitions(mod PRIVATE $<$<CONFIG:Debug>:CHECKED=1>)
cudaq_realtime_add_dispatch_kernel(mod k.cu)
cudaq_realtime_add_handlers(mod h.cu)
""",
        "lib.c": "int f(void) { return 0; }\n",
        "k.cu": '#ifdef CHECKED\nextern "C" __global__ void k_checked() {}\n'
                '#else\nextern "C" __global__ void k_fast() {}\n#endif\n',
        "h.cu": HANDLER.replace("void k()", "void h_kernel()"),
    })  # fmt: skip
    proc = cmake(nvcc, tmp_path, generator="Ninja Multi-Config")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from skbuild_cudaq._records import read_records

    kernels = {}
    for config in ("Debug", "Release"):
        proc = subprocess.run(
            [str(CMAKE), "--build", str(tmp_path / "build"), "--config", config],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        records = read_records(tmp_path / "build" / config / "libmod.so")
        kernels[config] = sorted(k for r in records for k in r["kernels"])
        assert sorted(h for r in records for h in r["handlers"]) == ["my_h"], records
    assert kernels == {"Debug": ["h_kernel", "k_checked"], "Release": ["h_kernel", "k_fast"]}


def test_alias_target_takes_device_code(tmp_path: Path, nvcc: Path) -> None:
    """An ALIAS (``my::mod``) names the real target: its kernels, the real target's own
    calls and the skip-device-link step all land in one module."""
    write(tmp_path, {
        "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.25)
project(aliased LANGUAGES C)
find_package(skbuild_cudaq CONFIG REQUIRED)
add_library(mod MODULE lib.c)
add_library(my::mod ALIAS mod)
cudaq_realtime_add_dispatch_kernel(my::mod k.cu)
cudaq_realtime_add_device_sources(mod h.cu)
cudaq_realtime_target_skip_device_link(my::mod)
""",
        "lib.c": "int f(void) { return 0; }\n",
        "k.cu": KERNEL,
        "h.cu": HANDLER.replace("void k()", "void h_kernel()"),
    })  # fmt: skip
    proc = cmake(nvcc, tmp_path, build=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert containers(tmp_path / "build" / "libmod.so") == [
        "<handler switch of mod>",
        "h.cu",
        "k.cu",
    ]


def test_skip_device_link_of_a_target_without_device_objects(tmp_path: Path, nvcc: Path) -> None:
    """The PRE_LINK step of a target none of whose objects holds nvcc device code (no CUDA
    language, no nvcc found yet) writes an empty record list and links."""
    write(tmp_path, {
        "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.25)
project(plain LANGUAGES C)
find_package(skbuild_cudaq CONFIG REQUIRED)
add_library(mod MODULE lib.c)
cudaq_realtime_target_skip_device_link(mod)
""",
        "lib.c": "int f(void) { return 0; }\n",
    })  # fmt: skip
    proc = cmake(nvcc, tmp_path, build=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert containers(tmp_path / "build" / "libmod.so") == []
