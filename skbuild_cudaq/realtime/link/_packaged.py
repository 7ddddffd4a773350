"""The binaries a wheel or an installed distribution ships (for ``check``; no CUDA).

A wheel is a zip file: every member that starts with the ELF magic is a binary
(extension modules, shared libraries an ``auditwheel repair`` vendored into
``<pkg>.libs/``, executables), whatever its name. The ELF reader of
:mod:`skbuild_cudaq.fatbin` reads files, so those members are extracted into a
temporary directory that lives as long as the :class:`Packaged` object (a context
manager). An installed distribution's binaries are read where they are, found
through its ``RECORD`` (:mod:`importlib.metadata`).

The input is not trusted any more than a binary is: a member's name never
becomes a path outside the temporary directory (members are written under a
directory of their index, under the member's base name), and what the zip file or
``RECORD`` cannot give is one
:class:`~skbuild_cudaq.errors.DeviceCodeError` line.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.errors import DeviceCodeError

__all__ = [
    "MAX_BINARY_SIZE",
    "MAX_UNPACKED_SIZE",
    "Packaged",
    "PackagedBinary",
    "UnpackLimits",
    "open_distribution",
    "open_wheel",
]

_ELF_MAGIC = b"\x7fELF"
#: bytes of an ELF header: 64 (ELF64) at most, 52 (ELF32) at least
_ELF_HEADER_MAX = 64
_ELF_HEADER_MIN = 52


@dataclass(frozen=True)
class PackagedBinary:
    """One ELF file of a wheel or distribution: its name there and a file to read it from."""

    name: str  #: the path inside the wheel, or relative to the distribution's site directory
    path: Path  #: where it can be read (extracted for a wheel)


class Packaged(Closing):
    """The binaries of one wheel or installed distribution (``with`` it: extracted files go)."""

    def __init__(
        self, label: str, kind: str, binaries: Sequence[PackagedBinary], tmp: Path | None = None
    ) -> None:
        self.label = label  #: the wheel's file name, or ``"<name> <version> (installed)"``
        self.kind = kind  #: ``"wheel"`` or ``"distribution"``
        self.binaries = tuple(binaries)
        self._tmp = tmp

    def close(self) -> None:
        """Remove what was extracted (idempotent)."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> Packaged:
        return self


#: What ``check`` unpacks of one wheel at most, by default: one binary, and all of them
#: together (``--max-binary-size`` / ``--max-unpacked-size``, ``check_package``'s
#: ``max_binary_size`` / ``max_unpacked_size``). Only members that start with an ELF header
#: are written; a wheel whose binaries are larger is refused before a byte of them is.
MAX_BINARY_SIZE = 1 << 30
MAX_UNPACKED_SIZE = 4 << 30
_COPY_CHUNK = 1 << 20
#: the fixed part of a zip local file header (the name and extra field follow)
_LOCAL_HEADER = 30


