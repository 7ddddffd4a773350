"""The link cache under attack: it never serves a byte the current user did not link.

Every test tampers with the cache (the directory, a directory on its path, or an entry) and
then links through it; the cubin served must be byte for byte the one a fresh link (no cache)
gives, or the cache must be refused with ``LinkCacheError``. "Foreign" entries are valid
entries for the very key asked for, carrying other bytes: only the file-system checks and the
key binding stand between them and the GPU. Races are reproduced twice: deterministically
(a swap after every single system call of a lookup) and for real (four processes, two
linking and two tampering, for a few seconds).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpu_kernels.testbins import DeviceBinaries

from skbuild_cudaq.realtime.errors import LinkCacheError
from skbuild_cudaq.realtime.link import cache as cache_module
from skbuild_cudaq.realtime.link.cache import LinkCache, cache_entry, encode_entry
from skbuild_cudaq.realtime.link.linker import (
    LinkOptions,
    LinkResult,
    link_device_code,
    prepare_link,
)

pytestmark = pytest.mark.toolchain

ARCH, OTHER_ARCH = "sm_90", "sm_100"
FOREIGN = b"\x7fELF" + b"foreign code, not linked by you " * 64
NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="making files of another user needs root")


@pytest.fixture(scope="module")
def fresh(bins: DeviceBinaries) -> dict[str, bytes]:
    """The cubins a fresh link (no cache) gives, per arch: what the cache may serve."""
    return {
        arch: link_device_code(bins.app, LinkOptions(arch=arch), cache=LinkCache(None)).cubin
        for arch in (ARCH, OTHER_ARCH)
    }


def _key(bins: DeviceBinaries, cache: LinkCache, arch: str = ARCH) -> str:
    prepared = prepare_link(bins.app, LinkOptions(arch=arch), cache)
    assert prepared.digest is not None
    return cache_entry(prepared.digest, arch)


def _link(bins: DeviceBinaries, cache: LinkCache, arch: str = ARCH) -> LinkResult:
    return link_device_code(bins.app, LinkOptions(arch=arch), cache=cache)


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    path.chmod(0o700)
    return path


def _foreign_dir(path: Path, key: str) -> Path:
    """A directory of yours holding a valid entry for ``key`` with foreign bytes."""
    _private_dir(path)
    entry = path / f"{key}.cubin"
    entry.write_bytes(encode_entry(key, FOREIGN))
    entry.chmod(0o600)
    return path


def _primed(bins: DeviceBinaries, fresh: dict[str, bytes], path: Path) -> tuple[LinkCache, Path]:
    """A cache holding the real entry for ARCH; the entry's path."""
    cache = LinkCache(path)
    first = _link(bins, cache)
    assert not first.cache_hit and first.cubin == fresh[ARCH]
    assert first.cache_path is not None
    again = _link(bins, cache)
    assert again.cache_hit and again.cubin == fresh[ARCH]
    return cache, first.cache_path


# ---------------------------------------------------------------------------------------------
# The directory and its path
# ---------------------------------------------------------------------------------------------


def test_symlinked_cache_dir_is_refused(bins: DeviceBinaries, tmp_path: Path) -> None:
    home = _private_dir(tmp_path / "home")
    cache = LinkCache(home / "link")
    foreign = _foreign_dir(home / "elsewhere", _key(bins, cache))
    (home / "link").symlink_to(foreign)
    with pytest.raises(LinkCacheError, match="the link cache directory is a symbolic link"):
        _link(bins, cache)
    with pytest.raises(LinkCacheError, match="is a symbolic link"):
        cache.load(_key(bins, cache))
    assert (foreign / f"{_key(bins, cache)}.cubin").read_bytes() == encode_entry(
        _key(bins, cache), FOREIGN
    )  # nothing was written through the link either


