"""Integration: the release checks of docs/guides/release.md on this machine's wheel.

skbuild-cudaq is built the way a release builds it (``python -m build``: the sdist, then
the wheel from the unpacked sdist; build isolation, so the build requirements of
pyproject.toml), and once more straight from the checkout. The two wheels must hold the
same files under the same tag (the sdist leaves nothing out that the wheel needs); the
artifacts must pass ``twine check``, the wheel ``abi3audit`` (the native modules use the
limited API 3.10 only) and ``auditwheel show`` (nothing outside the manylinux policy's
libraries). The cibuildwheel configuration must yield one abi3 build per Linux
architecture in the manylinux_2_28 images.
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Artifacts:
    sdist: Path
    wheel_from_sdist: Path
    wheel_from_tree: Path


def _run(*cmd: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


#: The release tools, in an environment of their own: twine pulls keyring and jaraco.*,
#: which setuptools would then import instead of its vendored copies (the docs build runs
#: with the docs extra only and would fail on them).
RELEASE_TOOLS = ("twine>=5", "abi3audit>=0.0.10", "cibuildwheel>=2.20", "auditwheel>=6.0")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh venv holding :data:`RELEASE_TOOLS`."""
    venv = tmp_path_factory.mktemp("release-tools") / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", *RELEASE_TOOLS)
    return venv / "bin"


#: What a checkout holds beside its sources (top level): environments and build outputs.
_NOT_SOURCES = {".venv", "build", "dist", ".git", ".whl", ".whl-cu12", ".mypy_cache"}


def _checkout_only(directory: str, names: list[str]) -> set[str]:
    top = Path(directory) == REPO
    return {
        n
        for n in names
        if (top and n in _NOT_SOURCES) or n == "__pycache__" or n.endswith((".so", ".pyc"))
    }


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Artifacts:
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("release")
    # a copy: build must not write into the checkout (another test may read it meanwhile)
    src = out / "src"
    shutil.copytree(REPO, src, ignore=_checkout_only)
    _run(sys.executable, "-m", "build", "-o", out / "release", src)  # sdist, wheel from it
    _run(sys.executable, "-m", "build", "--wheel", "-o", out / "tree", src)
    (sdist,) = (out / "release").glob("*.tar.gz")
    (from_sdist,) = (out / "release").glob("*.whl")
    (from_tree,) = (out / "tree").glob("*.whl")
    return Artifacts(sdist, from_sdist, from_tree)


def _wheel_tags(wheel: Path) -> tuple[str, list[str]]:
    """(the file name's tag, the WHEEL file's Tag lines)."""
    name_tag = "-".join(wheel.name.removesuffix(".whl").split("-")[2:])
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        parsed = email.parser.Parser().parsestr(z.read(meta).decode())
    return name_tag, parsed.get_all("Tag") or []


def _files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if not n.endswith(".dist-info/RECORD")}


def test_the_sdist_builds_the_same_wheel_as_the_checkout(artifacts: Artifacts) -> None:
    a, b = artifacts.wheel_from_sdist, artifacts.wheel_from_tree
    assert a.name == b.name
    assert _wheel_tags(a) == _wheel_tags(b)
    name_tag, tags = _wheel_tags(a)
    assert re.fullmatch(r"cp310-abi3-linux_\w+", name_tag), name_tag
    assert tags == [name_tag]
    files = _files(a)
    assert files == _files(b), sorted(files ^ _files(b))
    # what the run time loads is there: the native modules and both device run-time sets
    for needed in (
        "skbuild_cudaq/realtime/host/_native.abi3.so",
        "skbuild_cudaq/realtime/ring/_fastcall.abi3.so",
        "skbuild_cudaq/realtime/ring/_atomics.abi3.so",
        "skbuild_cudaq/_device/cu12/unified_dispatch_kernel.fatbin",
        "skbuild_cudaq/_device/cu13/unified_dispatch_kernel.fatbin",
        "skbuild_cudaq/include/cudaq/realtime/unified_dispatch_device.cuh",
        "skbuild_cudaq/cmake/skbuild_cudaqConfig.cmake",
    ):
        assert needed in files, needed
    assert not any(n.endswith(".c") for n in files)  # the C sources are compiled in


def test_twine_check_passes_on_the_sdist_and_the_wheel(artifacts: Artifacts, tools: Path) -> None:
    twine = tools / "twine"
    proc = _run(twine, "check", "--strict", artifacts.sdist, artifacts.wheel_from_sdist)
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def test_abi3audit_finds_only_the_limited_api(artifacts: Artifacts, tools: Path) -> None:
    abi3audit = tools / "abi3audit"
    proc = subprocess.run(
        [str(abi3audit), "--strict", "--report", str(artifacts.wheel_from_sdist)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    (spec,) = report["specs"].values()
    objects = {entry["name"]: entry["result"] for entry in spec["wheel"]}
    assert set(objects) == {"_native.abi3.so", "_fastcall.abi3.so", "_atomics.abi3.so"}
    for name, result in objects.items():
        assert result["is_abi3"] and result["non_abi3_symbols"] == [], name
        assert result["computed"] == "3.10", name


def test_auditwheel_show_finds_a_manylinux_policy_and_no_external_library(
    artifacts: Artifacts, tools: Path
) -> None:
    auditwheel = tools / "auditwheel"
    proc = _run(auditwheel, "show", artifacts.wheel_from_sdist)
    out = " ".join(proc.stdout.split())
    assert re.search(r'consistent with the following platform tag: "manylinux_2_\d+_\w+"', out), out
    assert "system-provided shared libraries: libc.so.6" in out, out
    assert "external shared libraries" not in out, out  # nothing to graft


def test_cibuildwheel_builds_one_abi3_wheel_per_linux_architecture(tools: Path) -> None:
    cibuildwheel = tools / "cibuildwheel"
    proc = _run(cibuildwheel, "--platform", "linux", "--print-build-identifiers", REPO)
    assert proc.stdout.split() == ["cp310-manylinux_x86_64", "cp310-manylinux_aarch64"]