@dataclass(frozen=True)
class UnpackLimits:
    """Bytes ``check`` may unpack from one wheel: one binary (``binary``), all (``total``)."""

    binary: int = MAX_BINARY_SIZE
    total: int = MAX_UNPACKED_SIZE

    def __post_init__(self) -> None:
        for name in ("binary", "total"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                msg = f"the unpack limit {name} must be a positive number of bytes, not {value!r}"
                raise DeviceCodeError(msg)


def _size(n: int) -> str:
    """``n`` bytes in words, for messages."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def open_wheel(wheel: str | os.PathLike[str], limits: UnpackLimits | None = None) -> Packaged:
    """The binaries of the wheel file ``wheel`` (extracted; close the result).

    Refused, in one :class:`DeviceCodeError` line, before anything is written: what is not
    a regular file, a zip file whose entries overlap (one member's data claimed by several
    records: a zip bomb; Python before 3.13 reads them), a member that starts like an ELF
    file but whose header is not one, and binaries larger than ``limits``.
    """
    from skbuild_cudaq._elf import named_path, open_regular

    limits = limits or UnpackLimits()
    path = named_path(wheel)
    try:
        stream = open_regular(path)
    except FileNotFoundError:
        msg = f"{path}: no such file"
        raise DeviceCodeError(msg) from None
    except DeviceCodeError:
        if path.is_dir():
            msg = f"{path}: a directory, not a wheel (pass the .whl files in it)"
            raise DeviceCodeError(msg) from None
        raise
    except (OSError, ValueError) as exc:
        msg = f"{path}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
        raise DeviceCodeError(msg) from None
    with stream:
        try:
            archive = zipfile.ZipFile(stream)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            msg = f"{path}: not a wheel (cannot read it as a zip file: {exc})"
            raise DeviceCodeError(msg) from None
        with archive:
            return _extract(path, archive, limits)


def _extract(path: Path, archive: zipfile.ZipFile, limits: UnpackLimits) -> Packaged:
    tmp = Path(tempfile.mkdtemp(prefix="skbuild-cudaq-check-"))
    try:
        _refuse_overlaps(path, archive)
        binaries = _binaries(path, archive, limits, tmp)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        msg = f"{path}: damaged wheel ({exc})"
        raise DeviceCodeError(msg) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Packaged(path.name, "wheel", binaries, tmp)


def _refuse_overlaps(path: Path, archive: zipfile.ZipFile) -> None:
    """Refuse entries whose data overlap another's (checked here on every Python)."""
    infos = sorted(archive.infolist(), key=lambda i: i.header_offset)
    start_dir = getattr(archive, "start_dir", None)
    for index, info in enumerate(infos):
        end = info.header_offset + _LOCAL_HEADER + info.compress_size  # at least this far
        following = infos[index + 1].header_offset if index + 1 < len(infos) else start_dir
        if following is not None and end > following:
            msg = (
                f"{path}: refused: its zip entries overlap (the data of {_shown(info.filename)} "
                "is claimed by another record too: a zip bomb, or a damaged wheel)"
            )
            raise DeviceCodeError(msg)


def _shown(name: str) -> str:
    """A member's name for a message: quoted, with what is not printable escaped."""
    return ascii(name) if not name.isprintable() else repr(name)


def _binaries(
    path: Path, archive: zipfile.ZipFile, limits: UnpackLimits, tmp: Path
) -> list[PackagedBinary]:
    binaries: list[PackagedBinary] = []
    unpacked = 0
    for index, info in enumerate(archive.infolist()):
        if info.is_dir() or info.file_size < len(_ELF_MAGIC):
            continue
        with archive.open(info) as member:
            header = member.read(_ELF_HEADER_MAX)
            if header[: len(_ELF_MAGIC)] != _ELF_MAGIC:
                continue
            _check_elf_header(path, info, header)
            unpacked += info.file_size
            _check_limits(path, info, unpacked, limits)
            # the member's name never becomes a path (it may hold "../"): only its base
            # name, under a directory of its own, so that messages name the file
            base = Path(info.filename.replace("\\", "/")).name
            if base in ("", ".", ".."):
                base = "binary"
            target = tmp / str(index) / base
            target.parent.mkdir()
            with target.open("wb") as out:
                out.write(header)
                _copy(member, out, info.file_size - len(header))
        binaries.append(PackagedBinary(info.filename, target))
    return binaries


def _copy(member: IO[bytes], out: IO[bytes], left: int) -> None:
    """Copy at most ``left`` more bytes (what the member declared; zipfile stops there too)."""
    while left > 0:
        chunk = member.read(min(_COPY_CHUNK, left))
        if not chunk:
            return
        out.write(chunk)
        left -= len(chunk)


def _check_limits(path: Path, info: zipfile.ZipInfo, unpacked: int, limits: UnpackLimits) -> None:
    if info.file_size > limits.binary:
        msg = (
            f"{path}: refused: the binary {_shown(info.filename)} unpacks to "
            f"{_size(info.file_size)}, more than the {_size(limits.binary)} check unpacks of one "
            "binary (a zip bomb?); if it is real, raise the limit with --max-binary-size"
        )
        raise DeviceCodeError(msg)
    if unpacked > limits.total:
        msg = (
            f"{path}: refused: its binaries unpack to more than the {_size(limits.total)} "
            "check unpacks of one wheel (a zip bomb?); if they are real, raise the limit "
            "with --max-unpacked-size"
        )
        raise DeviceCodeError(msg)


def _check_elf_header(path: Path, info: zipfile.ZipInfo, header: bytes) -> None:
    """The ELF header read from the member's stream, checked before a byte is written: its
    class, byte order and version, and a section header table inside the member."""
    problem = None
    if len(header) < _ELF_HEADER_MIN or header[4] not in (1, 2) or header[5] not in (1, 2):
        problem = "its ELF header is truncated or of no known class and byte order"
    elif header[6] != 1:
        problem = f"its ELF header has version {header[6]}, not 1"
    else:
        order = "<" if header[5] == 1 else ">"
        if header[4] == 2:
            shoff, shentsize, shnum = struct.unpack_from(order + "Q10xHH", header, 40)
        else:
            shoff, shentsize, shnum = struct.unpack_from(order + "I10xHH", header, 32)
        if shoff + shentsize * shnum > info.file_size:
            problem = (
                f"its section header table (offset {shoff}, {shnum} x {shentsize} bytes) runs "
                f"past the member's {info.file_size} bytes"
            )
    if problem is not None:
        msg = f"{path}: {_shown(info.filename)} starts like an ELF file but {problem}"
        raise DeviceCodeError(msg)


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(_ELF_MAGIC)) == _ELF_MAGIC
    except OSError:
        return False