def test_symlink_on_the_path_in_a_private_directory_is_followed(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    home = _private_dir(tmp_path / "home")
    real = _private_dir(tmp_path / "disk" / "cache")
    (home / ".cache").symlink_to(real)  # ~/.cache -> another disk, a common setup
    cache, _ = _primed(bins, fresh, home / ".cache" / "link")
    assert (real / "link").is_dir()
    assert _link(bins, cache).cache_hit
    # a relative link, with "..", is walked the same way
    (home / "rel").symlink_to(Path("..") / "disk" / "cache")
    assert _link(bins, LinkCache(home / "rel" / "link")).cache_hit


@needs_root
def test_symlink_of_another_user_in_a_sticky_directory_is_refused(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # like /tmp: anyone may create entries there
    _primed(bins, fresh, _private_dir(tmp_path / "mine") / "link")
    cache = LinkCache(sticky / "theirs" / "link")
    (sticky / "theirs").symlink_to(tmp_path / "mine")
    os.lchown(sticky / "theirs", NOBODY, NOBODY)  # planted by another user
    with pytest.raises(LinkCacheError, match=f"owned by another user: {sticky / 'theirs'}"):
        _link(bins, cache)
    os.lchown(sticky / "theirs", os.getuid(), os.getgid())  # your own link there is fine
    assert _link(bins, cache).cache_hit


@pytest.mark.parametrize("mode", [0o777, 0o772, pytest.param(0o770, marks=needs_root)])
def test_parent_writable_by_others_is_refused(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path, mode: int
) -> None:
    cache, _ = _primed(bins, fresh, tmp_path / "shared" / "link")
    (tmp_path / "shared").chmod(mode)
    if mode == 0o770:
        os.chown(tmp_path / "shared", os.getuid(), NOBODY)  # a group that is not only yours
    with pytest.raises(LinkCacheError, match=r"on the link cache path is writable by others: "):
        _link(bins, cache)
    (tmp_path / "shared").chmod(mode | 0o1000)  # sticky: others cannot replace your entries
    assert _link(bins, cache).cache_hit


def test_parent_writable_by_your_own_private_group_is_accepted(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    if not cache_module._own_private_group(os.getgid()):
        pytest.skip("your primary group is not a user-private group")
    cache, _ = _primed(bins, fresh, tmp_path / "upg" / "link")
    (tmp_path / "upg").chmod(0o775)  # umask 002 with a user-private group
    assert _link(bins, cache).cache_hit


@needs_root
def test_parent_owned_by_another_user_is_refused(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    cache, _ = _primed(bins, fresh, tmp_path / "theirs" / "link")
    os.chown(tmp_path / "theirs", NOBODY, NOBODY)
    with pytest.raises(LinkCacheError, match="on the link cache path is owned by another user"):
        _link(bins, cache)


@needs_root
def test_cache_dir_owned_by_another_user_is_refused(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    cache, _ = _primed(bins, fresh, tmp_path / "link")
    os.chown(tmp_path / "link", NOBODY, NOBODY)
    with pytest.raises(LinkCacheError, match="is owned by uid 65534, not by you"):
        _link(bins, cache)


def test_file_on_the_path_is_a_warning_and_no_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Not unsafe, only unusable: the link goes on uncached (see test_cache.py)."""
    (tmp_path / "file").write_bytes(b"")
    with caplog.at_level("WARNING", logger="skbuild_cudaq"):
        assert LinkCache(tmp_path / "file" / "link").store("k" * 64, b"x") is None
    assert "not a directory on the link cache path" in caplog.records[0].getMessage()


def test_symlink_loop_on_the_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(LinkCacheError, match="too many symbolic links on the link cache path"):
        LinkCache(tmp_path / "a" / "link").load("k" * 64)


# ---------------------------------------------------------------------------------------------
# Entries
# ---------------------------------------------------------------------------------------------


def _tamper_entry(kind: str, entry: Path, key: str, other: bytes, work: Path) -> None:
    """Replace ``entry`` the way ``kind`` says (``other``: a real entry of another key)."""
    forged = encode_entry(key, FOREIGN)
    entry.unlink()
    if kind == "symlink-to-world-writable":
        target = work / "world-writable.cubin"
        target.write_bytes(forged)
        target.chmod(0o666)
        entry.symlink_to(target)
    elif kind == "hard-link":
        target = work / "hard.cubin"
        target.write_bytes(forged)
        target.chmod(0o600)
        os.link(target, entry)
    elif kind == "other-key":
        entry.write_bytes(other)  # another arch's real entry copied over this name
    elif kind == "world-writable":
        entry.write_bytes(forged)
        entry.chmod(0o666)
    elif kind == "group-writable":
        entry.write_bytes(forged)
        entry.chmod(0o620)
    elif kind == "foreign-owner":
        entry.write_bytes(forged)
        entry.chmod(0o600)
        os.chown(entry, NOBODY, NOBODY)
    elif kind == "truncated":
        entry.write_bytes(forged[: len(forged) - 100])
    elif kind == "oversized":
        entry.write_bytes(forged + b"\0" * 64)
    elif kind == "huge-length":
        head = bytearray(forged)
        head[12:20] = (1 << 62).to_bytes(8, "little")  # claims an enormous payload
        entry.write_bytes(bytes(head))
    elif kind == "fifo":
        os.mkfifo(entry, 0o600)
    elif kind == "directory":
        entry.mkdir(mode=0o700)
    elif kind == "old-format":
        entry.write_bytes(b"SKCQCUB1" + FOREIGN)
    else:
        raise AssertionError(kind)


ENTRY_ATTACKS = [
    ("symlink-to-world-writable", "is a symbolic link"),
    ("hard-link", "has 2 hard links"),
    ("other-key", "belongs to another key"),
    ("world-writable", "is writable by group or others (mode 0666)"),
    ("group-writable", "is writable by group or others (mode 0620)"),
    pytest.param("foreign-owner", "is owned by uid 65534, not by you", marks=needs_root),
    ("truncated", "is truncated"),
    ("oversized", "is oversized"),
    ("huge-length", "is truncated"),
    ("fifo", "is not a regular file"),
    ("directory", "is not a regular file"),
    ("old-format", "is not a link cache entry of this version"),
]


@pytest.mark.parametrize(("kind", "warning"), ENTRY_ATTACKS)
def test_tampered_entry_is_never_served(
    bins: DeviceBinaries,
    fresh: dict[str, bytes],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    *,
    kind: str,
    warning: str,
) -> None:
    cache, entry = _primed(bins, fresh, tmp_path / "link")
    other = _link(bins, cache, OTHER_ARCH)
    assert other.cache_path is not None
    key = entry.name.removesuffix(".cubin")
    _tamper_entry(kind, entry, key, other.cache_path.read_bytes(), tmp_path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="skbuild_cudaq"):
        assert cache.load(key) is None
        again = _link(bins, cache)
    assert not again.cache_hit
    assert again.cubin == fresh[ARCH]  # exactly what a fresh link gives
    err = caplog.text  # the run time logs (skbuild_cudaq logger); front doors print it
    assert f"link cache entry {entry} {warning}" in err
    assert ": not used; re-linking" in err
    if kind == "directory":  # cannot be replaced: served from the link, the cache left alone
        assert "cannot write the link cache directory" in err
        return
    # the bad entry was replaced by a regular private file holding the real cubin ...
    st = entry.lstat()
    assert entry.is_file() and not entry.is_symlink() and st.st_nlink == 1
    assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.getuid()
    hit = _link(bins, cache)
    assert hit.cache_hit and hit.cubin == fresh[ARCH]
    # ... and what a link pointed to was not written through
    for target in ("world-writable.cubin", "hard.cubin"):
        if (tmp_path / target).exists():
            assert (tmp_path / target).read_bytes() == encode_entry(key, FOREIGN)


def test_renamed_entry_is_refused_for_its_new_name(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    """An entry bound to its key: under another key's name (any arch) it is never served."""
    cache, entry = _primed(bins, fresh, tmp_path / "link")
    other = _link(bins, cache, OTHER_ARCH)
    assert other.cache_path is not None
    other.cache_path.unlink()
    entry.rename(other.cache_path)  # the sm_90 entry now sits under the sm_100 name
    assert cache.load(other.cache_path.name.removesuffix(".cubin")) is None
    relinked = _link(bins, cache, OTHER_ARCH)
    assert not relinked.cache_hit and relinked.cubin == fresh[OTHER_ARCH]


# ---------------------------------------------------------------------------------------------
# Races, deterministic: a swap after every system call of a lookup
# ---------------------------------------------------------------------------------------------

_HOOKED = ("open", "fstat", "stat", "lstat", "readlink", "read", "mkdir")


def _swap_after_call(
    monkeypatch: pytest.MonkeyPatch, at: int, swap: Callable[[], None]
) -> collections.Counter[str]:
    """Make the ``at``-th call of the hooked ``os`` functions run ``swap`` right after it."""
    calls: collections.Counter[str] = collections.Counter()
    busy = [False]

    def hooked(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            result = real(*args, **kwargs)
            if not busy[0]:
                calls["total"] += 1
                calls[name] += 1
                if calls["total"] == at:
                    busy[0] = True
                    try:
                        swap()
                    finally:
                        busy[0] = False
            return result

        return call

    for name in _HOOKED:
        monkeypatch.setattr(os, name, hooked(name, getattr(os, name)))
    return calls


def _swaps(root: Path, key: str) -> Iterator[tuple[str, Callable[[], None]]]:
    """Ways to replace ``root/home/link`` (or its parent) with something holding foreign bytes."""
    home, link = root / "home", root / "home" / "link"

    def aside(path: Path) -> None:
        path.rename(path.with_name(path.name + ".aside"))

    def dir_to_symlink() -> None:
        aside(link)
        link.symlink_to(_foreign_dir(root / "foreign", key))

    def dir_to_world_writable() -> None:
        aside(link)
        _foreign_dir(link, key).chmod(0o777)

    def dir_to_foreign_owned() -> None:
        aside(link)
        os.chown(_foreign_dir(link, key), NOBODY, NOBODY)

    def parent_to_symlink() -> None:  # to a directory others can write
        _foreign_dir(root / "foreign-home" / "link", key)
        (root / "foreign-home").chmod(0o777)
        aside(home)
        home.symlink_to(root / "foreign-home")

    def parent_to_world_writable() -> None:
        _foreign_dir(root / "foreign-home" / "link", key)
        (root / "foreign-home").chmod(0o777)
        aside(home)
        (root / "foreign-home").rename(home)

    def entry_to_symlink() -> None:
        target = root / "world-writable.cubin"
        target.write_bytes(encode_entry(key, FOREIGN))
        target.chmod(0o666)
        (link / "swap.tmp").symlink_to(target)
        (link / "swap.tmp").rename(link / f"{key}.cubin")

    yield "dir-to-symlink", dir_to_symlink
    yield "dir-to-world-writable", dir_to_world_writable
    if os.getuid() == 0:
        yield "dir-to-foreign-owned", dir_to_foreign_owned
    yield "parent-to-symlink", parent_to_symlink
    yield "parent-to-world-writable", parent_to_world_writable
    yield "entry-to-symlink", entry_to_symlink


def test_swap_after_every_step_of_a_lookup(
    bins: DeviceBinaries,
    fresh: dict[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = fresh[ARCH]
    probe = LinkCache(tmp_path / "probe" / "home" / "link")
    key = _key(bins, probe)
    outcomes: collections.Counter[str] = collections.Counter()
    for name, _ in _swaps(tmp_path / "probe", key):
        step = 0
        while True:
            step += 1
            root = tmp_path / f"{name}-{step}"
            cache = LinkCache(root / "home" / "link")
            _private_dir(root / "home")
            cache.store(key, real)
            swap = dict(_swaps(root, key))[name]
            with monkeypatch.context() as patch:
                calls = _swap_after_call(patch, step, swap)
                try:
                    served = cache.load(key)
                except LinkCacheError:
                    served = None
                    outcomes["refused"] += 1
            assert served in (None, real), f"{name}: foreign bytes served after call {step}"
            outcomes["served" if served == real else "not served"] += 1
            if calls["total"] < step:  # the swap came after the lookup's last call
                break
        assert step > 10, name  # every component of the path was opened and checked
    # not vacuous: swaps before the directory is open are refused, later ones cannot matter
    assert outcomes["served"] > 0 and outcomes["refused"] > 0, outcomes


# ---------------------------------------------------------------------------------------------
# Races, for real: four processes
# ---------------------------------------------------------------------------------------------

_LINKER = """
import hashlib, json, logging, sys, time
from pathlib import Path
from skbuild_cudaq.realtime.link.cache import LinkCache
from skbuild_cudaq.realtime.errors import LinkCacheError
from skbuild_cudaq.realtime.link.linker import LinkOptions, prepare_link
binary, cache_dir, want, work = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
seconds, ready = float(sys.argv[5]), work / sys.argv[6]
prepared = prepare_link(binary, LinkOptions(arch="sm_90"), LinkCache(Path(cache_dir)))
counts = {"hit": 0, "linked": 0, "refused": 0, "foreign": 0, "warned": 0}

class Seen(logging.Handler):  # the cache's "not used; re-linking" warnings, counted
    def emit(self, record):
        counts["warned"] += "link cache entry" in record.getMessage()

logging.getLogger("skbuild_cudaq").addHandler(Seen(logging.WARNING))
start = None
while True:
    now = time.monotonic()
    seen = counts["hit"] and (counts["refused"] or counts["warned"])
    if start is not None and now > start + seconds and (seen or now > start + 120):
        break  # ran its time, served a hit and met an attack under attack (or gave up)
    try:
        result = prepared.finish("sm_90")
    except LinkCacheError:
        counts["refused"] += 1
        continue
    finally:
        if start is None:  # warm (imports, nvJitLink loaded): start with the other linker
            ready.touch()
            while not all((work / f"ready-{i}").exists() for i in (0, 1)):
                time.sleep(0.005)
            start = time.monotonic()
    if hashlib.sha256(result.cubin).hexdigest() != want:
        counts["foreign"] += 1
    counts["hit" if result.cache_hit else "linked"] += 1
print(json.dumps(counts))
"""

_TAMPERER = """
import fcntl, json, os, random, shutil, sys, time
from pathlib import Path
cache, key, work = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
rng = random.Random(int(sys.argv[4]))
name = key + ".cubin"
forged = (work / "forged").read_bytes()  # a valid entry for the key, foreign bytes
other = (work / "other").read_bytes()  # the real entry of another arch
root = os.getuid() == 0
counts = {}

def fresh_name():
    return cache.with_name(f"{cache.name}.{os.getpid()}.{rng.getrandbits(48):012x}")

def put(path, data, mode=0o600):
    path.write_bytes(data)
    os.chmod(path, mode)

def remove(path):
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)

def swap_dir(kind):
    aside = fresh_name()
    os.rename(cache, aside)
    try:
        fake = fresh_name()
        if kind == "symlink":
            target = fresh_name()
            target.mkdir(mode=0o700)
            put(target / name, forged)
            fake.symlink_to(target)
        else:
            fake.mkdir(mode=0o700)
            put(fake / name, forged)
            if kind == "world-writable" or not root:
                os.chmod(fake, 0o777)
            else:
                os.chown(fake, 65534, 65534)
        os.rename(fake, cache)
        time.sleep(rng.uniform(0, 0.01))
    finally:
        remove(cache)
        os.rename(aside, cache)

def swap_entry(kind):
    tmp = cache / f"swap.{os.getpid()}.tmp"
    if kind == "symlink":
        target = work / f"ww.{os.getpid()}"
        put(target, forged, 0o666)
        remove(tmp)
        tmp.symlink_to(target)
    elif kind == "hard-link":
        target = work / f"hl.{os.getpid()}"
        put(target, forged)
        remove(tmp)
        os.link(target, tmp)
    elif kind == "other-key":
        put(tmp, other)
    elif kind == "world-writable":
        put(tmp, forged, 0o666)
    elif kind == "truncated":
        put(tmp, forged[:-40])
    elif kind == "oversized":
        put(tmp, forged + bytes(40))
    elif kind == "foreign-owner" and root:
        put(tmp, forged)
        os.chown(tmp, 65534, 65534)
    else:
        return
    os.rename(tmp, cache / name)

actions = [("dir", k) for k in ("symlink", "world-writable", "foreign-owned")] + [
    ("entry", k) for k in ("symlink", "hard-link", "other-key", "world-writable", "truncated",
                           "oversized", "foreign-owner")]
end = time.monotonic() + 300
while not all((work / f"ready-{i}").exists() for i in (0, 1)) and time.monotonic() < end:
    time.sleep(0.01)
with open(work / "lock", "w") as lock:  # the two tamperers take turns (the linkers do not)
    while not (work / "stop").exists() and time.monotonic() < end:
        where, kind = rng.choice(actions)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            (swap_dir if where == "dir" else swap_entry)(kind)
            counts[f"{where}-{kind}"] = counts.get(f"{where}-{kind}", 0) + 1
        except OSError:
            counts["missed"] = counts.get("missed", 0) + 1
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        time.sleep(rng.uniform(0, 0.05))
print(json.dumps(counts))
"""


def test_four_processes_linking_and_tampering(
    bins: DeviceBinaries, fresh: dict[str, bytes], tmp_path: Path
) -> None:
    """Two processes link through the cache while two others swap its directory and entries."""
    cache_dir = tmp_path / "race" / "link"
    cache, entry = _primed(bins, fresh, cache_dir)
    key = entry.name.removesuffix(".cubin")
    other = _link(bins, cache, OTHER_ARCH)
    assert other.cache_path is not None
    work = _private_dir(tmp_path / "work")
    (work / "forged").write_bytes(encode_entry(key, FOREIGN))
    (work / "other").write_bytes(other.cache_path.read_bytes())
    want = hashlib.sha256(fresh[ARCH]).hexdigest()

    def spawn(script: str, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    linking = [
        spawn(_LINKER, str(bins.app), str(cache_dir), want, str(work), "4", f"ready-{i}")
        for i in (0, 1)
    ]
    tampering = [spawn(_TAMPERER, str(cache_dir), key, str(work), str(seed)) for seed in (11, 12)]
    reports = []
    for proc in linking + tampering:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err
        reports.append((json.loads(out), err))
        if len(reports) == len(linking):
            (work / "stop").touch()
    linkers, tamperers = reports[:2], reports[2:]
    for counts, _ in linkers:
        assert counts["foreign"] == 0, linkers  # never a byte the user did not link
    total = collections.Counter[str]()
    for counts, _ in linkers:
        total.update(counts)
    warned = sum(err.count("warning: link cache entry") for _, err in linkers)
    warned += sum(counts["warned"] for counts, _ in linkers)
    tampered = sum(sum(v for k, v in c.items() if k != "missed") for c, _ in tamperers)
    # not vacuous: the cache served hits under attack, attacks happened and were seen
    assert total["hit"] > 0 and tampered > 0, (linkers, tamperers)
    assert total["refused"] + warned > 0, (linkers, tamperers)
    # the race left a sane cache: the real directory, serving the real cubin
    assert cache_dir.is_dir() and not cache_dir.is_symlink()
    assert _link(bins, cache).cubin == fresh[ARCH]
