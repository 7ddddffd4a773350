"""``bash tools/demo.sh`` (the README's first command) on a machine with no system CMake.

Runs the script in a copy of the checkout with a ``PATH`` from which ``cmake`` and ``ninja``
are gone: pip's isolated builds must get them from PyPI through scikit-build-core. Without a
GPU the demo must end with a served two-process round trip on the host path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _doc_pages import checkout_copy, user_env

pytestmark = [pytest.mark.integration, pytest.mark.toolchain]

HIDDEN = {"cmake", "ctest", "cpack", "ccmake", "cmake-gui", "ninja"}


def path_without_cmake(shim: Path, path: str) -> str:
    """A one-directory PATH holding links to every program of ``path`` but CMake and Ninja."""
    shim.mkdir(parents=True, exist_ok=True)
    for directory in path.split(os.pathsep):
        folder = Path(directory)
        if not folder.is_dir():
            continue
        for program in folder.iterdir():
            link = shim / program.name
            if program.name in HIDDEN or link.exists() or link.is_symlink():
                continue
            link.symlink_to(program)
    return str(shim)


def test_demo_builds_links_and_serves_without_system_cmake(tmp_path: Path, nvcc: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("needs git (the demo runs in a copy of the checkout)")
    checkout = tmp_path / "checkout"
    checkout_copy(checkout)
    env = user_env()
    env["PATH"] = path_without_cmake(tmp_path / "bin", env["PATH"])
    assert shutil.which("cmake", path=env["PATH"]) is None
    assert shutil.which("ninja", path=env["PATH"]) is None
    proc = subprocess.run(
        ["bash", "tools/demo.sh"], cwd=checkout, env=env, capture_output=True, text=True,
        timeout=2400, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    assert "Traceback" not in out, out[-8000:]
    assert "No such file" not in out, out[-8000:]  # grep of a log not made yet
    assert "CUDAQ_REALTIME_SERVER_READY transport=udp" in out
    assert "CUDAQ_REALTIME_SERVER_PROCESSED count=2" in out
    assert out.count("client (another process): ") == 2
    last = proc.stdout.strip().splitlines()[-1]  # stderr holds pip's and the link's notes
    assert last.startswith("== done: built, inspected, linked for sm_"), last
    path = "host" if "== serving on the host path" in out else "device"
    assert last.endswith(f"served 2 requests on the {path} path"), last
    cubins = list((checkout / "build" / "demo").glob("example_app.sm_*.cubin"))
    assert len(cubins) == 1 and cubins[0].read_bytes()[:4] == b"\x7fELF", cubins
