"""On-disk cache of linked cubins.

(Over 400 lines: one job, the cache, whose path and write safety checks belong together.)

Key: SHA-256 over every input byte (each container, in order), every option
and nvJitLink's identity (see ``_nvjitlink.nvjitlink_identity``: the
library ``cuda.bindings`` loads or would load, described without loading it),
followed by the architecture: ``<sha256>-sm_90``.

The directory is trusted only after it is opened and checked through file
descriptors, never by path twice (see :func:`open_cache_dir`):

- it is reached from ``/`` one component at a time with ``O_NOFOLLOW``; every
  directory on the way must be owned by root or by you and not writable by
  group or others unless it is sticky (``/tmp``), or group-writable only by
  your own private group (``umask 002`` systems); a symbolic link on the way is
  followed only if it lies in such a directory (and, in a sticky one, is owned
  by root or you), and its target is walked by the same rule;
- the cache directory itself must be a real directory (not a symbolic link),
  owned by you and not writable by group or others. Otherwise
  :class:`LinkCacheError`: the cache is refused, nothing is read from it.

Entries are opened relative to that directory's descriptor with ``O_NOFOLLOW``
and checked with ``fstat``: a regular file owned by you, not writable by group
or others, with no second link (none at all is fine: another process replaced it
since it was opened, which leaves the open entry whole). Each holds a header
binding it to its key (the full key, a length and a SHA-256 over key and
payload); an entry whose key is not the one asked for (copied or renamed from
another key, e.g. another arch), or that is truncated, oversized, corrupt, a
link or a foreign file, is never served: a warning is logged and the caller
re-links and replaces it. Entries
are written to a temporary file in the same directory, ``fsync``'d, renamed
into place with ``os.replace`` (relative to the directory's descriptor) and the
directory is ``fsync``'d.

An entry's modification time is its last use (a hit touches it): :meth:`LinkCache.usage`
says what the cache holds and :meth:`LinkCache.clear` removes entries (all, or those unused
for a while) and the temporaries of stores that never finished (a process killed while
writing; a store also sweeps them): ``skbuild-cudaq cache``.

Location: ``$SKBUILD_CUDAQ_LINK_CACHE`` if set (``0``/``off``/``false``/``no``
disable the cache), else ``$XDG_CACHE_HOME/skbuild-cudaq/link`` or
``~/.cache/skbuild-cudaq/link``. Missing directories are created 0700.

Unsafe is not the same as unusable. An *unsafe* location (above: another user's
directory on the path, one writable by others, a symbolic link as the cache
directory) is refused with :class:`LinkCacheError`: loading code from it would run
whatever another user put there. A location that *cannot be created or written*
(a read-only or missing ``HOME``, as for a service user; a file where a directory
should be; a full disk) is one warning per directory and process, and the cubin is
linked and returned uncached: :meth:`LinkCache.load` finds nothing,
:meth:`LinkCache.store` returns ``None``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from skbuild_cudaq.realtime._logging import get_logger
from skbuild_cudaq.realtime.errors import LinkCacheError

__all__ = [
    "CACHE_ENV",
    "CacheUsage",
    "LinkCache",
    "cache_digest",
    "cache_entry",
    "cache_key",
    "default_cache",
    "open_cache_dir",
]

CACHE_ENV = "SKBUILD_CUDAQ_LINK_CACHE"
_DISABLED = {"0", "off", "false", "no", "none"}
_MAGIC = b"SKCQCUB3"
#: magic, key length, payload length, sha256(key + payload); then the key, then the payload
_HEADER = struct.Struct("<8sIQ32s")
_MAX_KEY = 256
_KEY_FORMAT = b"skbuild-cudaq link cache v3\0"
_logger = get_logger(__name__)
_ARCH_NAME = re.compile(r"^sm_\d{2,3}[af]?$")
_KEY_NAME = re.compile(r"^[0-9A-Za-z_-]{1,200}$")  # a file name in the directory, nothing more
_MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ENTRY_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
_TEMPORARY = ".tmp-"
#: A store writes its temporary in milliseconds: one this old was left by a process that died.
_LEFTOVER_AGE = 3600.0


def cache_digest(inputs: Iterable[bytes], options: Iterable[str], nvjitlink_identity: str) -> str:
    """Hex SHA-256 of everything that determines the linked cubin except the arch."""
    h = hashlib.sha256(_KEY_FORMAT)

    def field(data: bytes) -> None:
        h.update(struct.pack("<Q", len(data)))
        h.update(data)

    field(nvjitlink_identity.encode())
    opts = list(options)
    h.update(struct.pack("<Q", len(opts)))
    for opt in opts:
        field(opt.encode())
    items = list(inputs)
    h.update(struct.pack("<Q", len(items)))
    for data in items:
        field(data)
    return h.hexdigest()


def cache_entry(digest: str, arch: str) -> str:
    """The entry name for ``digest`` linked for ``arch`` (``sm_XY``, from ``parse_arch``)."""
    if not _ARCH_NAME.match(arch):
        msg = f"invalid architecture {arch!r} for a link cache entry"
        raise ValueError(msg)
    return f"{digest}-{arch}"


def cache_key(
    inputs: Iterable[bytes], options: Iterable[str], arch: str, nvjitlink_identity: str
) -> str:
    """The cache key: every input byte, option and nvJitLink's identity hashed, then the arch.

    ``options`` are those other than ``-arch`` (the arch is the key's suffix).
    """
    return cache_entry(cache_digest(inputs, options, nvjitlink_identity), arch)


def _default_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "skbuild-cudaq" / "link"


def _fix() -> str:
    return (
        f"fix it (chmod 700, owned by you) or point {CACHE_ENV} at a private directory "
        f"({CACHE_ENV}=off disables the cache)"
    )


def _own_private_group(gid: int) -> bool:
    """Whether ``gid`` is your user-private group (``umask 002`` systems): named after you, no
    other member. Such a group-writable directory is as safe as one writable by you only."""
    if gid != os.getgid():
        return False
    import grp  # only for a group-writable directory on the path
    import pwd

    try:
        user = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == user and set(group.gr_mem) <= {user}


def _check_on_path(st: os.stat_result, shown: str, directory: Path) -> None:
    """A directory on the way to the cache: owned by root or you, not writable by others."""
    uid = os.getuid()
    if st.st_uid not in (0, uid):
        msg = (
            f"a directory on the link cache path is owned by another user: {shown} "
            f"(uid {st.st_uid}, neither root nor you) could replace {directory}; "
            f"refusing to load code from it; {_fix()}"
        )
        raise LinkCacheError(msg)
    mode = st.st_mode
    if not mode & _GROUP_OTHER_WRITE or mode & stat.S_ISVTX:
        return
    if not mode & stat.S_IWOTH and _own_private_group(st.st_gid):
        return
    msg = (
        f"a directory on the link cache path is writable by others: {shown} "
        f"(mode {stat.S_IMODE(mode):04o}, not sticky) lets them replace {directory}; "
        f"refusing to load code from it; {_fix()}"
    )
    raise LinkCacheError(msg)


def _check_cache_dir(st: os.stat_result, directory: Path) -> None:
    if st.st_uid != os.getuid():
        msg = (
            f"link cache directory {directory} is owned by uid {st.st_uid}, not by you "
            f"(uid {os.getuid()}): refusing to load code from it; {_fix()}"
        )
        raise LinkCacheError(msg)
    if st.st_mode & _GROUP_OTHER_WRITE:
        msg = (
            f"link cache directory {directory} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}): refusing to load code from it; {_fix()}"
        )
        raise LinkCacheError(msg)


class _Unusable(LinkCacheError):
    """The location cannot be created, opened or written (not unsafe): the link goes on
    without the cache, after one warning (see the module docstring)."""


def _unusable(directory: Path, exc: OSError) -> LinkCacheError:
    msg = f"cannot use the link cache directory {directory}: {exc.strerror or exc}"
    return _Unusable(msg)


#: directories already warned about in this process (one warning each)
_warned: set[Path] = set()


def _warn_unusable(directory: Path, problem: object) -> None:
    if directory in _warned:
        return
    _warned.add(directory)
    _logger.warning(
        "%s; linking without the link cache (point %s at a writable private directory, "
        "or set it to off)",
        problem,
        CACHE_ENV,
    )


def open_cache_dir(directory: Path, create: bool) -> int | None:
    """Open ``directory`` safely (see the module doc); its descriptor, or None if it is missing.

    With ``create``, missing directories are created (mode 0700). The caller
    closes the descriptor.
    """
    if not directory.is_absolute():
        directory = Path.cwd() / directory
    walk = _CachePathWalk(directory, create)
    try:
        return walk.run()
    except _NotThere:
        return None
    except LinkCacheError:
        raise
    except OSError as exc:
        raise _unusable(directory, exc) from None
    finally:
        walk.close()


class _NotThere(Exception):
    """A directory on the cache path is missing (and is not to be created)."""


class _CachePathWalk:
    """The cache directory opened one component at a time from ``/``, each component
    relative to its parent's descriptor (never by path), each directory on the way
    checked (:func:`_check_on_path`), symbolic links followed by hand (at most
    ``_MAX_SYMLINKS``), the last one checked as the cache directory."""

    def __init__(self, directory: Path, create: bool) -> None:
        self.directory = directory
        self.create = create
        parts = directory.parts[1:]
        # the components left, the next one last; True marks the cache directory's own name
        self.todo = [(name, i == len(parts) - 1) for i, name in enumerate(parts)][::-1]
        self.stack: list[tuple[int, str]] = []  # open directories from "/" down, with paths
        self.links = 0

    def run(self) -> int:
        self.stack.append((os.open("/", _DIR_FLAGS), "/"))
        _check_on_path(os.fstat(self.stack[0][0]), "/", self.directory)
        while self.todo:
            name, is_final = self.todo.pop()
            if name == "..":
                if len(self.stack) > 1:
                    os.close(self.stack.pop()[0])
                continue
            shown = f"{self.stack[-1][1].rstrip('/')}/{name}"
            fd = self._open(name, shown, is_final)
            if fd is None:
                continue  # a symbolic link: its target's components are next
            self.stack.append((fd, shown))
            if not is_final:
                _check_on_path(os.fstat(fd), shown, self.directory)
        _check_cache_dir(os.fstat(self.stack[-1][0]), self.directory)
        return self.stack.pop()[0]

    def close(self) -> None:
        for opened, _ in self.stack:
            os.close(opened)
        self.stack.clear()

    def _open(self, name: str, shown: str, is_final: bool) -> int | None:
        """``name`` in the current directory opened (made first if missing and ``create``);
        None for a symbolic link, whose target was queued."""
        parent = self.stack[-1][0]
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not self.create:
                raise _NotThere from None
            self._make(name, shown)
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            self._follow(name, shown, is_final)
            return None

    def _make(self, name: str, shown: str) -> None:
        try:
            os.mkdir(name, 0o700, dir_fd=self.stack[-1][0])
        except FileExistsError:
            pass  # made meanwhile: opened and checked like any other
        except OSError as exc:
            msg = (
                f"cannot create the link cache directory {self.directory}: "
                f"{exc.strerror or exc} ({shown})"
            )
            raise _Unusable(msg) from None

    def _follow(self, name: str, shown: str, is_final: bool) -> None:
        """Queue the target of the symbolic link ``name`` (refused as the cache directory
        itself, beyond ``_MAX_SYMLINKS``, or foreign in a sticky directory)."""
        parent = self.stack[-1][0]
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):
            msg = f"not a directory on the link cache path {self.directory}: {shown}"
            raise _Unusable(msg) from None
        target = os.readlink(name, dir_fd=parent)
        if is_final:
            msg = (
                f"the link cache directory is a symbolic link: {self.directory} -> {target}; "
                f"point {CACHE_ENV} at a real directory "
                f"({CACHE_ENV}=off disables the cache)"
            )
            raise LinkCacheError(msg) from None
        self.links += 1
        if self.links > _MAX_SYMLINKS:
            msg = f"too many symbolic links on the link cache path {self.directory}"
            raise LinkCacheError(msg) from None
        # The link lies in a checked directory; in a sticky one others may
        # create entries, so there the link itself must be root's or yours.
        if os.fstat(parent).st_mode & stat.S_ISVTX and st.st_uid not in (0, os.getuid()):
            _check_on_path(st, shown, self.directory)
        target_parts = Path(target).parts
        if target_parts and target_parts[0] == "/":
            for opened, _ in self.stack[1:]:
                os.close(opened)
            del self.stack[1:]
            target_parts = target_parts[1:]
        self.todo.extend((part, False) for part in reversed(target_parts))


def _entry_name(key: str) -> str:
    if not _KEY_NAME.match(key):
        msg = f"invalid link cache key {key!r}"
        raise ValueError(msg)
    return f"{key}.cubin"


def _read_exact(fd: int, size: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _entry_digest(raw_key: bytes, payload: bytes) -> bytes:
    h = hashlib.sha256(raw_key)
    h.update(payload)
    return h.digest()


def encode_entry(key: str, cubin: bytes) -> bytes:
    """An entry's bytes: the header binding ``cubin`` to ``key``, the key, the cubin."""
    raw_key = key.encode("ascii")
    digest = _entry_digest(raw_key, cubin)
    return _HEADER.pack(_MAGIC, len(raw_key), len(cubin), digest) + raw_key + cubin


def _unsafe_entry(st: os.stat_result) -> str | None:
    """Why an entry file may not be used (not yours, writable by others, ...), or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by you"
    if st.st_mode & _GROUP_OTHER_WRITE:
        return f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    # 0 links: replaced (os.replace) by another process since it was opened here, which
    # leaves the entry it was complete; more than one: a name elsewhere reaches it too
    if st.st_nlink > 1:
        return f"has {st.st_nlink} hard links"
    return None


def _verified_payload(fd: int, st: os.stat_result, key: str) -> tuple[bytes | None, str | None]:
    """The cubin of the entry open as ``fd`` if its header, key and digest check out; else
    None and why not."""
    head = _read_exact(fd, _HEADER.size)
    if len(head) < _HEADER.size:
        return None, "is truncated"
    magic, key_len, length, digest = _HEADER.unpack(head)
    if magic != _MAGIC or key_len > _MAX_KEY:
        return None, "is not a link cache entry of this version"
    expected = _HEADER.size + key_len + length
    if st.st_size != expected:
        size = "truncated" if st.st_size < expected else "oversized"
        return None, f"is {size} ({st.st_size} bytes, header says {expected})"
    raw_key = _read_exact(fd, key_len)
    if raw_key != key.encode("ascii"):
        shown = raw_key.decode("ascii", errors="replace")
        return None, f"belongs to another key ({shown})"
    payload = _read_exact(fd, length)
    if len(payload) != length or _entry_digest(raw_key, payload) != digest:
        return None, "is corrupt"
    return payload, None


@dataclass(frozen=True)
class CacheUsage:
    """What a link cache holds (:meth:`LinkCache.usage`), or what :meth:`LinkCache.clear`
    removed."""

    directory: Path | None  #: None: the cache is disabled
    entries: int = 0  #: linked cubins
    size: int = 0  #: their bytes on disk
    leftovers: int = 0  #: temporaries of stores that never finished (a process died)


def _files(dir_fd: int) -> Iterator[tuple[str, os.stat_result]]:
    """The directory's entries and temporaries (by name; never a directory), with their
    ``lstat``."""
    with os.scandir(dir_fd) as it:
        for item in it:
            name = item.name
            if not (
                name.startswith(_TEMPORARY)
                or (name.endswith(".cubin") and _KEY_NAME.match(name[:-6]))
            ):
                continue
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                st = item.stat(follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    yield name, st


def _remove_entry(dir_fd: int, name: str, age: float, unused_for: float | None) -> bool:
    """Remove entry ``name`` unless it was used within ``unused_for`` seconds; whether it
    was removed (here: another process may have removed it first)."""
    if unused_for is not None and age < unused_for:
        return False
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _sweep_leftovers(dir_fd: int, now: float) -> int:
    """Remove the temporaries of stores that never finished; returns how many."""
    swept = 0
    for name, st in list(_files(dir_fd)):
        if name.startswith(_TEMPORARY) and now - st.st_mtime > _LEFTOVER_AGE:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
                swept += 1
    return swept


@dataclass(frozen=True)
class LinkCache:
    """A cache directory (``directory=None`` means disabled)."""

    directory: Path | None

    @classmethod
    def from_env(cls) -> LinkCache:
        value = os.environ.get(CACHE_ENV, "").strip()
        if value.lower() in _DISABLED:
            return cls(None)
        return cls(Path(value).expanduser() if value else _default_dir())

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def path_of(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / _entry_name(key)

    def load(self, key: str) -> bytes | None:
        """The verified cubin for ``key``, or None (missing, refused entry, disabled, a
        location that cannot be used: one warning).

        Raises :class:`LinkCacheError` when the directory itself is unsafe.
        """
        if self.directory is None:
            return None
        name = _entry_name(key)
        try:
            dir_fd = open_cache_dir(self.directory, create=False)
        except _Unusable as exc:
            _warn_unusable(self.directory, exc)
            return None
        if dir_fd is None:
            return None
        try:
            return self._read(dir_fd, name, key)
        finally:
            os.close(dir_fd)

    def _refuse(self, name: str, why: str) -> None:
        assert self.directory is not None
        _logger.warning("link cache entry %s %s: not used; re-linking", self.directory / name, why)

    def _read(self, dir_fd: int, name: str, key: str) -> bytes | None:
        try:
            fd = os.open(name, _ENTRY_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self._refuse(name, "is a symbolic link")
            else:
                self._refuse(name, f"cannot be read ({exc.strerror or exc})")
            return None
        try:
            st = os.fstat(fd)
            payload, why = None, _unsafe_entry(st)
            if why is None:
                payload, why = _verified_payload(fd, st, key)
            if why is not None:
                self._refuse(name, why)
            else:  # its last use: what clear(unused_for=...) goes by
                with contextlib.suppress(OSError):
                    os.utime(fd)
            return payload
        finally:
            os.close(fd)

    def usage(self) -> CacheUsage:
        """What the cache holds: its entries, their bytes, the temporaries of stores that
        never finished (nothing when it is disabled or does not exist yet).

        Raises :class:`LinkCacheError` when the directory is unsafe or cannot be read.
        """
        return self._walk(remove=False, unused_for=None)

    def clear(self, unused_for: float | None = None) -> CacheUsage:
        """Remove every entry, or those unused for ``unused_for`` seconds (by the time of
        their last hit or store), and the temporaries of stores that never finished; returns
        what was removed. Entries another process is reading stay whole for it.

        Raises :class:`LinkCacheError` when the directory is unsafe or cannot be read.
        """
        if unused_for is not None and unused_for < 0:
            msg = f"unused_for must be 0 or more seconds, not {unused_for}"
            raise ValueError(msg)
        return self._walk(remove=True, unused_for=unused_for)

    def _walk(self, remove: bool, unused_for: float | None) -> CacheUsage:
        if self.directory is None:
            return CacheUsage(None)
        dir_fd = open_cache_dir(self.directory, create=False)
        if dir_fd is None:
            return CacheUsage(self.directory)
        entries = size = leftovers = 0
        now = time.time()
        try:
            if remove:
                leftovers = _sweep_leftovers(dir_fd, now)
            for name, st in list(_files(dir_fd)):
                age = now - st.st_mtime
                if name.startswith(_TEMPORARY):
                    leftovers += not remove and age > _LEFTOVER_AGE
                elif not remove or _remove_entry(dir_fd, name, age, unused_for):
                    entries += 1
                    size += st.st_size
        except OSError as exc:
            msg = f"cannot read the link cache directory {self.directory}: {exc.strerror or exc}"
            raise LinkCacheError(msg) from None
        finally:
            os.close(dir_fd)
        return CacheUsage(self.directory, entries, size, int(leftovers))

    def store(self, key: str, cubin: bytes) -> Path | None:
        """Write ``cubin`` for ``key`` atomically; returns its path (None when disabled, or
        when the location cannot be created or written: one warning).

        Raises :class:`LinkCacheError` when the directory is unsafe.
        """
        if self.directory is None:
            return None
        try:
            return self._store(key, cubin)
        except _Unusable as exc:
            _warn_unusable(self.directory, exc)
        except OSError as exc:
            _warn_unusable(
                self.directory,
                f"cannot write the link cache directory {self.directory}: {exc.strerror or exc}",
            )
        return None

    def _store(self, key: str, cubin: bytes) -> Path:
        assert self.directory is not None
        name = _entry_name(key)
        dir_fd = open_cache_dir(self.directory, create=True)
        assert dir_fd is not None  # created
        try:
            tmp = f".tmp-{key[:16]}-{os.urandom(8).hex()}"
            fd = os.open(tmp, _WRITE_FLAGS, 0o600, dir_fd=dir_fd)
            try:
                try:
                    data = memoryview(encode_entry(key, cubin))
                    while data:
                        data = data[os.write(fd, data) :]
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            os.fsync(dir_fd)
            with contextlib.suppress(OSError):  # a process killed while storing left them
                _sweep_leftovers(dir_fd, time.time())
        finally:
            os.close(dir_fd)
        return self.directory / name


def default_cache() -> LinkCache:
    """The cache the environment asks for (see the module doc)."""
    return LinkCache.from_env()
