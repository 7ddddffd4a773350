"""Where nvcc is found: one order (``skbuild_cudaq/cmake/nvcc-search.txt``) for Python and CMake.

Fake ``nvcc`` scripts stand at every place of the order; the tests take them away one by one and
check that the Python finder and the CMake one pick the same, and that with none left both list
every place they tried. One test builds a real module through the order with the real toolkit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skbuild_cudaq
from skbuild_cudaq.build._toolchain import (
    CUDA_ROOTS_ENV,
    find_nvcc,
    nvcc_from_wheel,
    search_order,
)
from skbuild_cudaq.errors import ToolchainError

CMAKE = shutil.which("cmake")
MAKE = shutil.which("make") or shutil.which("ninja")
#: The places of the order with a fake nvcc, first to last (variable or root they come from).
PLACES = ["CMAKE_CUDA_COMPILER", "CUDACXX", "PATH", "CUDA_HOME", "CUDA_PATH", "root1", "root2"]


def fake_nvcc(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    nvcc = directory / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    return nvcc


def fake_wheel(site: Path) -> Path:
    """An installed nvidia-cuda-nvcc distribution in ``site`` listing the wheel's nvcc."""
    nvcc = fake_nvcc(site / "nvidia" / "cu13" / "bin")
    info = site / "nvidia_cuda_nvcc-13.0.88.dist-info"
    info.mkdir()
    metadata = "Metadata-Version: 2.1\nName: nvidia-cuda-nvcc\nVersion: 13.0.88\n"
    (info / "METADATA").write_text(metadata)
    (info / "RECORD").write_text("nvidia/cu13/bin/nvcc,,\n")
    return nvcc


