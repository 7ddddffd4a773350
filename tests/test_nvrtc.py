"""NVRTC as the device compiler (no CUDA toolkit) and both CUDA majors at link time.

Plain tests: the fatbin container writer, include scanning, NVRTC discovery, the
``compiler`` setting's CMake defines. ``toolchain`` tests: NVRTC 13 of the test venv
against nvcc's layout and nvJitLink 13. ``integration``: the CUDA 12 stack
(cuda-bindings 12.9, nvJitLink 12.9, NVRTC 12.9) in a virtual environment of its
own, and the CUDA 13 stack in the test venv: example_app's device code and the
device run time built with NVRTC, linked for sm_80, sm_90 and sm_100.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import ROOT

from skbuild_cudaq import include_dir
from skbuild_cudaq.build import _nvrtc, cmake_defines, prepare_config_settings
from skbuild_cudaq.build._container import make_ltoir_container
from skbuild_cudaq.errors import CompileError, DeviceCodeError, ToolchainError
from skbuild_cudaq.fatbin import ltoir_code_version, read_fatbin_file, split_containers

STACK_CHECK = Path(__file__).resolve().parent / "nvrtc_stack_check.py"


def fake_ltoir(minor: int, size: int) -> bytes:
    """Bytes with a raw LTO-IR header (magic, code version 1.<minor>) and ``size`` in all."""
    return b"\xedCN\x7f" + bytes([1, minor]) + b"\x5a" * (size - 6)


# --- the container writer -----------------------------------------------------------


def test_container_round_trips_through_the_reader() -> None:
    ir80, ir90 = fake_ltoir(64, 1001), fake_ltoir(64, 2048)
    data = make_ltoir_container([(80, ir80), (90, ir90)])
    (container,) = split_containers(data, "test")
    assert container.data == data and len(data) % 8 == 0
    first, second = container.entries
    assert (first.kind, first.arch, first.code_version) == ("lto-ir", 80, (1, 64))
    assert (second.kind, second.arch) == ("lto-ir", 90)
    assert not first.compressed and first.flags == 0x11
    assert first.header_size == 120  # nvcc's LTO-IR entry header, options record included
    assert first.payload_size == 1008  # padded to 8
    start = first.offset + first.header_size
    assert data[start : start + 1001] == ir80 and not any(data[start + 1001 : start + 1008])
    start = second.offset + second.header_size
    assert data[start : start + 2048] == ir90
    options = data[16 + 64 : 16 + 120]
    offset, length = struct.unpack_from("<II", options)
    assert (offset, length) == (72, 40)
    assert options[8 : 8 + length] == b"-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1 "


def test_code_version_comes_from_the_ltoir_header() -> None:
    assert ltoir_code_version(fake_ltoir(67, 64)) == (1, 67)
    with pytest.raises(DeviceCodeError, match="not raw LTO-IR"):
        ltoir_code_version(b"\x7fELF" + bytes(60))
    with pytest.raises(DeviceCodeError, match="not raw LTO-IR"):
        make_ltoir_container([(80, b"PTX")])


# --- include scanning (NVRTC has no -MD) ------------------------------------------


def test_include_dependencies_follow_quotes_angles_and_nesting(tmp_path: Path) -> None:
    src, inc = tmp_path / "src", tmp_path / "inc"
    (src / "sub").mkdir(parents=True)
    inc.mkdir()
    (src / "k.cu").write_text(
        '#include "sub/local.cuh"\n  #  include <lib.h>\n#include <cooperative_groups.h>\n'
    )
    (src / "sub" / "local.cuh").write_text('#include "near.h"\n#include "k.cu"\n')
    (src / "sub" / "near.h").write_text("#pragma once\n")
    (inc / "lib.h").write_text('#include "lib_detail.h"\n')
    (inc / "lib_detail.h").write_text('#include "lib.h"\n')  # a cycle
    deps = _nvrtc.include_dependencies(src / "k.cu", [inc])
    assert {p.relative_to(tmp_path).as_posix() for p in deps} == {
        "src/sub/local.cuh",
        "src/sub/near.h",
        "inc/lib.h",
        "inc/lib_detail.h",
    }


# --- finding NVRTC ----------------------------------------------------------------


def test_installed_nvrtc_knows_both_wheel_layouts(tmp_path: Path) -> None:
    site12, site13 = tmp_path / "a", tmp_path / "b"
    for site, rel in (
        (site12, "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"),
        (site13, "nvidia/cu13/lib/libnvrtc.so.13"),
    ):
        (site / rel).parent.mkdir(parents=True)
        (site / rel).write_bytes(b"")
    found = _nvrtc.installed_nvrtc([str(site12), str(site13)])
    assert [p.name for p in found] == ["libnvrtc.so.13", "libnvrtc.so.12"]  # newest major first
    (site12 / "nvidia/cuda_runtime/include").mkdir(parents=True)
    assert _nvrtc.wheel_include_dirs(12, [str(site12), str(site13)]) == [
        site12 / "nvidia/cuda_runtime/include"
    ]
    assert _nvrtc.wheel_include_dirs(13, [str(site12)]) == []


def test_nvrtc_override_that_is_not_a_file_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match=r"SKBUILD_CUDAQ_NVRTC=.*nvidia-cuda-nvrtc-cu12"):
        _nvrtc.find_nvrtc(env={_nvrtc.NVRTC_ENV: str(tmp_path / "nope.so")})


def _fake_nvcc(tmp_path: Path) -> Path:
    nvcc = tmp_path / "toolkit" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\nexit 1\n")
    nvcc.chmod(0o755)
    return nvcc


def test_no_nvrtc_where_nvcc_is_installed_names_the_nvrtc_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVRTC asked for (the nvrtc command, compiler = "nvrtc") on a machine with nvcc: the
    message said "with no nvcc"; it names the [nvrtc] extra and the nvcc found (issue 56)."""
    nvcc = _fake_nvcc(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])  # no NVRTC (or nvcc) wheel along it
    with pytest.raises(ToolchainError) as info:
        _nvrtc.find_nvrtc(env={"PATH": str(nvcc.parent), "SKBUILD_CUDAQ_CUDA_ROOTS": ""})
    text = str(info.value)
    assert "with no nvcc" not in text and "NVRTC was asked for" in text
    assert '"skbuild-cudaq[nvrtc]"' in text and f"({nvcc})" in text
    no_toolkit = {"PATH": str(tmp_path / "none"), "SKBUILD_CUDAQ_CUDA_ROOTS": ""}
    with pytest.raises(ToolchainError, match="NVRTC not found: with no nvcc"):
        _nvrtc.find_nvrtc(env=no_toolkit)


