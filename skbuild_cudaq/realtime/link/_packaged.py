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
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skbuild_cudaq.realtime._closing import Closing
from skbuild_cudaq.realtime.errors import DeviceCodeError

__all__ = ["Packaged", "PackagedBinary", "open_distribution", "open_wheel"]

_ELF_MAGIC = b"\x7fELF"


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


def open_wheel(wheel: str | os.PathLike[str]) -> Packaged:
    """The binaries of the wheel file ``wheel`` (extracted; close the result)."""
    path = Path(wheel)
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        msg = f"{path}: no such file"
        raise DeviceCodeError(msg) from None
    except IsADirectoryError:
        msg = f"{path}: a directory, not a wheel (pass the .whl files in it)"
        raise DeviceCodeError(msg) from None
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        msg = f"{path}: not a wheel (cannot read it as a zip file: {exc})"
        raise DeviceCodeError(msg) from None
    tmp = Path(tempfile.mkdtemp(prefix="skbuild-cudaq-check-"))
    binaries: list[PackagedBinary] = []
    try:
        with archive:
            for index, info in enumerate(archive.infolist()):
                if info.is_dir() or info.file_size < len(_ELF_MAGIC):
                    continue
                with archive.open(info) as member:
                    if member.read(len(_ELF_MAGIC)) != _ELF_MAGIC:
                        continue
                    # the member's name never becomes a path (it may hold "../"): only its base
                    # name, under a directory of its own, so that messages name the file
                    base = Path(info.filename.replace("\\", "/")).name
                    if base in ("", ".", ".."):
                        base = "binary"
                    target = tmp / str(index) / base
                    target.parent.mkdir()
                    with target.open("wb") as out:
                        out.write(_ELF_MAGIC)
                        shutil.copyfileobj(member, out)
                binaries.append(PackagedBinary(info.filename, target))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        msg = f"{path}: damaged wheel ({exc})"
        raise DeviceCodeError(msg) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Packaged(path.name, "wheel", binaries, tmp)


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
