"""nvJitLink in a child process, so that a crash of nvJitLink cannot take the caller down.

The reader checks every size and offset of the device code it hands nvJitLink,
but not the compressed code itself: nvJitLink decompresses and parses it, and a
few flipped bits in it can make nvJitLink crash the process (SIGSEGV, SIGABRT).
``python -m skbuild_cudaq link`` therefore links in a child process by default
(:attr:`LinkOptions.isolated <skbuild_cudaq.realtime.LinkOptions.isolated>`);
the parent turns a crash, a failure or a timeout of the child into one
:class:`~skbuild_cudaq.realtime.LinkError` line. The run time's lookups link
in-process: they link the application's own installed module.

The child is ``python -c`` running :func:`main` of this module from the same
package as the parent. Protocol (the parent writes stdin, the child writes
stdout), each message a
``u64`` length, a JSON header of that length, then raw bytes:

- request: ``{"options": [...], "sources": str, "inputs": [[name, size], ...]}``
  then every input's bytes in order;
- reply: ``{"ok": true, "seconds": <nvJitLink's time>}`` then the cubin, or
  ``{"ok": false, "error": class name, "message": ..., "log": ..., "result": ...}``.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from skbuild_cudaq.realtime.errors import LinkError, VersionMismatchError

__all__ = ["ChildLink", "link_in_child", "main"]

_LENGTH = struct.Struct("<Q")
_ERRORS: dict[str, type[LinkError]] = {
    "LinkError": LinkError,
    "VersionMismatchError": VersionMismatchError,
}


def _frame(header: dict[str, object], *blobs: bytes) -> bytes:
    text = json.dumps(header).encode()
    return b"".join((_LENGTH.pack(len(text)), text, *blobs))


def _unframe(data: bytes) -> tuple[dict[str, object], memoryview]:
    """The JSON header and the bytes after it; ``ValueError`` if ``data`` is not one message."""
    if len(data) < _LENGTH.size:
        msg = "no reply"
        raise ValueError(msg)
    (length,) = _LENGTH.unpack_from(data)
    end = _LENGTH.size + length
    if end > len(data):
        msg = "truncated reply"
        raise ValueError(msg)
    header = json.loads(data[_LENGTH.size : end])
    if not isinstance(header, dict):
        msg = "malformed reply"
        raise ValueError(msg)
    return header, memoryview(data)[end:]


#: The child's program: this very skbuild_cudaq package, whatever the child's sys.path.
_CHILD = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from skbuild_cudaq.realtime.link._child import main; sys.exit(main())"
)


def _package_root() -> Path:
    import skbuild_cudaq

    return Path(skbuild_cudaq.__file__).resolve().parent.parent


def _last_line(stderr: bytes) -> str:
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1].strip()[:300] if lines else ""


def _known_defect() -> str | None:
    """Whether the nvJitLink the child loaded is a release known to crash on valid input."""
    from skbuild_cudaq.realtime.link import _nvjitlink

    try:
        return _nvjitlink.known_defect(_nvjitlink.nvjitlink_version())
    except Exception:  # which nvJitLink it was cannot be told: the crash message stands alone
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class ChildLink(NamedTuple):
    """What a link in a child process gave: the cubin and nvJitLink's own time (seconds,
    without the child's start-up)."""

    cubin: bytes
    seconds: float


