"""The source checkout shadowing the installed package (issue 56, item 12): run from inside
an unbuilt checkout, Python imports its ``skbuild_cudaq`` first; ``link`` and
``HostDispatcher`` say so in one line, naming the checkout and where to stand.

The checkout is a copy of the package's sources without what a build adds (the device run
time, the compiled modules), beside the project's ``pyproject.toml``; the interpreter runs
with ``-S`` and this environment's site-packages appended after the checkout, which is what
a non-editable install looks like (the editable install of the tests would otherwise
redirect the import).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _elf_forge import Shdr, container, entry, forge_elf

ROOT = Path(__file__).resolve().parent.parent
SITE = sysconfig.get_paths()["purelib"]
#: the interpreter as it would run from inside the checkout, installed package after it
_RUN = """
import sys
sys.path[:0] = [sys.argv[1]]
sys.path.append(sys.argv[2])
import skbuild_cudaq
assert skbuild_cudaq.__path__ == [sys.argv[1] + "/skbuild_cudaq"], skbuild_cudaq.__path__
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    where = tmp_path / "skbuild-cudaq"
    shutil.copytree(
        ROOT / "skbuild_cudaq",
        where / "skbuild_cudaq",
        ignore=shutil.ignore_patterns("_device", "*.so", "__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def _run(checkout: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-c", _RUN + code, str(checkout), SITE, *args],
        capture_output=True, text=True, check=False, cwd=checkout, timeout=300,
    )  # fmt: skip


def _says_where_to_stand(text: str, checkout: Path) -> None:
    assert f"imported from its unbuilt source checkout {checkout}" in text, text
    assert "run from outside the checkout" in text


def test_link_says_the_unbuilt_checkout_shadows_the_installed_package(
    checkout: Path, tmp_path: Path
) -> None:
    pytest.importorskip("cuda.bindings.nvjitlink")
    blob = container(entry(b"\xed\x43\x4e\x7f" + bytes(28)))
    module = tmp_path / "ext.so"
    module.write_bytes(forge_elf(blob, [Shdr("__nv_relfatbin", 0, len(blob))]))
    proc = _run(
        checkout,
        "from skbuild_cudaq.cli import main\nsys.exit(main(sys.argv[3:]))\n",
        "link", str(module), "--arch", "sm_80", "-o", str(tmp_path / "out.cubin"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("skbuild-cudaq: error: ") and "Traceback" not in proc.stderr
    _says_where_to_stand(line, checkout)


def test_host_dispatcher_says_the_unbuilt_checkout_shadows_the_installed_package(
    checkout: Path,
) -> None:
    proc = _run(
        checkout,
        "from skbuild_cudaq.realtime.errors import NotBuiltError\n"
        "try:\n"
        "    from skbuild_cudaq.realtime import HostDispatcher\n"
        "except NotBuiltError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
        "    sys.exit(3)\n",
    )
    assert proc.returncode == 3, proc.stderr
    (line,) = proc.stdout.strip().splitlines()
    _says_where_to_stand(line, checkout)


def test_an_installed_or_editable_package_gets_no_hint() -> None:
    from skbuild_cudaq._paths import source_tree_hint

    assert source_tree_hint() is None  # this environment's: the run time is built
