"""``docs/guides/setuptools.md``: its project is whole, and it builds into a wheel that checks.

The page's code blocks whose first line names ``my_app/...`` are the project. The plain test keeps
it whole (every file ``setup.py`` and the table name is shown, the run time is a dependency);
the integration test writes the files as they are and builds them with this environment's
skbuild-cudaq (``pip wheel --no-build-isolation``: getting-started's test covers the wheelhouse
and build isolation), then checks the wheel and imports the module without a GPU.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _doc_pages import PROJECT, files_of, write_project
from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PAGE = ROOT / "docs" / "guides" / "setuptools.md"


def page_files() -> dict[str, str]:
    return files_of(PAGE.read_text(encoding="utf-8"))


def _extension_call(setup_py: str) -> ast.Call:
    tree = ast.parse(setup_py)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    (ext,) = [c for c in calls if isinstance(c.func, ast.Name) and c.func.id == "Extension"]
    return ext


def _keyword(call: ast.Call, name: str) -> object:
    (value,) = [k.value for k in call.keywords if k.arg == name]
    return ast.literal_eval(value)


def test_the_page_shows_a_whole_project() -> None:
    files = page_files()
    pyproject = tomllib.loads(files[f"{PROJECT}/pyproject.toml"])
    assert pyproject["build-system"]["build-backend"] == "setuptools.build_meta"
    assert "skbuild-cudaq" in pyproject["build-system"]["requires"]
    assert pyproject["project"]["dependencies"] == ["skbuild-cudaq[runtime]"]
    ext = _extension_call(files[f"{PROJECT}/setup.py"])
    name = ast.literal_eval(ext.args[0])
    assert list(pyproject["tool"]["cudaq"]["dispatch-kernels"]) == [name]
    # every source the build names is shown, and every source shown is built
    named = set(_keyword(ext, "sources")) | {  # type: ignore[arg-type]
        s for entry in pyproject["tool"]["cudaq"]["dispatch-kernels"].values() for s in entry
    }
    shown = {rel.removeprefix(f"{PROJECT}/") for rel in files if rel.endswith((".cu", ".cpp"))}
    assert named == shown, (named, shown)
    # every project header a shown file includes is shown, under an include directory
    include_dirs = _keyword(ext, "include_dirs")
    for body in list(files.values()):
        for header in re.findall(r'#include "([^"]+)"', body):
            assert any(f"{PROJECT}/{d}/{header}" in files for d in include_dirs), header  # type: ignore[union-attr]
    # the package the wheel ships
    for package in pyproject["tool"]["setuptools"]["packages"]:
        assert f"{PROJECT}/{package}/__init__.py" in files


def test_the_page_says_what_to_install_for_each_way_of_building() -> None:
    """``python -m build`` needs the ``build`` package and ``setup.py`` needs setuptools (and
    skbuild-cudaq) in the environment: the page installs each before it is used (issue 56)."""
    commands = [
        line.strip().removeprefix("$ ").split("#")[0].strip()
        for line in PAGE.read_text(encoding="utf-8").splitlines()
        if line.strip().startswith("$ ")
    ]
    installed: set[str] = set()
    for command in commands:
        if command.startswith("pip install "):
            installed |= set(command.split()[2:])
        if "python -m build" in command:
            assert "build" in installed, commands
        if "setup.py" in command:
            assert {"setuptools", "skbuild-cudaq"} <= installed, commands
    assert any("python -m build" in c for c in commands)
    assert any("setup.py" in c for c in commands)


@pytest.mark.integration
@pytest.mark.toolchain
def test_the_page_project_builds_and_its_wheel_checks(tmp_path: Path, nvcc: Path) -> None:
    from skbuild_cudaq.realtime import check_package

    project = write_project(page_files(), tmp_path / "src")
    env = dict(os.environ, CUDACXX=str(nvcc))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(project)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (wheel,) = (tmp_path / "dist").glob("my_app-*.whl")
    report = check_package(wheel)
    assert report.ok, [str(p) for p in report.problems]
    (module,) = report.modules
    assert module.module.startswith("my_app/_core.")
    assert (module.kernels, module.handlers) == (("my_dispatcher",), ("rpc_increment",))
    assert module.architectures == ("sm_80",)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "site")
    proc = subprocess.run(
        [sys.executable, "-c", "import my_app._core"], cwd=tmp_path / "site",
        capture_output=True, text=True, check=False,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
