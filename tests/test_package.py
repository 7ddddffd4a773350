from __future__ import annotations

import email
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import skbuild_cudaq

ROOT = Path(__file__).resolve().parent.parent


def test_cmake_dir_cli_prints_package_directory() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "--cmake-dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(skbuild_cudaq.cmake_dir())
    assert (skbuild_cudaq.cmake_dir() / "skbuild_cudaqConfig.cmake").is_file()


def test_cli_prints_one_directory_at_a_time() -> None:
    both = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "--include-dir", "--cmake-dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
    assert both.stdout == ""


def test_inspect_of_a_wheel_names_the_command_for_wheels(tmp_path: Path) -> None:
    wheel = tmp_path / "my_app-0.1.0-cp312-cp312-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("my_app/_core.so", b"\x7fELF")
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "inspect", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0
    assert f"is a zip archive (a wheel?), not a binary: `skbuild-cudaq check {wheel}`" in (
        proc.stderr
    )


def test_device_header_ships() -> None:
    header = skbuild_cudaq.include_dir() / "cudaq" / "realtime" / "unified_dispatch_device.cuh"
    assert header.is_file()


def test_device_runtime_fatbins_ship() -> None:
    names = sorted(p.name for p in skbuild_cudaq.device_runtime_dir().glob("*.fatbin"))
    assert names == [
        "hook_defaults.fatbin", "host_ring_bridge.fatbin", "unified_dispatch_kernel.fatbin",
    ]  # fmt: skip


def test_device_runtime_ships_one_set_per_cuda_major() -> None:
    """Built from NVRTC 12.9 and 13.0 (build-system.requires): each set's LTO-IR comes from
    its own major, and no newer than the oldest nvJitLink its extra accepts."""
    from skbuild_cudaq._paths import device_runtime_sets
    from skbuild_cudaq.fatbin import read_fatbin_file
    from skbuild_cudaq.realtime.link._nvjitlink import ir_release

    root = skbuild_cudaq.device_runtime_dir().parent
    sets = device_runtime_sets(root)
    assert set(sets) == {12, 13}, f"{root}: {sorted(p.name for p in root.iterdir())}"
    for major, directory in sets.items():
        assert sorted(p.name for p in directory.glob("*.fatbin")) == [
            "hook_defaults.fatbin",
            "host_ring_bridge.fatbin",
            "unified_dispatch_kernel.fatbin",
        ]
        for fatbin in directory.glob("*.fatbin"):
            for container in read_fatbin_file(fatbin):
                for entry in container.entries:
                    assert entry.kind == "lto-ir" and entry.arch == 80
                    assert ir_release(entry.code_version) == {12: (12, 9), 13: (13, 0)}[major]


def test_the_package_is_marked_typed() -> None:
    """PEP 561: without py.typed, type checkers skip the package's annotations."""
    assert (Path(skbuild_cudaq.__file__).parent / "py.typed").is_file()


