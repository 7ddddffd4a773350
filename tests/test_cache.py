"""The link cache: hits, corruption, truncation, races, unsafe directories, warm starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_kernels.testbins import DeviceBinaries, build_once

from skbuild_cudaq.realtime.cache import (
    CACHE_ENV,
    LinkCache,
    cache_digest,
    cache_entry,
    cache_key,
)
from skbuild_cudaq.realtime.errors import LinkCacheError
from skbuild_cudaq.realtime.link import LinkOptions, link_device_code_ex


@pytest.fixture(scope="module")
def bins(nvcc: Path, tmp_path_factory: pytest.TempPathFactory) -> DeviceBinaries:
    return build_once(nvcc, tmp_path_factory.mktemp("testbins"))


def test_key_covers_every_input() -> None:
    base = cache_key([b"a", b"b"], ["-lto"], "sm_90", "nvjl 13.5")
    assert base == cache_key([b"a", b"b"], ["-lto"], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"a", b"c"], ["-lto"], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"ab"], ["-lto"], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"b", b"a"], ["-lto"], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"a", b"b"], [], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"a", b"b"], ["-lto", "-O3"], "sm_90", "nvjl 13.5")
    assert base != cache_key([b"a", b"b"], ["-lto"], "sm_100", "nvjl 13.5")
    assert base != cache_key([b"a", b"b"], ["-lto"], "sm_90", "nvjl 13.0")
    # the arch is the key's readable suffix; the hash before it covers all the rest
    digest = cache_digest([b"a", b"b"], ["-lto"], "nvjl 13.5")
    assert base == cache_entry(digest, "sm_90") == f"{digest}-sm_90"
    assert cache_key([b"a", b"b"], ["-lto"], "sm_90a", "nvjl 13.5") == f"{digest}-sm_90a"
    for bad in ("90", "sm_9", "../sm_90", "sm_90/x", ""):
        with pytest.raises(ValueError, match="invalid architecture"):
            cache_entry(digest, bad)


def test_env_selects_directory_or_disables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for off in ("0", "off", "OFF", "false"):
        monkeypatch.setenv(CACHE_ENV, off)
        assert not LinkCache.from_env().enabled
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert LinkCache.from_env().directory == tmp_path / "c"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert LinkCache.from_env().directory == tmp_path / "xdg" / "skbuild-cudaq" / "link"


def test_store_creates_private_directory_and_verifies(tmp_path: Path) -> None:
    cache = LinkCache(tmp_path / "deep" / "link")
    assert cache.load("k" * 64) is None
    path = cache.store("k" * 64, b"cubin bytes")
    assert path is not None
    assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert cache.load("k" * 64) == b"cubin bytes"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


@pytest.mark.parametrize("damage", ["flip", "truncate", "header-only", "empty"])
def test_damaged_entry_is_not_used(tmp_path: Path, damage: str) -> None:
    cache = LinkCache(tmp_path / "link")
    path = cache.store("d" * 64, b"x" * 1000)
    assert path is not None
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-10] ^= 0xFF
    elif damage == "truncate":
        data = data[:-100]
    elif damage == "header-only":
        data = data[:48]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert cache.load("d" * 64) is None


def test_group_writable_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    cache = LinkCache(directory)
    with pytest.raises(LinkCacheError, match=r"writable by group or others \(mode 0777\)"):
        cache.load("a" * 64)
    with pytest.raises(LinkCacheError, match=CACHE_ENV):
        cache.store("a" * 64, b"x")
    directory.chmod(0o720)
    with pytest.raises(LinkCacheError, match="writable by group"):
        cache.load("a" * 64)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="chown needs root")
def test_foreign_owned_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "foreign"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    with pytest.raises(LinkCacheError, match="owned by uid 65534, not by you"):
        LinkCache(directory).load("a" * 64)


@pytest.mark.toolchain
def test_hit_then_corrupt_entry_is_relinked_and_overwritten(
    bins: DeviceBinaries, tmp_path: Path
) -> None:
    cache = LinkCache(tmp_path / "link")
    first = link_device_code_ex(bins.app, LinkOptions(arch="sm_90"), cache)
    assert not first.cache_hit
    assert first.cache_path is not None and first.cache_path.is_file()
    second = link_device_code_ex(bins.app, LinkOptions(arch="sm_90"), cache)
    assert second.cache_hit
    assert second.cubin == first.cubin
    # another arch is another entry
    other = link_device_code_ex(bins.app, LinkOptions(arch="sm_100"), cache)
    assert not other.cache_hit
    assert len(list((tmp_path / "link").glob("*.cubin"))) == 2
    # corrupt, then truncate: each time re-linked and overwritten
    for damage in ("corrupt", "truncate"):
        data = bytearray(first.cache_path.read_bytes())
        if damage == "corrupt":
            data[len(data) // 2] ^= 0x5A
        else:
            data = data[: len(data) // 3]
        first.cache_path.write_bytes(bytes(data))
        again = link_device_code_ex(bins.app, LinkOptions(arch="sm_90"), cache)
        assert not again.cache_hit
        assert again.cubin == first.cubin
        assert link_device_code_ex(bins.app, LinkOptions(arch="sm_90"), cache).cache_hit


_LINK_SCRIPT = """
import hashlib, json, sys
from skbuild_cudaq.realtime.link import LinkOptions, link_device_code_ex
from skbuild_cudaq.realtime.cache import default_cache
r = link_device_code_ex(sys.argv[1], LinkOptions(arch="sm_90"), default_cache())
maps = open("/proc/self/maps").read()
print(json.dumps({
    "hit": r.cache_hit,
    "sha": hashlib.sha256(r.cubin).hexdigest(),
    "nvjitlink_module": "cuda.bindings.nvjitlink" in sys.modules,
    "nvjitlink_library": "libnvJitLink" in maps,
    "driver_module": "cuda.bindings.driver" in sys.modules,
}))
"""


def _spawn(binary: Path, cache_dir: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, **{CACHE_ENV: str(cache_dir)})
    return subprocess.Popen(
        [sys.executable, "-c", _LINK_SCRIPT, str(binary)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    return result


@pytest.mark.toolchain
def test_four_processes_racing(bins: DeviceBinaries, tmp_path: Path) -> None:
    cache_dir = tmp_path / "race"
    procs = [_spawn(bins.app, cache_dir) for _ in range(4)]
    results = [_result(p) for p in procs]
    assert len({r["sha"] for r in results}) == 1
    entries = sorted(p.name for p in cache_dir.iterdir())
    assert len(entries) == 1 and entries[0].endswith(".cubin")  # no temporaries left
    assert _result(_spawn(bins.app, cache_dir))["hit"] is True


@pytest.mark.toolchain
def test_warm_start_does_not_load_nvjitlink(bins: DeviceBinaries, tmp_path: Path) -> None:
    cache_dir = tmp_path / "warm"
    cold = _result(_spawn(bins.app, cache_dir))
    assert cold["hit"] is False
    assert cold["nvjitlink_library"] is True  # the probe sees the library when it is loaded
    warm = _result(_spawn(bins.app, cache_dir))
    assert warm["hit"] is True
    assert warm["sha"] == cold["sha"]
    assert warm["nvjitlink_module"] is False
    assert warm["nvjitlink_library"] is False
    assert warm["driver_module"] is False  # explicit arch: no CUDA at all
