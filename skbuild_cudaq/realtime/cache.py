"""On-disk cache of linked cubins.

Key: SHA-256 over every input byte (each container, in order), every option
and nvJitLink's identity (taken from the installed wheel's metadata and the
library file's stat, so that a warm start never loads libnvJitLink), followed
by the architecture: ``<sha256>-sm_90``. Entries are written atomically
(temporary file + ``os.replace``) and carry a header with the payload's length
and SHA-256, verified before use: a corrupt or truncated entry is ignored (the
caller re-links and overwrites).

Location: ``$SKBUILD_CUDAQ_LINK_CACHE`` if set (``0``/``off``/``false``/``no``
disable the cache), else ``$XDG_CACHE_HOME/skbuild-cudaq/link`` or
``~/.cache/skbuild-cudaq/link``. The directory is created 0700 and refused if it
is not owned by the user or is writable by group or others.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ._logging import get_logger
from .errors import LinkCacheError

__all__ = ["CACHE_ENV", "LinkCache", "cache_digest", "cache_entry", "cache_key", "default_cache"]

CACHE_ENV = "SKBUILD_CUDAQ_LINK_CACHE"
_DISABLED = {"0", "off", "false", "no", "none"}
_MAGIC = b"SKCQCUB1"
_HEADER = struct.Struct("<8sQ32s")  # magic, payload length, sha256(payload)
_logger = get_logger(__name__)
_KEY_FORMAT = b"skbuild-cudaq link cache v2\0"
_ARCH_NAME = re.compile(r"^sm_\d{2,3}[af]?$")


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

    def _checked_dir(self, create: bool) -> Path | None:
        directory = self.directory
        if directory is None:
            return None
        if create:
            try:
                directory.parent.mkdir(parents=True, exist_ok=True)
                directory.mkdir(mode=0o700, exist_ok=True)
            except OSError as exc:
                msg = f"cannot create the link cache directory {directory}: {exc.strerror or exc}"
                raise LinkCacheError(msg) from None
        try:
            st = directory.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            msg = f"cannot use the link cache directory {directory}: {exc.strerror or exc}"
            raise LinkCacheError(msg) from None
        fix = (
            f"fix it (chmod 700) or point {CACHE_ENV} at a private directory "
            f"({CACHE_ENV}=off disables the cache)"
        )
        if not stat.S_ISDIR(st.st_mode):
            msg = f"link cache {directory} is not a directory; {fix}"
            raise LinkCacheError(msg)
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            msg = (
                f"link cache directory {directory} is owned by uid {st.st_uid}, not by you "
                f"(uid {os.getuid()}): refusing to load code from it; {fix}"
            )
            raise LinkCacheError(msg)
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            msg = (
                f"link cache directory {directory} is writable by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}): refusing to load code from it; {fix}"
            )
            raise LinkCacheError(msg)
        return directory

    def path_of(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}.cubin"

    def load(self, key: str) -> bytes | None:
        """The verified cubin for ``key``, or None (missing, corrupt, truncated, disabled)."""
        directory = self._checked_dir(create=False)
        if directory is None:
            return None
        path = directory / f"{key}.cubin"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _logger.info("link cache: cannot read %s: %s", path, exc.strerror or exc)
            return None
        if len(data) < _HEADER.size:
            _logger.info("link cache: %s is truncated; re-linking", path)
            return None
        magic, length, digest = _HEADER.unpack_from(data)
        payload = data[_HEADER.size :]
        if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
            _logger.info("link cache: %s is corrupt or truncated; re-linking", path)
            return None
        return payload

    def store(self, key: str, cubin: bytes) -> Path | None:
        """Write ``cubin`` for ``key`` atomically; returns its path (None when disabled)."""
        directory = self._checked_dir(create=True)
        if directory is None:
            return None
        path = directory / f"{key}.cubin"
        import tempfile  # only a cache miss writes

        header = _HEADER.pack(_MAGIC, len(cubin), hashlib.sha256(cubin).digest())
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(header)
                out.write(cubin)
            Path(tmp).replace(path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def default_cache() -> LinkCache:
    """The cache the environment asks for (see the module docstring)."""
    return LinkCache.from_env()
