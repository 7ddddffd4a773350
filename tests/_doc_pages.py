"""Pages that tests follow literally: their project files and their commands.

A page's console blocks are commands (``$ `` lines, in order; a line ending in ``# needs a GPU``
runs only where a GPU is) and its code blocks whose first line names a file (``# my_app/x``,
``// my_app/src/x.cu``) are the project. ``tests/test_getting_started.py`` follows
``docs/getting-started.md``, ``tests/test_ci_recipe.py`` ``docs/guides/ci.md``,
``tests/test_setuptools_guide.py`` ``docs/guides/setuptools.md``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

__all__ = [
    "GPU_MARK",
    "PROJECT",
    "Command",
    "blocks",
    "checkout_copy",
    "commands_of",
    "files_of",
    "install_project",
    "user_env",
    "write_project",
]

PROJECT = "my_app"
GPU_MARK = "# needs a GPU"

_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
_FILE_LINE = re.compile(r"^(?:#|//)\s*(?P<path>my_app/\S+)\s*$")


@dataclass(frozen=True)
class Command:
    line: str  #: what runs (one shell line; continuation lines joined)
    gpu: bool  #: marked "# needs a GPU": run only where a GPU is
    output: tuple[str, ...]  #: the lines the page shows after it


def blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, body)`` of every fenced code block, in order."""
    return [(m.group("info").strip(), m.group("body")) for m in _FENCE.finditer(text)]


def files_of(text: str) -> dict[str, str]:
    """The project files a page shows: code blocks whose first line names ``my_app/...``."""
    found: dict[str, str] = {}
    for _info, body in blocks(text):
        first = body.split("\n", 1)[0]
        m = _FILE_LINE.match(first)
        if m:
            assert m.group("path") not in found, f"{m.group('path')} is shown twice"
            found[m.group("path")] = body
    return found


def commands_of(text: str) -> list[Command]:
    """The ``$`` lines of every ``console`` block, in order, with the output shown after each."""
    out: list[Command] = []
    for info, body in blocks(text):
        if info != "console":
            continue
        lines = body.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.startswith("$ "):
                continue
            command = line[2:]
            while command.endswith("\\") and i < len(lines):
                command = command[:-1] + lines[i].strip()
                i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            gpu = command.rstrip().endswith(GPU_MARK)
            if gpu:
                command = command.rstrip()[: -len(GPU_MARK)].rstrip()
            out.append(Command(command, gpu, tuple(shown)))
    return out


def write_project(files: dict[str, str], where: Path) -> Path:
    for rel, body in files.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    return where / PROJECT


def install_project(project: Path, where: Path) -> Path:
    """Build ``project``'s wheel with this environment's skbuild-cudaq (no isolation, no index)
    and install it into a target directory under ``where``: the directory to put on
    PYTHONPATH (a GPU test's way to the page's project)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-w", str(where / "dist"), str(project)],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1"),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    (wheel,) = (where / "dist").glob("*.whl")
    target = where / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
         str(target), str(wheel)],
        capture_output=True, check=True,
    )  # fmt: skip
    return target


def checkout_copy(dest: Path) -> None:
    """The checkout's files (tracked, and new ones git does not ignore): what a clone holds."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def user_env() -> dict[str, str]:
    """A user's shell: no virtual environment active, no find-links of ours."""
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PIP_FIND_LINKS"}}
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = "1"
    env.pop("PYTHONPATH", None)
    return env
