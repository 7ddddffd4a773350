"""Zero-configuration NVRTC: the backend's ``get_requires_for_build_*`` hooks add the NVRTC
wheels of the project's CUDA major where no nvcc is found (plain tests: the decision, with the
toolkit hidden through the search's own inputs). The whole path -- a downstream project built
with build isolation on a machine with no nvcc anywhere, its wheel checked -- runs in
``tests/test_ci_recipe.py``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skbuild_cudaq.build._requires import NVRTC_REQUIREMENTS, cuda_major, device_compiler_requires
from skbuild_cudaq.build._toolchain import nvcc_from_wheel

CU13 = list(NVRTC_REQUIREMENTS[13])
CU12 = list(NVRTC_REQUIREMENTS[12])


def no_toolkit(tmp_path: Path) -> dict[str, str]:
    """An environment whose nvcc search finds nothing: PATH without nvcc, no CUDA_HOME or
    CUDA_PATH, no fixed roots (SKBUILD_CUDAQ_CUDA_ROOTS empty), no CUDACXX."""
    if nvcc_from_wheel() is not None:
        pytest.skip("the nvidia-cuda-nvcc wheel is installed in this environment")
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    hidden = {"CUDA_HOME", "CUDA_PATH", "CUDACXX", "CMAKE_CUDA_COMPILER"}
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["PATH"] = str(empty)
    env["SKBUILD_CUDAQ_CUDA_ROOTS"] = ""
    return env


def with_nvcc(tmp_path: Path) -> dict[str, str]:
    env = no_toolkit(tmp_path)
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    return env


def project(deps: list[str] | None = None) -> dict[str, object]:
    return {"project": {"name": "p", "dependencies": deps or []}}


def test_no_nvcc_anywhere_adds_nvrtc_of_cuda_13(tmp_path: Path) -> None:
    found = device_compiler_requires(project(), "auto", {}, no_toolkit(tmp_path))
    assert list(found.requirements) == CU13
    assert found.reason.startswith("no nvcc found: the build environment gets NVRTC of CUDA 13")
    # the pin is the oldest minor the run time accepts: LTO-IR links only with an
    # nvJitLink no older than its compiler
    assert CU13[0] == "nvidia-cuda-nvrtc==13.0.*" and CU12[0] == "nvidia-cuda-nvrtc-cu12==12.9.*"


def test_nvcc_found_adds_nothing(tmp_path: Path) -> None:
    found = device_compiler_requires(project(), "auto", {}, with_nvcc(tmp_path))
    assert found.requirements == ()
    assert found.reason == f"nvcc found: {(tmp_path / 'bin' / 'nvcc').resolve()}"
    given = {"cmake.define.CMAKE_CUDA_COMPILER": "/opt/x/nvcc"}
    found = device_compiler_requires(project(), "auto", given, no_toolkit(tmp_path))
    assert found.requirements == ()


def test_the_compiler_setting_decides_first(tmp_path: Path) -> None:
    assert device_compiler_requires(project(), "nvcc", {}, no_toolkit(tmp_path)).requirements == ()
    nvrtc = device_compiler_requires(project(), "nvrtc", {}, with_nvcc(tmp_path))
    assert list(nvrtc.requirements) == CU13
    assert nvrtc.reason.startswith("the device compiler is NVRTC")
    # -C cmake.define.SKBUILD_CUDAQ_COMPILER beats [tool.cudaq] compiler, as for CMake
    forced = {"cmake.define.SKBUILD_CUDAQ_COMPILER": "nvcc"}
    assert device_compiler_requires(project(), "nvrtc", forced, no_toolkit(tmp_path)) == (
        (),
        "the device compiler is nvcc (compiler = nvcc)",
    )


def test_the_compiler_environment_variable_forces_the_nvrtc_route(tmp_path: Path) -> None:
    """$SKBUILD_CUDAQ_COMPILER=nvrtc on a machine with nvcc: the build gets NVRTC as a CI
    runner with no CUDA toolkit does, over [tool.cudaq] compiler and the pyproject's
    cmake.define; only -C cmake.define beats it (issue 56: documented in cuda-versions.md)."""
    from skbuild_cudaq.errors import ConfigSettingsError

    env = dict(with_nvcc(tmp_path), SKBUILD_CUDAQ_COMPILER="NVRTC")
    defined = {"tool": {"scikit-build": {"cmake": {"define": {"SKBUILD_CUDAQ_COMPILER": "nvcc"}}}}}
    for pyproject, compiler in ((project(), "auto"), (project(), "nvcc"), (defined, "auto")):
        found = device_compiler_requires(pyproject, compiler, {}, env)
        assert list(found.requirements) == CU13
        assert found.reason.startswith(
            "the device compiler is NVRTC (SKBUILD_CUDAQ_COMPILER=nvrtc in the environment)"
        ), found.reason
    forced = {"cmake.define.SKBUILD_CUDAQ_COMPILER": "auto"}
    assert device_compiler_requires(project(), "auto", forced, env).requirements == ()
    env["SKBUILD_CUDAQ_COMPILER"] = "nvrtx"
    with pytest.raises(ConfigSettingsError, match=r"SKBUILD_CUDAQ_COMPILER='nvrtx' \(environment"):
        device_compiler_requires(project(), "auto", {}, env)


@pytest.mark.parametrize(
    ("deps", "major"),
    [
        (["skbuild-cudaq[runtime]"], 13),
        (["skbuild-cudaq[cu13]>=0.1"], 13),
        (["Skbuild_CUDAQ[cu12]"], 12),
        (["numpy", "skbuild-cudaq[cu12]; sys_platform == 'linux'"], 12),
        (["skbuild-cudaq"], None),
        (["skbuild-cudaq[cu12,cu13]"], None),  # two majors: not one to pick
        (["not a requirement ["], None),
        ([], None),
    ],
)
def test_the_cuda_major_comes_from_the_dependencies(deps: list[str], major: int | None) -> None:
    assert cuda_major(project(deps)) == major


def test_a_cuda_12_project_gets_nvrtc_12(tmp_path: Path) -> None:
    found = device_compiler_requires(
        project(["skbuild-cudaq[cu12]"]), "auto", {}, no_toolkit(tmp_path)
    )
    assert list(found.requirements) == CU12
    major = {"cmake.define.SKBUILD_CUDAQ_NVRTC_MAJOR": "12"}
    found = device_compiler_requires(project(), "auto", major, no_toolkit(tmp_path))
    assert list(found.requirements) == CU12


def test_a_project_without_device_code_gets_no_nvrtc(tmp_path: Path) -> None:
    """A package of native host handlers (no [tool.cudaq] kernels, no cudaq_realtime_add_*
    call in its CMake files) builds without CUDA: nothing to download for it."""
    env = no_toolkit(tmp_path)
    proj = tmp_path / "proj"
    (proj / "cmake").mkdir(parents=True)
    (proj / "CMakeLists.txt").write_text(
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "# cudaq_realtime_add_dispatch_kernel is not called here\n"
        "python_add_library(_handlers MODULE handlers.c WITH_SOABI)\n"
    )
    for hidden in (".git", "build", "_skbuild", ".venv"):  # never searched
        (proj / hidden).mkdir()
        (proj / hidden / "x.cmake").write_text("cudaq_realtime_add_handlers(t a.cu)\n")
    found = device_compiler_requires(project(), "auto", {}, env, project_dir=proj)
    assert found.requirements == ()
    assert found.reason.startswith("the project compiles no CUDA device code")
    # asked for by name: NVRTC regardless
    nvrtc = device_compiler_requires(project(), "nvrtc", {}, env, project_dir=proj)
    assert list(nvrtc.requirements) == CU13
    # a call in any CMake file of the source tree, in any case: device code
    (proj / "cmake" / "device.cmake").write_text(
        "CUDAQ_REALTIME_ADD_DEVICE_SOURCES (_handlers k.cu)\n"
    )
    found = device_compiler_requires(project(), "auto", {}, env, project_dir=proj)
    assert list(found.requirements) == CU13
    # [tool.cudaq] kernels, with no CMake file at all
    bare = tmp_path / "bare"
    bare.mkdir()
    declared = {**project(), "tool": {"cudaq": {"dispatch-kernels": {"_core": ["k.cu"]}}}}
    assert device_compiler_requires(declared, "auto", {}, env, project_dir=bare).requirements
    # the CMake source directory is [tool.scikit-build] cmake.source-dir
    moved = {**project(), "tool": {"scikit-build": {"cmake": {"source-dir": "cmake"}}}}
    assert device_compiler_requires(moved, "auto", {}, env, project_dir=proj).requirements
    (proj / "cmake" / "device.cmake").unlink()
    assert not device_compiler_requires(moved, "auto", {}, env, project_dir=proj).requirements


@pytest.mark.parametrize(
    "hook", ["get_requires_for_build_wheel", "get_requires_for_build_editable"]
)
def test_the_backend_hooks_add_it_and_say_so(tmp_path: Path, hook: str) -> None:
    """The PEP 517 hooks as a frontend calls them: in the project's directory, in a process
    of their own; what they add is logged on stderr."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["skbuild-cudaq"]\nbuild-backend = "skbuild_cudaq.build"\n'
        '[project]\nname = "p"\nversion = "1"\ndependencies = ["skbuild-cudaq[cu12]"]\n'
        '[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n'
    )
    (proj / "k.cu").write_text("// kernel\n")
    code = f"import skbuild_cudaq.build as b; print(b.{hook}())"
    env = no_toolkit(tmp_path)
    env["PATH"] = os.pathsep.join([env["PATH"], os.environ.get("PATH", "")])  # cmake, ninja
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists()
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=proj, env=env, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    requires = ast.literal_eval(proc.stdout)
    assert [r for r in requires if r.startswith("nvidia-")] == CU12
    assert "skbuild-cudaq: no nvcc found: the build environment gets NVRTC of CUDA 12" in (
        proc.stderr
    )