def base_env(tmp_path: Path) -> dict[str, str]:
    """The environment with no nvcc anywhere: a PATH of one empty directory, no roots."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CMAKE_CUDA_COMPILER", "CUDACXX", "CUDA_HOME", "CUDA_PATH", "PYTHONPATH"}
    }
    env["PATH"] = str(empty)
    env[CUDA_ROOTS_ENV] = ""
    return env


def env_with(tmp_path: Path, places: list[str]) -> tuple[dict[str, str], dict[str, Path]]:
    """``base_env`` plus a fake nvcc at each of ``places``; returns the env and the fakes."""
    env = base_env(tmp_path)
    fakes: dict[str, Path] = {}
    roots = []
    for place in places:
        if place in {"CMAKE_CUDA_COMPILER", "CUDACXX"}:
            fakes[place] = fake_nvcc(tmp_path / place.lower())
            env[place] = str(fakes[place])
        elif place == "PATH":
            fakes[place] = fake_nvcc(tmp_path / "path-bin")
            env["PATH"] = f"{env['PATH']}{os.pathsep}{tmp_path / 'path-bin'}"
        elif place in {"CUDA_HOME", "CUDA_PATH"}:
            fakes[place] = fake_nvcc(tmp_path / place.lower() / "bin")
            env[place] = str(tmp_path / place.lower())
        else:  # a /usr/local/cuda-style root in a temporary prefix
            root = tmp_path / "prefix" / place / "cuda"
            fakes[place] = fake_nvcc(root / "bin")
            roots.append(str(root))
    if roots:
        env[CUDA_ROOTS_ENV] = os.pathsep.join([str(tmp_path / "no-such-root"), *roots])
    return env, fakes


def places_tried(message: str) -> list[str]:
    return [line.strip()[2:] for line in message.splitlines() if line.strip().startswith("- ")]


def cmake_find(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Configure a project that only runs the CMake package's nvcc search."""
    if CMAKE is None or MAKE is None:
        pytest.skip("cmake (and make or ninja) not on PATH")
    src = tmp_path / "cmake-project"
    src.mkdir(exist_ok=True)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(find_nvcc LANGUAGES NONE)\n"
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "_cudaq_realtime_find_nvcc(test)\n"
        'file(WRITE "${CMAKE_BINARY_DIR}/nvcc.txt" "${SKBUILD_CUDAQ_NVCC}")\n'
    )
    build = tmp_path / "cmake-build"
    shutil.rmtree(build, ignore_errors=True)
    return subprocess.run(
        [CMAKE, "-S", str(src), "-B", str(build), f"-DCMAKE_MAKE_PROGRAM={MAKE}",
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}",
         f"-DPython_EXECUTABLE={sys.executable}", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip


def cmake_choice(tmp_path: Path, env: dict[str, str], *args: str) -> Path:
    proc = cmake_find(tmp_path, env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Path((tmp_path / "cmake-build" / "nvcc.txt").read_text()).resolve()


# ---------------------------------------------------------------------------------------------
# The order itself
# ---------------------------------------------------------------------------------------------
def test_the_order_is_defined_once() -> None:
    steps = [f"{s.kind} {s.arg}" for s in search_order()]
    assert steps == [
        "cmake-variable CMAKE_CUDA_COMPILER",
        "env CMAKE_CUDA_COMPILER",
        "env CUDACXX",
        "path nvcc",
        "root-env CUDA_HOME",
        "root-env CUDA_PATH",
        "root /usr/local/cuda",
        "root /opt/cuda",
        "wheel nvidia-cuda-nvcc",
    ]
    config = (skbuild_cudaq.cmake_dir() / "skbuild_cudaqConfig.cmake").read_text()
    assert "nvcc-search.txt" in config
    # no second copy of the order in CMake: the variables appear only in comments and docs
    code = re.sub(r"#\[(=*)\[.*?\]\1\]", "", config, flags=re.S)
    code = "\n".join(line.split("#")[0] for line in code.splitlines())
    for name in ("ENV{CUDA_HOME}", "ENV{CUDA_PATH}", "ENV{CUDACXX}", "/usr/local/cuda"):
        assert name not in code


@pytest.mark.parametrize("first", range(len(PLACES)))
def test_python_takes_the_first_place_holding_nvcc(tmp_path: Path, first: int) -> None:
    env, fakes = env_with(tmp_path, PLACES[first:])
    assert find_nvcc(env) == fakes[PLACES[first]].resolve()


def test_cuda_home_when_path_has_no_nvcc(tmp_path: Path) -> None:
    env, fakes = env_with(tmp_path, ["CUDA_HOME"])
    assert find_nvcc(env) == fakes["CUDA_HOME"].resolve()


def test_usr_local_cuda_layout_in_a_temporary_prefix(tmp_path: Path) -> None:
    """The default roots (/usr/local/cuda, /opt/cuda) are replaced for the test by a prefix."""
    env, fakes = env_with(tmp_path, ["root2"])
    assert find_nvcc(env) == fakes["root2"].resolve()


def test_nothing_found_lists_every_place_tried(tmp_path: Path) -> None:
    if nvcc_from_wheel() is not None:
        pytest.skip("the nvidia-cuda-nvcc wheel is installed here: nvcc is always found")
    env = base_env(tmp_path)
    env["CUDA_HOME"] = str(tmp_path / "not-a-toolkit")
    env[CUDA_ROOTS_ENV] = os.pathsep.join(["/nonexistent/cuda", "/nonexistent/opt-cuda"])
    with pytest.raises(ToolchainError) as info:
        find_nvcc(env)
    message = str(info.value)
    assert message.startswith("nvcc not found: it compiles the dispatch kernels to LTO-IR.")
    assert places_tried(message) == [
        "CMAKE_CUDA_COMPILER (environment): not set",
        "CUDACXX (environment): not set",
        f"nvcc on PATH ({env['PATH']}): not found",
        f"$CUDA_HOME/bin/nvcc: {tmp_path / 'not-a-toolkit' / 'bin' / 'nvcc'} not found",
        "$CUDA_PATH/bin/nvcc: CUDA_PATH not set",
        "/nonexistent/cuda/bin/nvcc: not found",
        "/nonexistent/opt-cuda/bin/nvcc: not found",
        f"the nvidia-cuda-nvcc wheel: not installed for {sys.executable}",
    ]
    assert "pip install nvidia-cuda-nvcc" in message.splitlines()[-1]
    assert "set CUDA_HOME" in message.splitlines()[-1]


def test_default_roots_are_searched(tmp_path: Path) -> None:
    """Without the override, the roots of the order file are the ones tried."""
    if nvcc_from_wheel() is not None or any(
        (Path(r) / "bin" / "nvcc").exists() for r in ("/usr/local/cuda", "/opt/cuda")
    ):
        env = base_env(tmp_path)
        del env[CUDA_ROOTS_ENV]
        found = find_nvcc(env)  # this machine has one of them: it is found
        assert found.name == "nvcc"
        return
    env = base_env(tmp_path)
    del env[CUDA_ROOTS_ENV]
    with pytest.raises(ToolchainError) as info:
        find_nvcc(env)
    assert "/usr/local/cuda/bin/nvcc: not found" in places_tried(str(info.value))
    assert "/opt/cuda/bin/nvcc: not found" in places_tried(str(info.value))


@pytest.mark.parametrize("var", ["CMAKE_CUDA_COMPILER", "CUDACXX"])
def test_a_variable_naming_no_executable_is_an_error(tmp_path: Path, var: str) -> None:
    env, _ = env_with(tmp_path, ["PATH"])  # an nvcc later in the order is not taken instead
    env[var] = str(tmp_path / "missing" / "nvcc")
    with pytest.raises(ToolchainError, match=rf"^{var}='.*' \(environment\) does not name an"):
        find_nvcc(env)


def test_the_wheel_is_found_from_its_file_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution named nvidia-cuda-nvcc listing nvidia/cu13/bin/nvcc (the wheel's layout)."""
    site = tmp_path / "site"
    nvcc = fake_wheel(site)
    monkeypatch.syspath_prepend(str(site))
    assert find_nvcc(base_env(tmp_path)) == nvcc.resolve()
    env, fakes = env_with(tmp_path, ["root2"])  # every earlier place wins over the wheel
    assert find_nvcc(env) == fakes["root2"].resolve()


# ---------------------------------------------------------------------------------------------
# CMake reads the same order
# ---------------------------------------------------------------------------------------------
@pytest.mark.toolchain
@pytest.mark.parametrize("first", range(len(PLACES)))
def test_cmake_agrees_with_python(tmp_path: Path, first: int) -> None:
    env, fakes = env_with(tmp_path, PLACES[first:])
    expected = fakes[PLACES[first]].resolve()
    assert find_nvcc(env) == expected
    assert cmake_choice(tmp_path, env) == expected


@pytest.mark.toolchain
def test_cmake_honours_cmake_cuda_compiler_from_the_environment(tmp_path: Path) -> None:
    env, fakes = env_with(tmp_path, ["CMAKE_CUDA_COMPILER", "PATH", "CUDA_HOME"])
    assert cmake_choice(tmp_path, env) == fakes["CMAKE_CUDA_COMPILER"].resolve()


@pytest.mark.toolchain
def test_cmake_variable_comes_first(tmp_path: Path) -> None:
    env, fakes = env_with(tmp_path, ["CMAKE_CUDA_COMPILER", "CUDACXX"])
    chosen = cmake_choice(tmp_path, env, f"-DCMAKE_CUDA_COMPILER={fakes['CUDACXX']}")
    assert chosen == fakes["CUDACXX"].resolve()


@pytest.mark.toolchain
def test_cmake_lists_the_same_places_as_python(tmp_path: Path) -> None:
    if nvcc_from_wheel() is not None:
        pytest.skip("the nvidia-cuda-nvcc wheel is installed here: nvcc is always found")
    env = base_env(tmp_path)
    env["CUDA_PATH"] = str(tmp_path / "not-a-toolkit")
    env[CUDA_ROOTS_ENV] = "/nonexistent/cuda"
    with pytest.raises(ToolchainError) as info:
        find_nvcc(env)
    proc = cmake_find(tmp_path, env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "skbuild-cudaq: test: nvcc not found: it compiles the dispatch kernels" in proc.stderr
    cmake_places = places_tried(proc.stderr)
    assert cmake_places[0] == "CMAKE_CUDA_COMPILER (CMake variable): not set"
    assert cmake_places[1:] == places_tried(str(info.value))
    assert "pip install" in " ".join(proc.stderr.split())


@pytest.mark.toolchain
def test_cmake_finds_the_wheel_through_the_builds_python(tmp_path: Path) -> None:
    site = tmp_path / "site"
    nvcc = fake_wheel(site)
    env = base_env(tmp_path)
    env["PYTHONPATH"] = str(site)
    assert cmake_choice(tmp_path, env) == nvcc.resolve()


@pytest.mark.toolchain
@pytest.mark.parametrize("var", ["CMAKE_CUDA_COMPILER", "CUDACXX"])
def test_cmake_a_variable_naming_no_executable_is_an_error(tmp_path: Path, var: str) -> None:
    env, _ = env_with(tmp_path, ["PATH"])
    env[var] = str(tmp_path / "missing" / "nvcc")
    proc = cmake_find(tmp_path, env)
    assert proc.returncode != 0
    stderr = " ".join(proc.stderr.split())
    assert f"skbuild-cudaq: test: {var}='{env[var]}' (environment) does not name an" in stderr


def _toolkit_root(nvcc: Path) -> Path:
    """The toolkit directory of ``nvcc`` as nvcc itself reports it (sees through wrappers)."""
    proc = subprocess.run(
        [str(nvcc), "-dryrun", "--version"], capture_output=True, text=True, check=False
    )
    for line in (proc.stdout + proc.stderr).splitlines():
        match = re.match(r"#\$ _HERE_=(.+)", line)
        if match:
            return Path(match.group(1).strip()).resolve().parent
    return nvcc.resolve().parent.parent


@pytest.mark.toolchain
def test_a_real_build_through_a_cuda_root(tmp_path: Path, nvcc: Path) -> None:
    """PATH without nvcc, the toolkit only under a /usr/local/cuda-style root: the module builds."""
    from skbuild_cudaq.fatbin import read_relfatbin_sections

    if CMAKE is None or MAKE is None or shutil.which("cc") is None:
        pytest.skip("cmake, make/ninja and cc are needed")
    root = _toolkit_root(nvcc)
    if not (root / "bin" / "nvcc").is_file():
        pytest.skip(f"no toolkit layout around {nvcc}")
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "cuda").symlink_to(root, target_is_directory=True)
    env = base_env(tmp_path)
    env["PATH"] = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvcc").exists()
    )
    env[CUDA_ROOTS_ENV] = str(prefix / "cuda")
    src = tmp_path / "proj"
    src.mkdir()
    (src / "mod.c").write_text("int cudaq_toolchain_test(void) { return 1; }\n")
    (src / "k.cu").write_text(
        "#include <cudaq/realtime/unified_dispatch_device.cuh>\n"
        'extern "C" __global__ void toolchain_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {\n'
        "  (void)transport_ctx; (void)slot_size; (void)table; (void)table_count;\n"
        "  (void)shutdown_flag; (void)stats;\n}\n"
    )
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(real LANGUAGES C)\n"
        "add_library(mod MODULE mod.c)\n"
        "find_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n"
    )
    build = tmp_path / "build"
    for cmd in (
        [CMAKE, "-S", str(src), "-B", str(build), f"-DCMAKE_MAKE_PROGRAM={MAKE}",
         f"-Dskbuild_cudaq_DIR={skbuild_cudaq.cmake_dir()}"],
        [CMAKE, "--build", str(build)],
    ):  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    cache = (build / "CMakeCache.txt").read_text()
    assert f"SKBUILD_CUDAQ_NVCC:FILEPATH={prefix / 'cuda' / 'bin' / 'nvcc'}" in cache
    (module,) = build.glob("*mod*.so")
    (section,) = read_relfatbin_sections(module)
    entries = [e for c in section.containers for e in c.entries]
    assert [(e.kind, e.sm) for e in entries] == [("lto-ir", "sm_80")]
