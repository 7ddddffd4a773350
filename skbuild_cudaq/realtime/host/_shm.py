"""The shared-memory ring of ``cudaq-realtime-test-server --transport=host-ring``: its segment
in ``/dev/shm``, created, attached and swept (Linux; no CUDA).

Names: ``cudaq-rt-ring-<pid>-<16 hex digits>`` (the creating server's pid, a random token).
Nothing else is ever attached: :func:`attach` takes only a name of that form, opens it
relative to ``/dev/shm`` without following links, and checks that it is a regular file
owned by you, mode 0600, of the ring's size; anything else is a :class:`RingError`.

Lifetime (why this design). A segment must never outlive its server for good, whatever
kills it: ``SIGKILL`` of the whole process group, the OOM killer, a container stop -- none
runs any clean-up of the server's, and Python's resource tracker dies with the group.
So a server

- holds a shared ``flock`` on its segment for its whole life (the kernel drops it when the
  process dies, however it dies), and stamps the name with its pid;
- removes the name at a clean exit, as before;
- sweeps at start: every segment of this naming owned by you whose lock nobody holds and
  whose pid is not a live process is removed (a client that still maps it keeps its
  mapping; only the name goes). Anyone can create a file in ``/dev/shm``: a name whose pid
  no process can have, a link, or what is not your regular file is skipped before its pid
  is looked at (never an error: a planted name cannot stop a server).

A live server's segment is never swept: its lock is held (also when the pid is not visible,
in another pid namespace sharing ``/dev/shm``), and a segment becomes visible under its
name only once locked (created under a temporary name, locked, then renamed). A killed
server's segment goes at the next server start on the machine, by any user's server for
their own.

Rejected designs: unlinking once the peer attached leaves the segment between creation
and attach, and lets only one peer ever attach; handing the peer a descriptor
(``memfd`` reached through ``/proc/<pid>/fd``, or ``SCM_RIGHTS``) leaves nothing behind
but does not reach a peer in another pid namespace sharing ``/dev/shm``, and a native
client could no longer ``shm_open`` the name the READY line prints.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import re
import secrets
import stat
from dataclasses import dataclass, field

from skbuild_cudaq.realtime._arguments import typed_arguments
from skbuild_cudaq.realtime._logging import get_logger
from skbuild_cudaq.realtime.errors import RingError
from skbuild_cudaq.realtime.ring import RingClient, RingLayout

__all__ = ["SHM_DIR", "Segment", "attach", "connect_host_ring", "create", "ring_size", "sweep"]

SHM_DIR = "/dev/shm"
_PREFIX = "cudaq-rt-ring"
#: a name the server creates (what attach() accepts; a leading "/" as shm_open writes it)
_NAME = re.compile(rf"/?({_PREFIX}-[0-9]{{1,10}}-[0-9a-f]{{16}})")
#: what sweep() may remove: a segment, or the temporary name it is created under
_SWEPT = re.compile(rf"\.?{_PREFIX}-([0-9]{{1,10}})-[0-9a-f]{{16}}(?:\.new)?")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_logger = get_logger(__name__)


def _open_dir() -> int:
    try:
        return os.open(SHM_DIR, _DIR_FLAGS)
    except OSError as exc:
        msg = f"cannot open {SHM_DIR}, where shared-memory rings live: {exc.strerror or exc}"
        raise RingError(msg) from None


@dataclass
class Segment:
    """A segment this process created: its name, its mapping, its locked descriptor."""

    name: str
    size: int
    fd: int
    buf: mmap.mmap
    _dir_fd: int = field(repr=False)
    _address: int = field(default=0, repr=False)

    def watch(self) -> None:
        """A process of the same user may shrink the file under the mapping (``ftruncate``):
        the next access past its new end is a SIGBUS, which would kill the server without a
        word. Watched, it ends the process with one line naming the segment instead (exit
        status 1; the native core's segment.c)."""
        from skbuild_cudaq.realtime.host import _native

        view = (ctypes.c_char * self.size).from_buffer(self.buf)
        try:
            self._address = ctypes.addressof(view)
        finally:
            del view  # no export left: close() can unmap
        if not _native.watch_segment(f"{SHM_DIR}/{self.name}", self._address, self.size):
            _logger.debug("%s: not watched for truncation (too many segments mapped)", self.name)

    def close(self) -> None:
        """Remove the name first (so that it never outlives the server, whatever still maps
        it), then unmap (unless a view still exists: the garbage collector finishes it) and
        drop the lock. Idempotent."""
        if self.fd < 0:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.name, dir_fd=self._dir_fd)
        finally:
            with contextlib.suppress(BufferError):
                self.buf.close()
            if self.buf.closed and self._address:  # else still mapped: still watched
                from skbuild_cudaq.realtime.host import _native

                _native.unwatch_segment(self._address)
            os.close(self.fd)
            os.close(self._dir_fd)
            self.fd = -1


#: the largest pid Linux hands out (PID_MAX_LIMIT on 64-bit); a name with a larger one (or
#: 0) was not written by a server: anyone may plant such a name in /dev/shm
_PID_MAX = 1 << 22


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process, alive
        return True
    return True