# ---------------------------------------------------------------------------------------------
# The distributions: what `python -m build` makes of the checkout (sdist, then a wheel from it)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """sdist and wheel of the checkout; the wheel is built from the sdist (so the sdist is
    complete). Needs nvcc (the device run time is compiled into the wheel)."""
    from skbuild_cudaq.build._toolchain import find_nvcc
    from skbuild_cudaq.errors import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("dists")
    proc = subprocess.run(
        # -x: build-system.requires pins NVRTC 12.9 and 13.0 for the device run time; here it
        # is built by whatever NVRTC (or nvcc) this environment has
        [sys.executable, "-m", "build", "--no-isolation", "-x", "-o", str(out), str(ROOT)],
        capture_output=True, text=True, check=False,
        env=dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1"),
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dists(sdist, wheel)


def _metadata(dists: Dists) -> tuple[Message, Message]:
    with tarfile.open(dists.sdist) as tf:
        member = next(
            m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")
        )
        f = tf.extractfile(member)
        assert f is not None
        sdist_meta = email.message_from_bytes(f.read())
    with zipfile.ZipFile(dists.wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        wheel_meta = email.message_from_bytes(zf.read(name))
    return sdist_meta, wheel_meta


@pytest.mark.toolchain
def test_license_file_ships_in_sdist_and_wheel(dists: Dists) -> None:
    license_text = (ROOT / "LICENSE").read_bytes()
    assert license_text.lstrip().startswith(b"Apache License")
    assert b"Version 2.0, January 2004" in license_text
    assert b"END OF TERMS AND CONDITIONS" in license_text  # the full text, not a notice
    with tarfile.open(dists.sdist) as tf:
        (member,) = (
            m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE")
        )
        f = tf.extractfile(member)
        assert f is not None and f.read() == license_text
    with zipfile.ZipFile(dists.wheel) as zf:
        (name,) = (n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE"))
        assert zf.read(name) == license_text
        assert "skbuild_cudaq/py.typed" in zf.namelist()
    for meta in _metadata(dists):
        assert meta["License-Expression"] == "Apache-2.0"
        assert meta.get_all("License-File") == ["LICENSE"]


@pytest.mark.toolchain
def test_metadata_urls_and_classifiers(dists: Dists) -> None:
    for meta in _metadata(dists):
        urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
        assert {"Homepage", "Documentation", "Source", "Issues"} <= set(urls), urls
        assert all(u.startswith("https://") for u in urls.values()), urls
        classifiers = set(meta.get_all("Classifier") or [])
        assert "Typing :: Typed" in classifiers
        assert "Operating System :: POSIX :: Linux" in classifiers
        # License-Expression replaces the License :: classifiers (PEP 639 forbids both)
        assert not any(c.startswith("License ::") for c in classifiers)
        # one classifier per supported Python minor, starting at Requires-Python's floor
        floor = SpecifierSet(meta["Requires-Python"])
        minors = sorted(
            int(c.rsplit(".", 1)[1]) for c in classifiers
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        )  # fmt: skip
        assert minors, classifiers
        assert minors == list(range(minors[0], minors[-1] + 1)), minors
        assert f"3.{minors[0]}" in floor and f"3.{minors[0] - 1}" not in floor, (minors, floor)


@pytest.mark.toolchain
def test_no_requirement_is_listed_twice(dists: Dists) -> None:
    """A distribution appears once in the base requirements, once at most per extra, and an
    extra does not repeat what the base already requires (``pyelftools`` was once in both)."""
    for meta in _metadata(dists):
        base: list[str] = []
        extras: dict[str, list[str]] = {}
        for text in meta.get_all("Requires-Dist") or []:
            req = Requirement(text)
            extra = re.search(r"extra == \"([^\"]+)\"", str(req.marker or ""))
            (extras.setdefault(extra.group(1), []) if extra else base).append(
                canonicalize_name(req.name)
            )
        assert len(base) == len(set(base)), base
        # ELF files are read by skbuild_cudaq.fatbin itself; pyelftools only checks it in tests
        assert "pyelftools" not in base and "pyelftools" not in extras.get("runtime", [])
        for extra, names in extras.items():
            assert len(names) == len(set(names)), (extra, names)
            assert not set(names) & set(base), (extra, sorted(set(names) & set(base)))


@pytest.mark.toolchain
def test_the_wheel_is_abi3_and_carries_the_compiled_ring_client(dists: Dists) -> None:
    """One wheel per platform for every CPython from 3.10 (cmake/FastClient.cmake builds
    ``_fastcall`` against the limited API); built here with a C compiler, so it is in."""
    import sysconfig

    name = dists.wheel.name
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("a free-threaded CPython has no stable ABI")
    assert re.search(r"-cp310-abi3-linux_\w+\.whl$", name), name
    with zipfile.ZipFile(dists.wheel) as zf:
        names = zf.namelist()
        wheel_meta = zf.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    assert "Root-Is-Purelib: false" in wheel_meta
    assert "skbuild_cudaq/realtime/ring/_fastcall.abi3.so" in names, sorted(names)
    assert "skbuild_cudaq/realtime/host/_native.abi3.so" in names, sorted(names)  # required
    assert "skbuild_cudaq/realtime/host/_native.pyi" in names
    assert "skbuild_cudaq/include/cudaq/realtime/host_handler.h" in names
    assert "skbuild_cudaq/realtime/ring/_fastcall.pyi" in names
    # the ring atomics of the Python paths (cmake/RingAtomics.cmake): required, like _native
    assert "skbuild_cudaq/realtime/ring/_atomics.abi3.so" in names, sorted(names)
    assert "skbuild_cudaq/realtime/ring/_atomics.pyi" in names
    # the C sources are compiled into the three modules, not shipped beside them
    assert not [n for n in names if n.endswith((".c", "internal.h", "fastcall.h"))], names
    # the C sources travel in the sdist (a build from it compiles the modules)
    with tarfile.open(dists.sdist) as tf:
        members = [m.name for m in tf]
    for source in (
        "ring/fastcall/fastcall.h",
        "ring/fastcall/round_trip.c",
        "host/native/internal.h",
        "host/native/loop.c",
        "host/native/udp_feeder.c",
        "ring/_atomics.c",
    ):
        assert any(m.endswith(f"skbuild_cudaq/realtime/{source}") for m in members), source
    assert any(m.endswith("cmake/FastClient.cmake") for m in members)
    assert any(m.endswith("cmake/NativeCore.cmake") for m in members)
    assert any(m.endswith("cmake/RingAtomics.cmake") for m in members)