def open_distribution(name: str, path: Iterable[str] | None = None) -> Packaged:
    """The binaries of the installed distribution ``name`` (found on ``path``, default
    ``sys.path``), read in place."""
    try:
        if path is None:
            dist = importlib.metadata.distribution(name)
        else:
            found = list(importlib.metadata.distributions(name=name, path=list(path)))
            if not found:
                raise importlib.metadata.PackageNotFoundError(name)
            dist = found[0]
    except importlib.metadata.PackageNotFoundError:
        msg = (
            f"{name}: neither a wheel file nor an installed distribution (pass the path of a "
            f".whl file, or the name of a distribution installed in this environment)"
        )
        raise DeviceCodeError(msg) from None
    files = dist.files
    label = f"{dist.metadata['Name'] or name} {dist.version} (installed)"
    if files is None:
        msg = f"{label}: the distribution lists no files (no RECORD): cannot find its binaries"
        raise DeviceCodeError(msg)
    binaries = []
    for file in files:
        located = Path(str(dist.locate_file(file)))
        if located.is_file() and _is_elf(located):
            binaries.append(PackagedBinary(Path(str(file)).as_posix(), located))
    if _is_editable(dist):
        label = label.replace("(installed)", "(installed, editable)")
        for file in files:
            if str(file).endswith(".py") and "/" not in Path(str(file)).as_posix():
                binaries += _redirected_binaries(Path(str(dist.locate_file(file))))
        if not binaries:
            msg = (
                f"{label}: an editable install whose compiled modules are not where check can "
                "find them (only scikit-build-core's editable installs say where theirs are): "
                "check a wheel of the project (pip wheel) instead"
            )
            raise DeviceCodeError(msg)
    return Packaged(label, "distribution", binaries)


def _is_editable(dist: importlib.metadata.Distribution) -> bool:
    """Whether ``dist`` was installed editable (PEP 660: ``direct_url.json``)."""
    import json

    text = dist.read_text("direct_url.json")
    try:
        info = json.loads(text) if text else {}
    except ValueError:
        return False
    dir_info = info.get("dir_info") if isinstance(info, dict) else None
    return isinstance(dir_info, dict) and dir_info.get("editable") is True


def _redirected_binaries(module: Path) -> list[PackagedBinary]:
    """The compiled modules a scikit-build-core editable install redirects to.

    Its redirect module ends with one ``install(known_source_files, known_wheel_files, ...)``
    call whose second argument maps each module name to the file it is loaded from (in the
    build directory's install tree). Read as data (``ast.literal_eval``), never run.
    """
    import ast

    try:
        tree = ast.parse(module.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    found = []
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "install"
            and len(call.args) >= 2
        ):
            continue
        try:
            wheel_files = ast.literal_eval(call.args[1])
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
        if not isinstance(wheel_files, dict):
            continue
        for name, path in wheel_files.items():
            located = Path(str(path))
            if located.is_file() and _is_elf(located):
                package = str(name).rpartition(".")[0].replace(".", "/")
                inside = f"{package}/{located.name}" if package else located.name
                found.append(PackagedBinary(inside, located))
    return found
