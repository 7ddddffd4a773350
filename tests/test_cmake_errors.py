"""The CMake package's precondition messages, exact text (configure only, fast).

Each case configures a two-line project with ``LANGUAGES NONE`` (no compiler
detection) against ``skbuild_cudaq/cmake`` and checks the FATAL_ERROR text
(CMake re-wraps long messages: whitespace is normalised before comparing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import skbuild_cudaq

pytestmark = pytest.mark.toolchain

CMAKE = shutil.which("cmake")


def configure(tmp_path: Path, body: str, env: dict[str, str] | None = None, *args: str) -> str:
    """Configure a project whose CMakeLists.txt ends with ``body``; return stderr (must fail)."""
    if CMAKE is None:
        pytest.skip("cmake not on PATH")
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(errors LANGUAGES NONE)\n"
        "add_library(mod MODULE)\n"
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n" + body
    )
    proc = subprocess.run(
        [CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout + proc.stderr
    return " ".join(proc.stderr.split())


def expect(stderr: str, message: str) -> None:
    assert " ".join(message.split()) in stderr, stderr


def test_unknown_target(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(nope k.cu)\n")
    expect(
        stderr,
        'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(nope): no CMake target named "nope". '
        "Create the target (add_library, python_add_library, nanobind_add_module, ...) before "
        "this call, or correct the name.",
    )


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("mdo", 'Did you mean "mod"?'),  # a transposition
        ("MOD", 'Did you mean "mod"?'),  # case
        ("module_x", 'Did you mean "module"?'),  # the closest of several
        ("nope", "Targets of this project: mod, module."),  # nothing close: all of them
    ],
)
def test_unknown_target_suggests_the_closest(tmp_path: Path, name: str, hint: str) -> None:
    stderr = configure(
        tmp_path,
        "add_library(module MODULE)\nadd_custom_target(modx)\n"
        f"cudaq_realtime_add_dispatch_kernel({name} k.cu)\n",
    )
    expect(stderr, f'no CMake target named "{name}".')
    expect(stderr, f"correct the name. {hint}")
    assert "modx" not in stderr  # a custom target cannot take device code


def test_missing_file(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_dispatch_kernel(mod missing.cu)\n")
    expect(
        stderr,
        'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): source file "missing.cu" does '
        f"not exist (looked for {tmp_path / 'missing.cu'}).",
    )


@pytest.mark.parametrize("arch", ["75", "sm80x", "80.5"])
def test_bad_architecture(tmp_path: Path, arch: str) -> None:
    stderr = configure(
        tmp_path, f"cudaq_realtime_add_dispatch_kernel(mod k.cu ARCHITECTURES 80 {arch})\n"
    )
    expect(
        stderr,
        f'skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): architecture "{arch}" is not '
        "supported: dispatch kernels are LTO-IR for sm_80 or newer. Use a number >= 80 such as "
        "80 or 90 (LTO-IR built for one architecture links for that GPU and every newer one).",
    )


def test_nvcc_not_found(tmp_path: Path) -> None:
    assert CMAKE is not None or pytest.skip("cmake not on PATH")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"CUDACXX", "CMAKE_CUDA_COMPILER"}}
    env["PATH"] = str(empty)
    # Only PATH (empty) may be searched: not CMake's system prefixes such as /usr/local/bin.
    stderr = configure(
        tmp_path,
        "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n",
        env,
        "-DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF",
        "-DCMAKE_FIND_USE_INSTALL_PREFIX=OFF",
        f"-DCMAKE_MAKE_PROGRAM={shutil.which('make') or shutil.which('ninja')}",
    )
    expect(
        stderr,
        "skbuild-cudaq: cudaq_realtime_add_dispatch_kernel(mod): nvcc not found: it compiles the "
        "dispatch kernels to LTO-IR. Set CMAKE_CUDA_COMPILER (or the CUDACXX environment "
        "variable) to the nvcc of a CUDA toolkit, put nvcc on PATH, or `pip install "
        "nvidia-cuda-nvcc` (add it to build-system.requires).",
    )


def test_static_library_is_refused(tmp_path: Path) -> None:
    stderr = configure(
        tmp_path, "add_library(st STATIC)\ncudaq_realtime_add_dispatch_kernel(st k.cu)\n"
    )
    expect(stderr, 'target "st" is a STATIC_LIBRARY; device code can only be embedded into a')


def test_handlers_need_the_cuda_language(tmp_path: Path) -> None:
    stderr = configure(tmp_path, "cudaq_realtime_add_handlers(mod k.cu)\n")
    expect(
        stderr,
        "skbuild-cudaq: cudaq_realtime_add_handlers(mod): the project does not enable the CUDA "
        "language.",
    )


def test_config_version_matches_the_python_package() -> None:
    text = (skbuild_cudaq.cmake_dir() / "skbuild_cudaqConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{skbuild_cudaq.__version__}")' in text
