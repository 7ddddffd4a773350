"""A dispatch kernel never vanishes silently (issue 56, item 11): a near-miss tool table
(``[tool.cuda-q]``, ...) is named with "did you mean"; ``find_package(skbuild_cudaq)`` under
another scikit-build-core backend with a ``[tool.cudaq]`` table stops at configure, naming
``build-backend = "skbuild_cudaq.build"``; plain CMake that finds the package but adds no
device code warns at the end of configure; ``check`` fails a module with device code but no
build record of ours, and its "no device code" error names the backend.

Plain tests read settings and wheels; ``toolchain`` tests configure CMake projects (no
a C compiler, no nvcc run)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _elf_forge import Shdr, forge_elf

import skbuild_cudaq
from skbuild_cudaq.errors import SettingsError

CMAKE = shutil.which("cmake")
BACKEND = 'Set build-backend = "skbuild_cudaq.build" in [build-system] of pyproject.toml'


def _pyproject(where: Path, tables: str) -> Path:
    path = where / "pyproject.toml"
    path.write_text(
        '[build-system]\nrequires = ["scikit-build-core", "skbuild-cudaq"]\n'
        'build-backend = "scikit_build_core.build"\n\n[project]\nname = "p"\nversion = "1"\n\n'
        + tables
    )
    (where / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    return path


# -- near-miss tool tables --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["cuda-q", "cuda_q", "cudaq-realtime", "cudaq_realtime", "CUDAQ", "skbuild-cudaq"]
)
def test_a_near_miss_tool_table_is_named_with_did_you_mean(tmp_path: Path, name: str) -> None:
    from skbuild_cudaq.settings import load_settings

    pyproject = _pyproject(tmp_path, f'[tool.{name}.dispatch-kernels]\n_core = ["k.cu"]\n')
    with pytest.raises(SettingsError) as info:
        load_settings(pyproject)
    (problem,) = info.value.problems
    assert problem.key == f"tool.{name}"
    assert "did you mean [tool.cudaq]?" in str(problem)


def test_near_misses_are_reported_with_the_table_s_own_problems(tmp_path: Path) -> None:
    from skbuild_cudaq.settings import load_settings

    pyproject = _pyproject(
        tmp_path,
        '[tool.cudaq]\ncompiler = "gcc"\n\n[tool.cuda-q.dispatch-kernels]\n_core = ["k.cu"]\n',
    )
    with pytest.raises(SettingsError) as info:
        load_settings(pyproject)
    assert [p.key for p in info.value.problems] == ["tool.cuda-q", "tool.cudaq.compiler"]


def test_other_tools_tables_are_left_alone(tmp_path: Path) -> None:
    from skbuild_cudaq.settings import load_settings

    tables = "[tool.cuda]\nx = 1\n[tool.scikit-build]\nminimum-version = '0.10'\n[tool.ruff]\n"
    assert load_settings(_pyproject(tmp_path, tables)).dispatch_kernels == {}


def test_the_cli_and_the_setuptools_hook_see_a_near_miss(tmp_path: Path) -> None:
    from skbuild_cudaq.setuptools.hook import project_uses_cudaq

    pyproject = _pyproject(tmp_path, '[tool.cuda_q.dispatch-kernels]\n_core = ["k.cu"]\n')
    assert project_uses_cudaq(pyproject)  # so its build reads the settings, and fails
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "schema", "--check", str(pyproject)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "tool.cuda_q: is not a table skbuild-cudaq reads" in proc.stderr
    assert "did you mean [tool.cudaq]?" in proc.stderr


# -- CMake: another backend, or no device code added -----------------------------------------


def _configure(tmp_path: Path, body: str, *defines: str) -> subprocess.CompletedProcess[str]:
    if CMAKE is None:
        pytest.skip("cmake not on PATH")
    (tmp_path / "lib.c").write_text("int x;\n")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(p LANGUAGES C)\n"
        "add_library(mod MODULE lib.c)\nfind_package(skbuild_cudaq CONFIG REQUIRED)\n" + body
    )
    return subprocess.run(
        [CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}", *defines],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("table", "hint"),
    [
        ('[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n', ""),
        ('[tool.cudaq]\ncompiler = "nvrtc"\n', ""),
        ('[tool."cuda-q".dispatch-kernels]\n_core = ["k.cu"]\n', " (did you mean [tool.cudaq]?"),
    ],
)
def test_another_backend_with_a_cudaq_table_stops_at_configure(
    tmp_path: Path, table: str, hint: str
) -> None:
    _pyproject(tmp_path, table)
    proc = _configure(tmp_path, "", "-DSKBUILD=2")  # what scikit-build-core defines
    assert proc.returncode != 0, proc.stderr
    stderr = _flat(proc.stderr)
    name = "cudaq" if not hint else "cuda-q"
    assert f"skbuild-cudaq: pyproject.toml has a [tool.{name}] table{hint}" in stderr
    assert BACKEND in stderr


@pytest.mark.toolchain
def test_our_backend_and_projects_without_the_table_configure(tmp_path: Path) -> None:
    _pyproject(tmp_path, '[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n')
    uses_headers = "target_include_directories(mod PRIVATE ${SKBUILD_CUDAQ_INCLUDE_DIR})\n"
    # the skbuild_cudaq.build backend always passes the kernel count
    proc = _configure(tmp_path, uses_headers, "-DSKBUILD=2", "-DSKBUILD_CUDAQ_KERNEL_COUNT=0")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.scikit-build]\nminimum-version = "0.10"\n')
    shutil.rmtree(tmp_path / "build")
    proc = _configure(tmp_path, uses_headers, "-DSKBUILD=2")
    assert proc.returncode == 0, proc.stderr
    assert "skbuild-cudaq" not in proc.stderr


@pytest.mark.toolchain
def test_plain_cmake_that_adds_no_device_code_warns_at_the_end(tmp_path: Path) -> None:
    proc = _configure(tmp_path, "")
    assert proc.returncode == 0, proc.stderr
    stderr = _flat(proc.stderr)
    assert "CMake Warning" in proc.stderr
    assert (
        "skbuild-cudaq: find_package(skbuild_cudaq) found the package, but no target received "
        "device code from it" in stderr
    )
    assert "The built module will carry no dispatch kernel." in stderr


@pytest.mark.toolchain
@pytest.mark.parametrize(
    "body",
    [
        "target_include_directories(mod PRIVATE ${SKBUILD_CUDAQ_INCLUDE_DIR})\n",
        "add_subdirectory(sub)\n",  # a target of a subdirectory, with an interface
        "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n",
    ],
)
def test_a_project_that_uses_the_package_gets_no_warning(tmp_path: Path, body: str) -> None:
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "CMakeLists.txt").write_text(
        "add_library(headers INTERFACE)\n"
        "target_include_directories(headers INTERFACE ${SKBUILD_CUDAQ_INCLUDE_DIR})\n"
    )
    if "dispatch_kernel" in body and shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    proc = _configure(tmp_path, body)
    assert proc.returncode == 0, proc.stderr
    assert "found the package, but no target" not in _flat(proc.stderr)


# -- check: device code without a build record of ours ---------------------------------------


def _wheel(where: Path, members: dict[str, bytes]) -> Path:
    wheel = where / "pkg-1.0-cp310-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return wheel


def test_check_fails_device_code_without_a_build_record(tmp_path: Path) -> None:
    """nvcc -rdc handlers built under another backend: an __nv_relfatbin section, no
    __cudaq_rt_info. Before, it linked and check said 'ok, kernels: none'."""
    from skbuild_cudaq.realtime import check_package

    blob = bytes(64)
    module = forge_elf(blob, [Shdr("__nv_relfatbin", 0, len(blob))])
    report = check_package(_wheel(tmp_path, {"pkg/_core.so": module}))
    assert not report.ok
    (problem,) = report.problems
    assert (problem.kind, problem.module) == ("no-build-record", "pkg/_core.so")
    assert "no build record of skbuild-cudaq's" in problem.message
    assert 'build-backend = "skbuild_cudaq.build"' in problem.message


def test_the_no_device_code_error_names_the_backend(tmp_path: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    report = check_package(_wheel(tmp_path, {"pkg/_core.so": Path("/bin/true").read_bytes()}))
    (problem,) = report.problems
    assert problem.kind == "no-device-code"
    assert 'build-backend = "skbuild_cudaq.build"' in problem.message
    assert "scikit_build_core.build, ignores [tool.cudaq]" in problem.message
