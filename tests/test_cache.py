"""The link cache: hits, corruption, truncation, races, unsafe directories, warm starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.realtime.errors import LinkCacheError
from skbuild_cudaq.realtime.link.cache import (
    CACHE_ENV,
    CacheUsage,
    LinkCache,
    cache_digest,
    cache_entry,
    cache_key,
)
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code


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


def test_an_entry_replaced_while_it_is_read_is_still_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process storing the same key replaces the entry (os.replace) after this one
    opened it: the open entry then has no link left, but it is the complete, verified entry
    it was; it used to be refused ("has 0 hard links") with a warning and linked again."""
    import skbuild_cudaq.realtime.link.cache as cache_module

    cache = LinkCache(tmp_path / "link")
    key = "r" * 64
    assert cache.store(key, b"first") is not None
    real_open = os.open

    def open_then_replaced(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if str(path).endswith(".cubin") and not flags & os.O_WRONLY:
            monkeypatch.setattr(cache_module.os, "open", real_open)
            assert cache.store(key, b"second") is not None  # the other process, meanwhile
        return fd

    monkeypatch.setattr(cache_module.os, "open", open_then_replaced)
    with caplog.at_level("WARNING"):
        assert cache.load(key) == b"first"
    assert not caplog.records
    assert cache.load(key) == b"second"


def test_usage_and_clear_by_last_use(tmp_path: Path) -> None:
    directory = tmp_path / "link"
    cache = LinkCache(directory)
    assert cache.usage() == CacheUsage(directory)  # not there yet: empty, not created
    assert not directory.exists()
    for key in ("a" * 64, "b" * 64, "c" * 64):
        cache.store(key, key.encode() * 10)
    assert cache.usage() == CacheUsage(directory, 3, 3 * (64 * 10 + 64 + 52), 0)
    old = time.time() - 10 * 86400
    for key in ("a" * 64, "b" * 64):
        os.utime(directory / f"{key}.cubin", (old, old))
    assert cache.load("b" * 64) == b"b" * 640  # a hit is a use: b is recent again
    removed = cache.clear(unused_for=86400)
    assert (removed.entries, removed.leftovers) == (1, 0)
    assert sorted(p.name for p in directory.iterdir()) == ["b" * 64 + ".cubin", "c" * 64 + ".cubin"]
    assert cache.clear() == CacheUsage(directory, 2, 2 * (64 * 10 + 64 + 52), 0)
    assert cache.usage() == CacheUsage(directory)
    assert LinkCache(None).usage() == LinkCache(None).clear() == CacheUsage(None)
    with pytest.raises(ValueError, match="0 or more seconds"):
        cache.clear(unused_for=-1)


def test_a_store_killed_half_way_leaves_a_temporary_that_is_swept(tmp_path: Path) -> None:
    cache = LinkCache(tmp_path)
    cache.store("k" * 64, b"cubin")
    dead, fresh = tmp_path / ".tmp-kkkk-dead", tmp_path / ".tmp-kkkk-fresh"
    dead.write_bytes(b"half")
    fresh.write_bytes(b"being written")  # another process's store, in flight
    old = time.time() - 2 * 3600
    os.utime(dead, (old, old))
    (tmp_path / "not-ours.txt").write_text("left alone")
    assert cache.usage().leftovers == 1
    cache.store("l" * 64, b"cubin")  # a store sweeps what a dead one left
    assert not dead.exists() and fresh.exists()
    dead.write_bytes(b"half")
    os.utime(dead, (old, old))
    assert cache.clear().leftovers == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-kkkk-fresh", "not-ours.txt"]


def test_cli_cache_shows_and_clears(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skbuild_cudaq.cli import main

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "link"))
    LinkCache(tmp_path / "link").store("k" * 64, b"x" * 2**20)
    run = [sys.executable, "-m", "skbuild_cudaq", "cache"]
    shown = subprocess.run(run, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == f"{tmp_path / 'link'}: 1 entry, 1.0 MiB"
    assert main(["cache", "--clear-unused", "1"]) == 0  # used just now: kept (conftest
    # restores the logger main() gives a printing handler)
    assert LinkCache(tmp_path / "link").usage().entries == 1
    cleared = subprocess.run(
        [*run, "--clear", "--json"], capture_output=True, text=True, check=True
    )
    assert json.loads(cleared.stdout) == {
        "schema_version": 1,
        "directory": str(tmp_path / "link"),
        "entries": 1,
        "bytes": 2**20 + 64 + 52,
        "leftovers": 0,
        "cleared": True,
    }
    bad = subprocess.run(
        [*run, "--clear-unused", "-2"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2
    assert "a number of days, 0 or more, not '-2'" in bad.stderr
    monkeypatch.setenv(CACHE_ENV, "off")
    off = subprocess.run(run, capture_output=True, text=True, check=True)
    assert "the link cache is disabled" in off.stdout


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


def test_directory_path_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk from / (plain tier; the tamper suite links for real)."""
    key = "k" * 64
    base = tmp_path / "p"
    LinkCache(base / "link").store(key, b"mine")
    assert (base.stat().st_mode & 0o777) == 0o700  # created private
    base.chmod(0o777)
    with pytest.raises(LinkCacheError, match=r"path is writable by others: .*/p \(mode 0777"):
        LinkCache(base / "link").load(key)
    with pytest.raises(LinkCacheError, match="writable by others"):
        LinkCache(base / "link").store(key, b"other")
    base.chmod(0o1777)  # sticky, like /tmp
    assert LinkCache(base / "link").load(key) == b"mine"
    base.chmod(0o755)
    (tmp_path / "alias").symlink_to(base / "link")
    with pytest.raises(LinkCacheError, match="the link cache directory is a symbolic link"):
        LinkCache(tmp_path / "alias").load(key)
    (tmp_path / "parent-alias").symlink_to(base)
    assert LinkCache(tmp_path / "parent-alias" / "link").load(key) == b"mine"
    assert LinkCache(base / "link" / ".." / "link").load(key) == b"mine"
    monkeypatch.chdir(tmp_path)
    assert LinkCache(Path("p/link")).load(key) == b"mine"
    assert LinkCache(tmp_path / "missing" / "link").load(key) is None  # nothing created
    assert not (tmp_path / "missing").exists()


def test_entry_is_bound_to_its_key(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = LinkCache(tmp_path / "link")
    sm90, sm100 = "a" * 64 + "-sm_90", "a" * 64 + "-sm_100"
    p90, p100 = cache.store(sm90, b"for sm_90"), cache.store(sm100, b"for sm_100")
    assert p90 is not None and p100 is not None
    p100.write_bytes(p90.read_bytes())  # one entry copied over another key's name
    assert cache.load(sm100) is None
    assert f"belongs to another key ({sm90})" in caplog.text
    assert cache.load(sm90) == b"for sm_90"
    with pytest.raises(ValueError, match="invalid link cache key"):
        cache.load("../escape")


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
    first = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=cache)
    assert not first.cache_hit
    assert first.cache_path is not None and first.cache_path.is_file()
    second = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=cache)
    assert second.cache_hit
    assert second.cubin == first.cubin
    # another arch is another entry
    other = link_device_code(bins.app, LinkOptions(arch="sm_100"), cache=cache)
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
        again = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=cache)
        assert not again.cache_hit
        assert again.cubin == first.cubin
        assert link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=cache).cache_hit


_LINK_SCRIPT = """
import hashlib, json, sys
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_device_code
from skbuild_cudaq.realtime.link.cache import default_cache
r = link_device_code(sys.argv[1], LinkOptions(arch="sm_90"), cache=default_cache())
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


# ---------------------------------------------------------------------------------------------
# nvJitLink's identity: the library cuda.bindings loads, not the first one on sys.path
# ---------------------------------------------------------------------------------------------


def _shadow_nvjitlink(tmp_path: Path) -> tuple[Path, Path]:
    """A second libnvJitLink (another file, same soname) where the old lookup looked first.

    Returns the directory to put on ``PYTHONPATH`` (``sys.path`` before site-packages) and
    the library file.
    """
    from skbuild_cudaq.realtime.link._nvjitlink import installed_nvjitlink

    info = installed_nvjitlink()
    if info is None or info.distribution is None:
        pytest.skip("needs the nvidia-nvjitlink wheel")
    shadow = tmp_path / "shadow"
    lib = shadow / "nvidia" / "cu13" / "lib" / "libnvJitLink.so.13"
    lib.parent.mkdir(parents=True)
    try:
        os.link(info.library, lib)  # another path (and name in /proc/self/maps), same bytes
    except OSError:
        import shutil

        shutil.copy2(info.library, lib)
    return shadow, lib


_IDENTITY_SCRIPT = """
import json, sys
from pathlib import Path
from typing import Any
from skbuild_cudaq.realtime.link import _nvjitlink as n
before = n.nvjitlink_identity()
found = str(n.installed_nvjitlink().library)
from cuda.bindings import nvjitlink
nvjitlink.version()
from cuda.pathfinder import load_nvidia_dynamic_lib
loaded = str(Path(load_nvidia_dynamic_lib("nvJitLink").abs_path).resolve())
print(json.dumps({"before": before, "after": n.nvjitlink_identity(), "found": found,
                  "loaded": loaded, "mapped": [str(p) for p in n.mapped_nvjitlink()],
                  "path": sys.path}))
"""


@pytest.mark.toolchain
def test_identity_is_the_nvjitlink_cuda_bindings_loads(tmp_path: Path) -> None:
    shadow, lib = _shadow_nvjitlink(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(shadow))
    cmd = [sys.executable, "-c", _IDENTITY_SCRIPT]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    r = json.loads(out)
    assert str(shadow) in r["path"]  # the shadow comes first on sys.path ...
    assert r["found"] == r["loaded"] != str(lib)  # ... but cuda-pathfinder loads site-packages'
    assert r["mapped"] == [r["loaded"]]
    assert r["before"] == r["after"]  # found without loading == described once loaded
    assert r["loaded"] in r["before"] and str(lib) not in r["before"]


_REKEY_SCRIPT = """
import ctypes, json, sys
from pathlib import Path
from typing import Any
from skbuild_cudaq.realtime.link import _nvjitlink as n
from skbuild_cudaq.realtime.link.cache import LinkCache, cache_entry
from skbuild_cudaq.realtime.link.linker import LinkOptions, link_digest, prepare_link
binary, cache_dir, shadow, when = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
if when == "before":
    ctypes.CDLL(shadow)  # another library of the process loaded this nvJitLink first
prepared = prepare_link(binary, LinkOptions(arch="sm_90"), LinkCache(cache_dir))
if when == "after":
    ctypes.CDLL(shadow)  # ... after the key was computed
result = prepared.finish("sm_90")
loaded = link_digest(prepared.runtime, prepared.code, prepared.options, n.nvjitlink_identity())
print(json.dumps({"entry": result.cache_path.name, "hit": result.cache_hit,
                  "prepared": cache_entry(prepared.digest, "sm_90") + ".cubin",
                  "loaded": cache_entry(loaded, "sm_90") + ".cubin",
                  "mapped": [str(p) for p in n.mapped_nvjitlink()]}))
"""


@pytest.mark.toolchain
def test_cold_link_is_keyed_by_the_nvjitlink_actually_loaded(
    bins: DeviceBinaries, tmp_path: Path
) -> None:
    _, lib = _shadow_nvjitlink(tmp_path)
    cache_dir = tmp_path / "cache"

    def run(when: str) -> dict[str, object]:
        out = subprocess.run(
            [sys.executable, "-c", _REKEY_SCRIPT, str(bins.app), str(cache_dir), str(lib), when],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        result: dict[str, object] = json.loads(out)
        return result

    # the key named the wheel's nvJitLink, but the shadow was loaded before the link: re-keyed
    cold = run("after")
    assert cold["mapped"] == [str(lib)]  # cuda-pathfinder took the one already loaded
    assert not cold["hit"]
    assert cold["entry"] == cold["loaded"] != cold["prepared"]
    # a process that loads the shadow first finds that entry ...
    warm = run("before")
    assert warm["hit"] and warm["entry"] == cold["entry"] == warm["prepared"]
    # ... one that would load the wheel's does not: it links with its own nvJitLink
    plain = run("none")
    assert not plain["hit"] and plain["entry"] == plain["prepared"] != cold["entry"]


# -- issue 40: a location that cannot be created or written is a warning, not a lost link ------


def _unwritable_locations(tmp_path: Path) -> list[Path]:
    """Cache directories that cannot be created, also for root: under a regular file, and
    (where the machine has it, read-only) under /sys."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    found = [blocker / "skbuild-cudaq" / "link"]
    probe = Path("/sys/skbuild-cudaq-cache-probe")
    try:
        probe.mkdir()
    except OSError:
        found.append(probe / "link")
    else:
        probe.rmdir()
    return found


def test_a_location_that_cannot_be_created_is_one_warning_and_no_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for directory in _unwritable_locations(tmp_path):
        caplog.clear()
        cache = LinkCache(directory)
        with caplog.at_level("WARNING", logger="skbuild_cudaq"):
            assert cache.load("k" * 64) is None
            assert cache.store("k" * 64, b"cubin") is None
            assert cache.store("j" * 64, b"cubin") is None
            assert cache.load("k" * 64) is None
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 1, messages  # one warning per location and process
        assert str(directory) in messages[0]
        assert messages[0].endswith(
            f"linking without the link cache (point {CACHE_ENV} at a writable private "
            "directory, or set it to off)"
        )
    # unsafe stays refused
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(LinkCacheError, match="writable by group or others"):
        LinkCache(shared).store("k" * 64, b"cubin")


def test_an_entry_that_cannot_be_written_is_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    cache = LinkCache(tmp_path / "full")

    def full_disk(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    with caplog.at_level("WARNING", logger="skbuild_cudaq"):
        assert cache.store("k" * 64, b"cubin") is None
        assert cache.store("k" * 64, b"cubin") is None
    monkeypatch.undo()
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot write the link cache directory {tmp_path / 'full'}: No space left on device; "
        f"linking without the link cache (point {CACHE_ENV} at a writable private directory, "
        "or set it to off)"
    ]
    assert list((tmp_path / "full").iterdir()) == []  # no temporary left


@pytest.mark.toolchain
def test_link_and_lookup_with_an_unwritable_cache_return_the_cubin_uncached(
    bins: DeviceBinaries, tmp_path: Path, caplog: pytest.LogCaptureFixture, use_driver: Any
) -> None:
    from _fake_driver import OK, startup_driver

    from skbuild_cudaq.realtime.library import Library

    directory = _unwritable_locations(tmp_path)[0]
    with caplog.at_level("WARNING", logger="skbuild_cudaq"):
        result = link_device_code(bins.app, LinkOptions(arch="sm_90"), cache=LinkCache(directory))
        assert result.cubin and not result.cache_hit and result.cache_path is None
        # a run-time lookup links the same way (the driver is a stand-in: no GPU here)
        use_driver(startup_driver([], lambda dev: (OK, "ctx")))
        lib = Library(bins.app, cache=LinkCache(directory))
        assert lib.load() == "library-handle"
        assert lib.symbols.kernels
        lib.close()
    assert len(caplog.records) == 1 and str(directory) in caplog.records[0].getMessage()


@pytest.mark.toolchain
def test_cli_link_with_a_read_only_home(bins: DeviceBinaries, tmp_path: Path) -> None:
    """A service user: HOME read-only or missing, no XDG_CACHE_HOME, no cache setting."""
    home = _unwritable_locations(tmp_path)[-1].parent
    env = {k: v for k, v in os.environ.items() if k not in (CACHE_ENV, "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    out = tmp_path / "app.cubin"
    proc = subprocess.run(
        [sys.executable, "-m", "skbuild_cudaq", "link", str(bins.app), "--arch", "sm_90",
         "-o", str(out)],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 0
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("skbuild-cudaq: warning: ") and "Traceback" not in proc.stderr
    assert f"{home}/.cache/skbuild-cudaq/link" in lines[0]
    assert lines[-1].startswith(f"skbuild-cudaq: wrote {out}")