def test_the_nvrtc_command_without_nvrtc_says_so_in_one_line(tmp_path: Path) -> None:
    nvcc = _fake_nvcc(tmp_path)
    env = dict(os.environ, PATH=f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}")
    env[_nvrtc.NVRTC_ENV] = str(tmp_path / "nope.so")
    done = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "nvrtc", "--find"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "nope.so' is not a file" in line and "skbuild-cudaq[nvrtc]" in line, line
    assert "with no nvcc" not in line and "Traceback" not in done.stderr


def test_options_carry_includes_definitions_and_standard() -> None:
    options = _nvrtc.nvrtc_options(90, include_dirs=["/i"], defines=["A=1"], std="c++20")
    assert options == [
        "-dlto",
        "-rdc=true",
        "-arch=compute_90",
        "-default-device",
        "-std=c++20",
        "-I/i",
        "-DA=1",
    ]
    assert "-std=c++17" in _nvrtc.nvrtc_options(80)


# --- the compiler setting reaches CMake -------------------------------------------


def test_compiler_setting_becomes_a_cmake_define(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.cudaq]\ncompiler = "nvrtc"\n')
    defines = cmake_defines(tmp_path)
    assert defines == {"SKBUILD_CUDAQ_COMPILER": "nvrtc", "SKBUILD_CUDAQ_PYTHON": sys.executable}
    (tmp_path / "pyproject.toml").write_text('[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n')
    defines = cmake_defines(tmp_path)
    # "auto" too: a kept build directory's cache must not keep an earlier choice
    assert defines["SKBUILD_CUDAQ_COMPILER"] == "auto"
    assert defines["SKBUILD_CUDAQ_PYTHON"] == sys.executable
    (tmp_path / "pyproject.toml").write_text(
        '[tool.cudaq]\ncompiler = "nvcc"\n[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n'
    )
    assert cmake_defines(tmp_path)["SKBUILD_CUDAQ_COMPILER"] == "nvcc"
    # a -C cmake.define of the user's wins over [tool.cudaq] compiler
    user = {"cmake.define.SKBUILD_CUDAQ_COMPILER": "nvrtc"}
    prepared = prepare_config_settings(user, tmp_path)
    assert prepared["cmake.define.SKBUILD_CUDAQ_COMPILER"] == "nvrtc"
    assert prepared["cmake.define.SKBUILD_CUDAQ_KERNEL_COUNT"] == "1"
    # ... and so does one in [tool.scikit-build.cmake.define], as for the build's requirements
    (tmp_path / "pyproject.toml").write_text(
        '[tool.scikit-build.cmake.define]\nSKBUILD_CUDAQ_COMPILER = "nvrtc"\n'
        '[tool.cudaq]\ncompiler = "nvcc"\n[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n'
    )
    assert "cmake.define.SKBUILD_CUDAQ_COMPILER" not in prepare_config_settings({}, tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.cudaq]\n")
    assert cmake_defines(tmp_path) == {}