def test_python_handlers_only_get_numba_cuda_and_nvvm_and_no_nvrtc(tmp_path: Path) -> None:
    """A project whose dispatch-kernel sources are all Python handlers (issue 53): no NVRTC,
    but numba-cuda and NVVM pinned with the run time's oldest nvJitLink minor."""
    from skbuild_cudaq.build._requires import python_device_requires

    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "CMakeLists.txt").write_text("python_add_library(_core MODULE m.c WITH_SOABI)\n")
    pyproject = {
        **project(),
        "tool": {"cudaq": {"dispatch-kernels": {"_core": {"sources": ["src/device.py"]}}}},
    }
    found = device_compiler_requires(pyproject, "auto", {}, no_toolkit(tmp_path), project_dir=proj)
    assert found.requirements == ()
    python = python_device_requires(pyproject, {})
    assert python.requirements == ("numba-cuda>=0.30", "nvidia-nvvm==13.0.*")
    cu12 = python_device_requires({**pyproject, **project(["skbuild-cudaq[cu12]"])}, {})
    assert cu12.requirements == ("numba-cuda>=0.30", "nvidia-cuda-nvcc-cu12==12.9.*")
    # a .cu beside it still needs a CUDA compiler; no .py needs no numba
    mixed = {**project(), "tool": {"cudaq": {"dispatch-kernels": {"_core": ["k.cu", "h.py"]}}}}
    assert device_compiler_requires(mixed, "auto", {}, no_toolkit(tmp_path), project_dir=proj)[0]
    assert python_device_requires(project(), {}).requirements == ()