def _sweepable(name: str, dir_fd: int) -> bool:
    """Whether ``name`` may be a segment of a server that is gone: of this naming with a pid
    a server can have, a regular file owned by you (not a link), whose pid is not alive.
    Checked in that order, so that what is not ours, or cannot be parsed, is never
    signalled, opened or locked."""
    m = _SWEPT.fullmatch(name)
    if m is None or not 0 < int(m[1]) <= _PID_MAX:
        return False
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False  # gone meanwhile
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return False
    return not _alive(int(m[1]))


def sweep(dir_fd: int | None = None) -> int:
    """Remove the segments (of this naming, owned by you) of servers that are gone; returns
    how many. See the module docstring for the rule."""
    own = dir_fd is None
    if dir_fd is None:
        dir_fd = _open_dir()
    removed = 0
    try:
        for name in os.listdir(dir_fd):  # noqa: PTH208  # a descriptor: no Path for it
            if not _sweepable(name, dir_fd):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # gone meanwhile, a link, not readable: not ours to remove
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its server lives (in another pid namespace)
                try:
                    now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                        os.unlink(name, dir_fd=dir_fd)
                        removed += 1
                except FileNotFoundError:
                    pass  # another sweeper was first
            finally:
                os.close(fd)
    finally:
        if own:
            os.close(dir_fd)
    if removed:
        _logger.info(
            "removed %d shared-memory ring(s) left in %s by servers that did not exit cleanly",
            removed,
            SHM_DIR,
        )
    return removed


def create(size: int) -> Segment:
    """Sweep, then create a segment of ``size`` bytes (zeroed, mode 0600, locked, mapped).

    Raises ``OSError`` when it cannot be created or mapped (nothing is left behind).
    """
    dir_fd = _open_dir()
    try:
        sweep(dir_fd)
        pid = os.getpid()
        while True:
            token = secrets.token_hex(8)
            name = f"{_PREFIX}-{pid}-{token}"
            temporary = f".{name}.new"
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS
            fd = os.open(temporary, flags, 0o600, dir_fd=dir_fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # held for the server's life
                os.fchmod(fd, 0o600)  # whatever the umask
                os.ftruncate(fd, size)
                try:
                    os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except FileNotFoundError:  # swept before it was locked: try another name
                    os.close(fd)
                    continue
                try:
                    buf = mmap.mmap(fd, size)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=dir_fd)
                    raise
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=dir_fd)
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
            segment = Segment(name, size, fd, buf, dir_fd)
            segment.watch()
            return segment
    except BaseException:
        os.close(dir_fd)
        raise


def attach(name: str, size: int, what: str) -> mmap.mmap:
    """Map the segment ``name`` a server created, ``size`` bytes (``what`` describes the ring
    for messages); :class:`RingError` unless it is exactly that (see the module docstring)."""
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        msg = (
            f"{name!r} is not the name of a shared-memory ring a test server created (expected "
            f"{_PREFIX}-<pid>-<16 hex digits>, as the shm= of its READY line)"
        )
        raise RingError(msg)
    base = m[1]
    shown = f"{SHM_DIR}/{base}"
    dir_fd = _open_dir()
    try:
        try:
            fd = os.open(base, os.O_RDWR | _OPEN_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            msg = f"no shared-memory ring {shown}: is its server still running?"
            raise RingError(msg) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                msg = f"the shared-memory ring {shown} is a symbolic link: refusing to attach"
            else:
                msg = f"cannot open the shared-memory ring {shown}: {exc.strerror or exc}"
            raise RingError(msg) from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        elif st.st_uid != os.geteuid():
            problem = (
                f"is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): its owner "
                "could change or truncate it under the client"
            )
        elif stat.S_IMODE(st.st_mode) != 0o600:
            problem = (
                f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0600: others could change "
                "or truncate it under the client"
            )
        elif st.st_size != size:
            problem = (
                f"has {st.st_size} bytes, but {what} needs {size}: give the slots and slot "
                "size of the server's READY line"
            )
        if problem is not None:
            msg = f"the shared-memory ring {shown} {problem}; refusing to attach"
            raise RingError(msg)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def ring_size(layout: RingLayout) -> str:
    """``layout`` in words, for messages about the memory a ring takes."""
    return (
        f"{layout.num_slots} slots of {layout.slot_size} bytes: "
        f"{layout.total_bytes} bytes with the flags"
    )


@typed_arguments(name="the shm=<name> of the server's READY line")
def connect_host_ring(name: str, num_slots: int, slot_size: int) -> RingClient:
    """A :class:`~skbuild_cudaq.realtime.RingClient` over the shared-memory ring of a
    ``cudaq-realtime-test-server --transport=host-ring`` (``shm=<name>`` of its READY line).
    Close it before the server exits.

    Only a ring such a server created is attached: ``name`` must have the form the server
    gives it (``cudaq-rt-ring-<pid>-<hex>``), and the segment must be a regular file in
    ``/dev/shm`` (not a link), owned by you, mode 0600, of the size of a ring of
    ``num_slots`` slots of ``slot_size`` bytes; otherwise :class:`RingError` says which.
    """
    layout = RingLayout(num_slots, slot_size)
    mapping = attach(name, layout.total_bytes, f"a ring of {ring_size(layout)}")
    try:
        return RingClient(mapping, layout, spin=4096)
    except BaseException:
        with contextlib.suppress(BufferError):
            mapping.close()
        raise
