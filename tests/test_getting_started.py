"""``docs/getting-started.md``, followed literally.

The page is the test's input: its console blocks are the commands (``$ `` lines, in order) and its
code blocks whose first line names a file (``# my_app/pyproject.toml``, ``// my_app/src/x.cu``) are
the project. The integration test writes those files, puts a copy of this checkout at
``./skbuild-cudaq`` (what a clone would give) and runs every command in one shell, in a fresh
directory and a fresh virtual environment, with pip's build isolation: a wheelhouse built from the
checkout stands in for the package index, as the page says. The plain tests keep the page, the
README and the runner in step: an edit to the page that the runner would not follow, or a README
that shows other files, fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _doc_pages import (
    PROJECT,
    Command,
    checkout_copy,
    commands_of,
    files_of,
    install_project,
    user_env,
    write_project,
)
from _elf_helpers import relfatbin_containers
from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PAGE = ROOT / "docs" / "getting-started.md"
README = ROOT / "README.md"


def page_files() -> dict[str, str]:
    return files_of(PAGE.read_text(encoding="utf-8"))


def page_commands() -> list[Command]:
    return commands_of(PAGE.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# The page, the README and the runner agree (plain, fast)
# ---------------------------------------------------------------------------------------------


def test_the_page_shows_a_whole_project() -> None:
    files = page_files()
    pyproject = tomllib.loads(files[f"{PROJECT}/pyproject.toml"])
    assert pyproject["build-system"]["build-backend"] == "skbuild_cudaq.build"
    assert "skbuild-cudaq" in pyproject["build-system"]["requires"]
    assert pyproject["project"]["dependencies"] == ["skbuild-cudaq[runtime]"]
    cmake = files[f"{PROJECT}/CMakeLists.txt"]
    # every source the build names is shown, and every source shown is built
    named = {
        s for entry in pyproject["tool"]["cudaq"]["dispatch-kernels"].values() for s in entry
    } | set(re.findall(r"\b(src/[\w/]+\.(?:c|cu|cpp))\b", cmake))
    shown_sources = {
        rel.removeprefix(f"{PROJECT}/")
        for rel in files
        if rel.endswith((".c", ".cu", ".cpp", ".cuh", ".h"))
    }
    assert named == shown_sources, (named, shown_sources)
    assert pyproject["tool"]["scikit-build"]["wheel"]["packages"] == ["src/my_app"]
    assert f"{PROJECT}/src/my_app/__init__.py" in files
    assert f"{PROJECT}/src/my_app/__main__.py" in files  # the Python that starts it


def test_the_commands_are_the_recipe_that_works_today() -> None:
    """The install recipe: our wheel into a wheelhouse, PIP_FIND_LINKS, pip with isolation."""
    commands = page_commands()
    lines = [c.line for c in commands]
    order = [
        next(i for i, line in enumerate(lines) if re.search(pattern, line))
        for pattern in (
            r"^python3 -m venv \.venv$",
            r"^\. \.venv/bin/activate$",
            r"^pip wheel --no-deps --wheel-dir wheelhouse \./skbuild-cudaq$",
            r'^export PIP_FIND_LINKS=.*"wheelhouse"\)\.absolute\(\)\.as_uri\(\)',
            r'^pip install "skbuild-cudaq\[runtime\]"$',
            rf"^pip install \./{PROJECT}$",
            r"skbuild_cudaq inspect ",
            r"skbuild_cudaq link .* --arch sm_\d+ ",
            rf"^python -m {PROJECT}$",
        )
    ]
    assert order == sorted(order), list(zip(order, lines, strict=False))
    assert not any("--no-build-isolation" in line for line in lines)
    assert [c.line for c in commands if c.gpu] == [f"python -m {PROJECT}"]
    (run,) = (c for c in commands if c.gpu)
    assert run.output == ("0 010203",)  # what __main__.py prints: rpc_increment(00 01 02)


def test_the_find_links_export_keeps_a_value_the_user_had(tmp_path: Path) -> None:
    """The page's ``export PIP_FIND_LINKS=...`` line, run as it is: the wheelhouse first, and
    what the variable held before after it (pip splits it at spaces); nothing else when empty."""
    (line,) = [c.line for c in page_commands() if c.line.startswith("export PIP_FIND_LINKS=")]
    wheelhouse = (tmp_path / "wheelhouse").as_uri()
    for before, after in (
        (None, wheelhouse),
        ("", wheelhouse),
        ("/opt/wheels https://example.org/w", f"{wheelhouse} /opt/wheels https://example.org/w"),
    ):
        env = {k: v for k, v in os.environ.items() if k != "PIP_FIND_LINKS"}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        if before is not None:
            env["PIP_FIND_LINKS"] = before
        proc = subprocess.run(
            ["bash", "-c", f'{line}\nprintf %s "$PIP_FIND_LINKS"'], cwd=tmp_path, env=env,
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert proc.stdout == after, (before, proc.stdout)


def test_the_readme_shows_the_same_project_and_install() -> None:
    readme = README.read_text(encoding="utf-8")
    assert files_of(readme) == page_files()
    readme_lines = [c.line for c in commands_of(readme)]
    install = [c.line for c in page_commands()][:6]
    assert all(line in readme_lines for line in install), (install, readme_lines)
    for prerequisite in ("Linux", "Python ≥ 3.10", "CMake ≥ 3.25", "nvidia-cuda-nvcc", "C/C++"):
        assert prerequisite in readme, prerequisite


def test_the_parser_reads_what_a_page_can_hold() -> None:
    page = (
        "```console\n$ one \\\n  two\nshown\n$ three   # needs a GPU\n0 1\n```\n"
        "```toml\n# my_app/a.toml\nx = 1\n```\n```toml\nnot = 'a file'\n```\n"
        "```cuda\n// my_app/src/k.cu\nint k;\n```\n"
    )
    assert commands_of(page) == [
        Command("one two", False, ("shown",)),
        Command("three", True, ("0 1",)),
    ]
    assert files_of(page) == {
        "my_app/a.toml": "# my_app/a.toml\nx = 1\n",
        "my_app/src/k.cu": "// my_app/src/k.cu\nint k;\n",
    }


# ---------------------------------------------------------------------------------------------
# Following the page
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Followed:
    where: Path
    log: str


@pytest.fixture(scope="module")
def followed(tmp_path_factory: pytest.TempPathFactory, nvcc: Path) -> Followed:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the page builds skbuild-cudaq from one)")
    where = tmp_path_factory.mktemp("getting started")
    checkout_copy(where / "skbuild-cudaq")
    write_project(page_files(), where)
    script = "set -euxo pipefail\n" + "\n".join(c.line for c in page_commands() if not c.gpu)
    proc = subprocess.run(
        ["bash", "-c", script], cwd=where, env=user_env(), capture_output=True, text=True,
        timeout=1500, check=False,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"following {PAGE.name} failed:\n{log[-8000:]}"
    return Followed(where, log)


@pytest.mark.integration
@pytest.mark.toolchain
def test_following_the_page_builds_installs_and_links(followed: Followed) -> None:
    where = followed.where
    (wheel,) = (where / "wheelhouse").glob("skbuild_cudaq-*.whl")
    venv_python = where / ".venv" / "bin" / "python"
    code = (
        "import importlib.metadata as md, my_app._core as m, skbuild_cudaq;"
        "print(m.__file__); print(skbuild_cudaq.__file__);"
        "print(md.distribution('my-app').requires)"
    )
    out = subprocess.run(
        [str(venv_python), "-c", code], cwd=where, env=user_env(), capture_output=True,
        text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    module, ours, requires = out
    assert module.startswith(str(where / ".venv")), module  # installed, not the source tree
    assert ours.startswith(str(where / ".venv")), ours  # our wheel, not this checkout
    assert "skbuild-cudaq[runtime]" in requires
    # the module carries the kernel, the handler and the handler switch over its launch-wide
    # export, each in a container of its own
    assert len(relfatbin_containers(Path(module))) == 3
    cubin = (where / "my_app.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF"
    for symbol in (b"my_dispatcher", b"cudaq_handler_rpc_increment"):
        assert symbol in cubin, symbol
    assert wheel.stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# The page's GPU command (on a GPU machine; offline there, so built without isolation)
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.toolchain
def test_the_page_project_serves_on_the_gpu(tmp_path: Path, nvcc: Path) -> None:
    """``python -m my_app`` prints what the page shows. Built with the environment's
    skbuild-cudaq (no isolation, no index needed), installed into a target directory."""
    target = install_project(write_project(page_files(), tmp_path / "src"), tmp_path)
    (run,) = (c for c in page_commands() if c.gpu)
    argv = run.line.split()
    assert argv[0] == "python"
    proc = subprocess.run(
        [sys.executable, *argv[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(target)), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert tuple(proc.stdout.splitlines()) == run.output, proc.stdout