def test_the_compiler_environment_variable_reaches_cmake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$SKBUILD_CUDAQ_COMPILER beats [tool.cudaq] compiler and [tool.scikit-build.cmake.define]
    in what the backend hands CMake; -C cmake.define beats it (issue 56)."""
    (tmp_path / "k.cu").write_text("")
    monkeypatch.setenv("SKBUILD_CUDAQ_COMPILER", "nvrtc")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.scikit-build.cmake.define]\nSKBUILD_CUDAQ_COMPILER = "nvcc"\n'
        '[tool.cudaq]\ncompiler = "nvcc"\n[tool.cudaq.dispatch-kernels]\n_core = ["k.cu"]\n'
    )
    assert prepare_config_settings({}, tmp_path)["cmake.define.SKBUILD_CUDAQ_COMPILER"] == "nvrtc"
    user = {"cmake.define.SKBUILD_CUDAQ_COMPILER": "auto"}
    assert prepare_config_settings(user, tmp_path)["cmake.define.SKBUILD_CUDAQ_COMPILER"] == "auto"
    (tmp_path / "pyproject.toml").write_text("[tool.cudaq]\n")  # no kernels: still handed over
    assert cmake_defines(tmp_path)["SKBUILD_CUDAQ_COMPILER"] == "nvrtc"
    monkeypatch.setenv("SKBUILD_CUDAQ_COMPILER", "")
    assert cmake_defines(tmp_path) == {}


def test_extras_bring_one_cuda_major_each() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras["runtime"] == extras["cu13"]
    assert "cuda-bindings>=12.9,<13" in extras["cu12"]
    assert "nvidia-nvjitlink-cu12>=12.9,<13" in extras["cu12"]
    assert "cuda-bindings>=13.0,<14" in extras["cu13"]
    assert any(r.startswith("nvidia-nvjitlink>=13.") for r in extras["cu13"])


# --- NVRTC 13 of the test venv (toolchain) ------------------------------------------


@pytest.fixture(scope="session")
def nvrtc() -> _nvrtc.Nvrtc:
    try:
        return _nvrtc.find_nvrtc()
    except ToolchainError as exc:
        pytest.skip(f"no NVRTC in this environment: {exc}")


@pytest.mark.toolchain
def test_nvrtc_container_has_nvcc_layout(nvrtc: _nvrtc.Nvrtc, nvcc: Path, tmp_path: Path) -> None:
    """Entry header of an NVRTC fatbin == nvcc's (uncompressed) but for code size/version."""
    src = tmp_path / "s.cu"
    src.write_text(
        'extern "C" __device__ int f(int x) { return x + 1; }\n'
        'extern "C" __global__ void k(int *p) { *p = f(*p); }\n'
    )
    ours = tmp_path / "ours.fatbin"
    _nvrtc.compile_file(src, ours, architectures=["80"], nvrtc=nvrtc)
    theirs = tmp_path / "theirs.fatbin"
    subprocess.run(
        [str(nvcc), "-fatbin", "-rdc=true", "-gencode=arch=compute_80,code=lto_80",
         "--no-compress", "-o", str(theirs), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (a,), (b,) = read_fatbin_file(ours), read_fatbin_file(theirs)
    (ea,), (eb,) = a.entries, b.entries
    assert (ea.kind_code, ea.arch, ea.header_size, ea.flags) == (
        eb.kind_code, eb.arch, eb.header_size, eb.flags
    )  # fmt: skip
    # options record: the same bytes
    assert a.data[16 + 64 : 16 + 120] == b.data[16 + 64 : 16 + 120]
    assert ea.code_version[0] == eb.code_version[0] == 1


@pytest.mark.toolchain
def test_nvrtc_error_carries_its_log(nvrtc: _nvrtc.Nvrtc, tmp_path: Path) -> None:
    src = tmp_path / "bad kernel.cu"
    src.write_text('extern "C" __global__ void k() { undeclared_thing(); }\n')
    with pytest.raises(CompileError) as info:
        _nvrtc.compile_file(src, tmp_path / "x.fatbin", architectures=["80"], nvrtc=nvrtc)
    text = str(info.value)
    assert "failed to compile" in text and str(src) in text
    assert "undeclared_thing" in text and "-arch=compute_80" in text
    assert not (tmp_path / "x.fatbin").exists()


@pytest.mark.toolchain
def test_cli_writes_fatbin_and_depfile(nvrtc: _nvrtc.Nvrtc, tmp_path: Path) -> None:
    out = tmp_path / "out dir" / "k.fatbin"
    src = ROOT / "example_app" / "src" / "single_thread_dispatcher.cu"
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "nvrtc", str(src), "-o", str(out),
         "--arch", "80", "--arch", "90", f"-I{include_dir()}", "-DUNUSED=1", "--std=-std=c++17",
         "--depfile", f"{out}.d", "--ptx", f"{out}.ptx"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (container,) = read_fatbin_file(out)
    assert [(e.kind, e.arch) for e in container.entries] == [("lto-ir", 80), ("lto-ir", 90)]
    depfile = Path(f"{out}.d").read_text()
    assert depfile.startswith(str(out).replace(" ", "\\ ") + ":")
    assert "unified_dispatch_device.cuh" in depfile and str(src) in depfile
    ptx = Path(f"{out}.ptx").read_text()  # what names the kernels (device-code records)
    assert ".target sm_80" in ptx and ".visible .entry single_thread_dispatcher(" in ptx
    found = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "nvrtc", "--find"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert found == f"{nvrtc.version[0]}.{nvrtc.version[1]};{nvrtc.library}"


# --- each CUDA major in its own environment (integration) --------------------------


def _stack_check(python: str, out: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    from skbuild_cudaq.realtime.link.device_runtime import runtime_dir

    proc = subprocess.run(
        [python, str(STACK_CHECK), str(out), "--nvcc-runtime", str(runtime_dir())],
        capture_output=True, text=True, check=False, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def _check_links(report: dict[str, object]) -> None:
    links = report["links"]
    assert isinstance(links, dict) and set(links) == {"sm_80", "sm_90", "sm_100"}
    for arch, result in links.items():
        assert result["missing"] == [], arch
        assert set(result["handlers"]) >= {"rpc_increment", "echo", "block_reverse"}, arch
        assert result["cluster"] == (arch != "sm_80")


@pytest.mark.integration
@pytest.mark.toolchain
def test_cuda13_stack_builds_with_nvrtc_and_links(nvrtc: _nvrtc.Nvrtc, tmp_path: Path) -> None:
    if nvrtc.major != 13:
        pytest.skip(f"the test venv's NVRTC is {nvrtc.describe()}, not CUDA 13")
    report = _stack_check(sys.executable, tmp_path)
    assert report["nvrtc"][0] == report["nvjitlink"][0] == 13  # type: ignore[index]
    _check_links(report)


CU12_WHEELS = (
    "cuda-bindings==12.9.*",
    "nvidia-nvjitlink-cu12==12.9.*",
    "nvidia-cuda-nvrtc-cu12==12.9.*",
    "nvidia-cuda-runtime-cu12==12.9.*",
    "nvidia-cuda-cccl-cu12==12.9.*",
    "pyelftools>=0.31",
)


@pytest.fixture(scope="session")
def cu12_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python whose environment holds the CUDA 12 stack (``SKBUILD_CUDAQ_CU12_PYTHON``, or
    a virtual environment made here from the package index); skips when it cannot be made."""
    given = os.environ.get("SKBUILD_CUDAQ_CU12_PYTHON")
    if given:
        return given
    where = tmp_path_factory.mktemp("cu12-venv")
    venv.EnvBuilder(with_pip=True).create(where)
    python = str(where / "bin" / "python")
    proc = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *CU12_WHEELS],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if proc.returncode != 0:
        shutil.rmtree(where, ignore_errors=True)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"cannot install the CUDA 12 wheels ({', '.join(CU12_WHEELS)}): {tail}")
    return python


@pytest.mark.integration
@pytest.mark.toolchain
def test_cuda12_stack_builds_with_nvrtc_and_links(cu12_python: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR", None)
    report = _stack_check(cu12_python, tmp_path, env)
    assert report["nvrtc"] == [12, 9] and report["nvjitlink"] == [12, 9]
    assert report["code_versions"] == ["1.64"]
    _check_links(report)
    # the nvcc 13 device run time is refused before nvJitLink runs, naming the fix
    refused = report["nvcc_runtime"]
    assert isinstance(refused, dict) and refused["refused"] and refused["log"] == ""
    assert "skbuild-cudaq[cu13]" in refused["message"]
    assert "nvJitLink 12.9" in refused["message"]


# --- a downstream build with no nvcc anywhere (CMake, compiler = "auto") ------------

#: Where this machine's toolkit lives: hidden from CMake so that "auto" finds no nvcc.
HIDE_NVCC = "/usr/local/bin;/usr/local/cuda/bin;/usr/local/cuda-13.0/bin;/usr/local/cuda-13/bin"


def _build_without_nvcc(src: Path, out: Path, build_dir: Path) -> tuple[Path, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDACXX", "CMAKE_CUDA_COMPILER")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists()
    )
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = "2"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v",
         "--disable-pip-version-check", "-w", str(out), "-C", f"build-dir={build_dir}",
         "-C", "build.verbose=true", "-C", f"cmake.define.CMAKE_IGNORE_PATH={HIDE_NVCC}",
         str(src)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    (wheel,) = out.glob("*.whl")
    return wheel, log


@pytest.mark.integration
@pytest.mark.toolchain
def test_auto_compiler_without_nvcc_builds_with_nvrtc(nvrtc: _nvrtc.Nvrtc, tmp_path: Path) -> None:
    import zipfile

    from skbuild_cudaq.fatbin import read_relfatbin_sections

    src = tmp_path / "src dir" / "plain_backend"
    shutil.copytree(ROOT / "tests" / "packages" / "plain_backend", src)
    build_dir = tmp_path / "build"
    wheel, log = _build_without_nvcc(src, tmp_path / "dist", build_dir)
    version = f"{nvrtc.version[0]}.{nvrtc.version[1]}"
    assert f"skbuild-cudaq: device compiler: NVRTC {version}" in log
    assert "nvcc (LTO-IR" not in log
    # one steps runner per source (NVRTC runs in it), and the handler switch
    assert log.count("_run_device_compile.py") == 3, log[-4000:]
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    (module,) = (tmp_path / "site").glob("plain_backend*.so")
    (section,) = read_relfatbin_sections(module)
    entries = [e for c in section.containers for e in c.entries]
    assert len(section.containers) == 3  # the kernel, the handlers and the handler switch
    # inspect names the compiler of each container: NVRTC and its version
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", str(module)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout.count(f"(side-compiled, NVRTC {version}, sm_80)") == 3, proc.stdout
    assert {(e.kind, e.arch) for e in entries} == {("lto-ir", 80)}
    proc = subprocess.run(
        [sys.executable, "-c", "import plain_backend"],
        cwd=tmp_path / "site", capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # a rebuild with nothing changed runs NVRTC for nothing; touching the header re-runs both
    _, again = _build_without_nvcc(src, tmp_path / "dist2", build_dir)
    assert "_run_device_compile.py" not in again
    header = include_dir() / "cudaq" / "realtime" / "unified_dispatch_device.cuh"
    depfiles = list(build_dir.rglob("*.fatbin.d"))
    assert len(depfiles) == 3 and all(str(header) in d.read_text() for d in depfiles)


@pytest.mark.integration
@pytest.mark.toolchain
def test_compiler_back_to_auto_reaches_a_kept_build_directory(
    nvrtc: _nvrtc.Nvrtc, nvcc: Path, tmp_path: Path
) -> None:
    """``compiler = "nvrtc"``, then the key removed ("auto", the default): a build directory
    that stays (``-C build-dir``, editable rebuilds) compiles with nvcc again, as a fresh one
    would; CMake's cache kept "nvrtc" when the backend passed nothing for "auto"."""
    src = tmp_path / "pkg"
    shutil.copytree(ROOT / "tests" / "packages" / "two_kernels", src, symlinks=False)
    pyproject = src / "pyproject.toml"
    declared = pyproject.read_text()

    def build(dist: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v",
             "--disable-pip-version-check", "-w", str(tmp_path / dist),
             "-C", f"build-dir={tmp_path / 'build'}", str(src)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        return proc.stdout + proc.stderr

    pyproject.write_text(declared + '\n[tool.cudaq]\ncompiler = "nvrtc"\n')
    assert "skbuild-cudaq: device compiler: NVRTC" in build("dist1")
    pyproject.write_text(declared)
    log = build("dist2")
    assert f"skbuild-cudaq: device compiler: nvcc ({nvcc}" in log, log[-4000:]
    assert "skbuild-cudaq: nvcc (LTO-IR 80;90) first.cu for two_kernels" in log, log[-4000:]


@pytest.mark.toolchain
def test_kept_build_directory_finds_nvrtc_again_for_another_major(
    nvrtc: _nvrtc.Nvrtc, tmp_path: Path
) -> None:
    """CMake cached the NVRTC it found and kept it when SKBUILD_CUDAQ_NVRTC_MAJOR changed:
    the configure passed, labelled the compile (and its build record) with the old NVRTC,
    and the compile ran another one, or failed at build time. Now the new major is looked
    for at configure time, as in a fresh build directory (CUDA 11: never installed)."""
    from skbuild_cudaq import cmake_dir

    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not on PATH")
    (tmp_path / "k.cu").write_text('extern "C" __global__ void k() {}\n')
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(kept LANGUAGES C)\n"
        "add_library(mod MODULE)\nfind_package(skbuild_cudaq CONFIG REQUIRED)\n"
        "cudaq_realtime_add_dispatch_kernel(mod k.cu)\n"
    )

    def configure(*defines: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cmake, "-S", str(tmp_path), "-B", str(tmp_path / "build"),
             f"-Dskbuild_cudaq_DIR={cmake_dir()}", "-DSKBUILD_CUDAQ_COMPILER=nvrtc",
             f"-DSKBUILD_CUDAQ_PYTHON={sys.executable}", *defines],
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    first = configure()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "skbuild-cudaq: device compiler: NVRTC" in first.stdout
    again = configure("-DSKBUILD_CUDAQ_NVRTC_MAJOR=11")
    assert again.returncode != 0, again.stdout + again.stderr
    text = " ".join(again.stderr.split())
    assert "no device compiler: NVRTC of CUDA 11 not found" in text, text


# --- the run time picks the device run-time set of the installed nvJitLink ----------


def test_runtime_set_follows_the_nvjitlink_major(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skbuild_cudaq import device_runtime_dir
    from skbuild_cudaq.realtime.link import _nvjitlink
    from skbuild_cudaq.realtime.link.device_runtime import runtime_device_code, runtime_dir

    container = make_ltoir_container([(80, fake_ltoir(65, 64))])
    (tmp_path / "cu13").mkdir()
    (tmp_path / "cu13" / "k.fatbin").write_bytes(container)
    monkeypatch.setenv("SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR", str(tmp_path))
    assert device_runtime_dir(12) == tmp_path / "cu12"
    assert device_runtime_dir(13) == tmp_path / "cu13"
    for version, expected in (("12.9.86", "cu12"), ("13.0.88", "cu13")):
        info = _nvjitlink.NvJitLinkInfo(tmp_path / "lib.so", "nvidia-nvjitlink", version)
        monkeypatch.setattr(_nvjitlink, "installed_nvjitlink", lambda info=info: info)
        assert runtime_dir() == tmp_path / expected
        assert device_runtime_dir() == tmp_path / "cu13"  # the path helper: the newest set
    # without a wheel version, the library's name tells the major
    info = _nvjitlink.NvJitLinkInfo(tmp_path / "libnvJitLink.so.12.9.86")
    monkeypatch.setattr(_nvjitlink, "installed_nvjitlink", lambda: info)
    assert runtime_dir() == tmp_path / "cu12"
    assert len(runtime_device_code(device_runtime_dir(13)).inputs) == 1
    with pytest.raises(DeviceCodeError) as info:
        runtime_device_code(device_runtime_dir(12))
    text = str(info.value)
    assert "built for CUDA 13, not for CUDA 12" in text
    assert "skbuild-cudaq[cu13]" in text and "\n" not in text
    # a flat set (a build tree) is used as it is
    monkeypatch.setenv("SKBUILD_CUDAQ_DEVICE_RUNTIME_DIR", str(tmp_path / "cu13"))
    assert device_runtime_dir(12) == tmp_path / "cu13"