def link_in_child(
    inputs: Sequence[tuple[str, bytes]],
    options: Sequence[str],
    sources: str = "",
    timeout: float | None = None,
    memory_limit: int | None = None,
    *,
    libraries: Sequence[tuple[str, bytes]] = (),
) -> ChildLink:
    """Link ``(name, fatbin container)`` inputs with nvJitLink in a child process.

    Returns the cubin and the time nvJitLink took. Raises :class:`LinkError` (or
    :class:`VersionMismatchError`) as an in-process link would, and a :class:`LinkError`
    when the child dies by a signal, fails otherwise or runs past ``timeout`` seconds.
    ``memory_limit``: bytes of address space the child may use (``RLIMIT_AS``; None: no
    limit), so that damaged code cannot make nvJitLink take the machine's memory.
    ``ImportError`` when the child cannot load nvJitLink.
    """
    request = _frame(
        {
            "options": list(options),
            "sources": sources,
            "inputs": [[name, len(data)] for name, data in inputs],
            "libraries": [[name, len(data)] for name, data in libraries],
            "memory_limit": memory_limit,
        },
        *(data for _, data in inputs),
        *(data for _, data in libraries),
    )
    what = f"linking {sources}" if sources else "linking"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD.format(root=str(_package_root()))],
            input=request,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        msg = f"nvJitLink did not finish within {timeout:g} s while {what} (child process killed)"
        raise LinkError(msg) from None
    except OSError as exc:
        msg = f"cannot start the nvJitLink child process: {exc.strerror or exc}"
        raise LinkError(msg) from None
    if proc.returncode < 0:
        said = _last_line(proc.stderr)
        msg = (
            f"nvJitLink crashed ({_signal_name(-proc.returncode)}) while {what}: the device "
            "code is malformed (its compressed code passed every check the reader can make) "
            "or nvJitLink has a bug; the link ran in a child process, nothing else was affected"
        )
        if memory_limit is not None:
            msg += f" (its memory was limited to {memory_limit >> 20} MiB)"
        if said:
            msg += f" (it said: {said})"
        defect = _known_defect()
        if defect:
            msg += f"; {defect}"
        raise LinkError(msg, result="CRASHED")
    try:
        header, rest = _unframe(proc.stdout)
    except ValueError as exc:
        said = _last_line(proc.stderr) or str(exc)
        msg = (
            f"the nvJitLink child process failed (exit status {proc.returncode}) "
            f"while {what}: {said}"
        )
        raise LinkError(msg) from None
    if header.get("ok") is True:
        seconds = header.get("seconds")
        return ChildLink(bytes(rest), float(seconds) if isinstance(seconds, (int, float)) else 0.0)
    error, message = str(header.get("error")), str(header.get("message"))
    if error == "ImportError":
        raise ImportError(message)
    cls = _ERRORS.get(error, LinkError)
    result = header.get("result")
    raise cls(message, str(header.get("log") or ""), None if result is None else str(result))


def _serve(request: bytes) -> bytes:
    header, rest = _unframe(request)
    options = [str(o) for o in header["options"]]  # type: ignore[attr-defined]
    inputs: list[tuple[str, bytes]] = []
    libraries: list[tuple[str, bytes]] = []
    offset = 0
    for into, key in ((inputs, "inputs"), (libraries, "libraries")):
        for name, size in header.get(key, []):  # type: ignore[attr-defined]
            into.append((str(name), bytes(rest[offset : offset + int(size)])))
            offset += int(size)
    limit = header.get("memory_limit")
    if limit is not None:  # before libnvJitLink is loaded
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))  # type: ignore[call-overload]
    from skbuild_cudaq.realtime.link import _nvjitlink

    try:
        start = time.perf_counter()
        sources = str(header.get("sources") or "")
        cubin = _nvjitlink.link_blobs(inputs, options, sources, libraries)
        seconds = time.perf_counter() - start
    except LinkError as exc:
        reply = {"ok": False, "error": type(exc).__name__, "message": exc.message}
        reply.update(log=exc.log, result=exc.result)
        return _frame(reply)
    except ImportError as exc:
        return _frame({"ok": False, "error": "ImportError", "message": str(exc)})
    return _frame({"ok": True, "seconds": seconds}, cubin)


def main() -> int:
    """The child: one request on stdin, one reply on stdout (a protocol channel, not messages).

    Whatever nvJitLink itself might print to stdout goes to stderr instead, so it cannot
    corrupt the reply.
    """
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    reply = _serve(sys.stdin.buffer.read())
    with os.fdopen(reply_fd, "wb") as channel:
        channel.write(reply)
    return 0


if __name__ == "__main__":
    sys.exit(main())
