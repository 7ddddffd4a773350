"""The ``skbuild_cudaq.build`` backend: what it hands CMake, its own config settings, errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import PACKAGES

import skbuild_cudaq
from skbuild_cudaq import build
from skbuild_cudaq.build import ConfigSettingsError, prepare_config_settings

PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10", "skbuild-cudaq"]
build-backend = "skbuild_cudaq.build"

[project]
name = "demo"
version = "0.1.0"

[tool.scikit-build.cmake.define]
CMAKE_PROJECT_INCLUDE = "mine.cmake"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.cu").write_text("")
    (tmp_path / "src" / "b.cu").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        PYPROJECT
        + textwrap.dedent("""
        [tool.cudaq.dispatch-kernels]
        _core = ["src/a.cu"]
        other = { sources = ["src/b.cu"], architectures = ["80", "90"] }
        """)
    )
    return tmp_path


def test_kernels_become_index_based_defines(project: Path) -> None:
    settings = prepare_config_settings({"cmake.define.FOO": "1"}, project)
    d = "cmake.define."
    assert settings[d + "FOO"] == "1"
    assert settings[d + "CMAKE_PROJECT_INCLUDE"] == str(
        skbuild_cudaq.cmake_dir() / "skbuild_cudaq_auto.cmake"
    )
    assert settings[d + "SKBUILD_CUDAQ_USER_PROJECT_INCLUDE"] == "mine.cmake"
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_COUNT"] == "2"
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_0_TARGET"] == "_core"
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_0_SOURCES"] == str((project / "src/a.cu").resolve())
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_0_ARCHITECTURES"] == "80"
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_1_TARGET"] == "other"
    assert settings[d + "SKBUILD_CUDAQ_KERNEL_1_ARCHITECTURES"] == "80;90"
    assert settings[d + "skbuild_cudaq_DIR"] == str(skbuild_cudaq.cmake_dir())


def test_no_kernels_no_defines(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    given = {"cmake.define.CMAKE_PROJECT_INCLUDE": "x.cmake", "cudaq.verbose": "false"}
    assert prepare_config_settings(given, tmp_path) == {
        "cmake.define.CMAKE_PROJECT_INCLUDE": "x.cmake"
    }


def test_empty_kernel_table_is_an_error_pip_shows(tmp_path: Path) -> None:
    """An empty ``[tool.cudaq.dispatch-kernels]`` declares nothing: a warning would build a
    binary without the kernel, and pip hides a successful build's output. So it fails, at the
    first hook pip calls, in one line; ``schema --check`` says the same."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT + "\n[tool.cudaq.dispatch-kernels]\n")
    expected = [
        "skbuild-cudaq: error: 1 problem in [tool.cudaq] of pyproject.toml:",
        "  - tool.cudaq.dispatch-kernels: empty table; expected at least 1 entry <target> = an "
        "array of .cu paths relative to the project directory or a table { sources = [...], "
        'architectures = [...] }; add one, e.g. _core = ["src/my_dispatcher.cu"], or remove '
        "the table",
    ]
    proc = run_hook(tmp_path, "b.get_requires_for_build_wheel()")
    assert proc.returncode == 1
    head = expected[0].replace("pyproject.toml", str(tmp_path / "pyproject.toml"))
    assert proc.stderr.splitlines() == [head, *expected[1:]], proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "schema", "--check"], cwd=tmp_path,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == expected, proc.stderr
    # no table at all: nothing to say
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    code = "print(sorted(b.prepare_config_settings({}, __import__('pathlib').Path.cwd())))"
    proc = run_hook(tmp_path, code)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_own_settings_are_stripped_and_checked(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cudaq.verbose=true turns on SKBUILD_CUDAQ_VERBOSE in the (backend) process:
    # keep that from leaking into the environment of later tests' subprocesses.
    monkeypatch.setenv("SKBUILD_CUDAQ_VERBOSE", "0")  # recorded, so undone after the test
    settings = prepare_config_settings({"cudaq.verbose": "true"}, project, for_build=False)
    assert not any(k.startswith("cudaq.") for k in settings)
    with pytest.raises(
        ConfigSettingsError, match=r"'cudaq\.verbos'; did you mean 'cudaq\.verbose'"
    ):
        prepare_config_settings({"cudaq.verbos": "1"}, project)
    with pytest.raises(ConfigSettingsError, match="is not a boolean; use true or false"):
        prepare_config_settings({"cudaq.verbose": "maybe"}, project)


def test_backend_exposes_every_pep517_hook() -> None:
    for hook in (
        "build_wheel",
        "build_sdist",
        "build_editable",
        "get_requires_for_build_wheel",
        "get_requires_for_build_sdist",
        "get_requires_for_build_editable",
        "prepare_metadata_for_build_wheel",
        "prepare_metadata_for_build_editable",
    ):
        assert callable(getattr(build, hook)), hook


def run_hook(project: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", f"import skbuild_cudaq.build as b; {code}"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )


def test_hook_error_exits_without_traceback(project: Path) -> None:
    proc = run_hook(project, "b.get_requires_for_build_wheel({'cudaq.verbos': '1'})")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(
        "skbuild-cudaq: error: unknown config setting 'cudaq.verbos'; did you mean 'cudaq.verbose'?"
    )


def test_settings_problem_exits_without_traceback(project: Path) -> None:
    from skbuild_cudaq import settings

    if "PLACEHOLDER" in (settings.__doc__ or ""):
        pytest.skip("[tool.cudaq] validation (settings.py) is not merged in this tree yet")
    text = (project / "pyproject.toml").read_text().replace('"src/a.cu"', '"src/missing.cu"')
    (project / "pyproject.toml").write_text(text)
    proc = run_hook(project, "b.get_requires_for_build_wheel()")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "tool.cudaq.dispatch-kernels._core" in proc.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            'tool = 1\n[project]\nname = "x"\nversion = "1"\n',
            "1 problem in [tool.cudaq] of {pyproject}:\n  - tool: 1 is an integer; expected a "
            "table; use [tool]",
            id="tool-not-a-table",
        ),
        pytest.param(
            '[project]\nname = "x"\nversion = "1"\n[tool.scikit-build]\noverrides = [1]\n',
            "scikit-build-core cannot read pyproject.toml (AttributeError: 'int' object has no "
            "attribute 'get'); check its [tool.scikit-build] table",
            id="scikit-build-core-import",
        ),
    ],
)
def test_pyproject_that_breaks_scikit_build_core_import_is_one_message(
    tmp_path: Path, text: str, message: str
) -> None:
    """scikit-build-core reads ./pyproject.toml when imported and lets errors escape: the
    backend still answers every hook with one line and status 1."""
    (tmp_path / "pyproject.toml").write_text(text)
    proc = run_hook(tmp_path, "b.get_requires_for_build_wheel()")
    assert proc.returncode == 1, proc.stderr
    pyproject = tmp_path / "pyproject.toml"
    assert proc.stderr == f"skbuild-cudaq: error: {message.format(pyproject=pyproject)}\n"


@pytest.mark.parametrize("escape", ["semicolon", "symlink"])
def test_sdist_and_wheel_refuse_sources_escaping_the_project(project: Path, escape: str) -> None:
    """Issue 11 item 5 through the PEP 517 hooks: no sdist with a link to outside, no ;-split."""
    outside = project.parent / "outside.cu"
    outside.write_text("// not in the project\n")
    if escape == "semicolon":
        (project / "src/a.cu;").mkdir()
        (project / "src/a.cu;/x.cu").symlink_to(outside)
        source, why = "src/a.cu;/x.cu", "contains ;, which CMake, make or nvcc would misread"
    else:
        (project / "src/link.cu").symlink_to(outside)
        source, why = "src/link.cu", "is a symbolic link (or lies under one) that resolves outside"
    text = (project / "pyproject.toml").read_text().replace('"src/a.cu"', f'"{source}"')
    (project / "pyproject.toml").write_text(text)
    for hook in ("build_sdist('dist')", "build_wheel('dist')"):
        proc = run_hook(project, f"b.{hook}")
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        assert f'  - tool.cudaq.dispatch-kernels._core[0]: "{source}" {why}' in proc.stderr
        assert not (project / "dist").exists()


@pytest.mark.integration
@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("not_a_target", "Targets of this project: two_kernels."),
        ("two_kernel", 'Did you mean "two_kernels"?'),
    ],
)
def test_declared_target_never_created_names_the_key(
    tmp_path: Path, nvcc: Path, key: str, hint: str
) -> None:
    src = tmp_path / "pkg"
    shutil.copytree(PACKAGES / "two_kernels", src)
    pyproject = src / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("\ntwo_kernels = ", f"\n{key} = "))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, env=dict(os.environ), check=False,
    )  # fmt: skip
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert (
        f"skbuild-cudaq: tool.cudaq.dispatch-kernels.{key}: the CMake project never "
        f'creates a target named "{key}".'
    ) in out, out[-3000:]
    assert f"of pyproject.toml. {hint}" in out, out[-3000:]
