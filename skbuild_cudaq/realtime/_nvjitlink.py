"""nvJitLink: its identity without loading it, the version rule, and the link itself.

A warm start (cache hit) must not load libnvJitLink, so the cache key uses
:func:`nvjitlink_identity`, which reads the installed ``nvidia-nvjitlink``
distribution (version, and the library file's path, size and mtime) through
``importlib.metadata``: that is the library ``cuda.bindings`` loads, because
cuda-pathfinder searches the wheel's ``site-packages/nvidia/cu*/lib`` first.
Only :func:`link` (a cache miss) imports ``cuda.bindings.nvjitlink``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .device_code import LinkInput
from .errors import LinkError, VersionMismatchError

__all__ = [
    "LTO_IR_RELEASES",
    "NvJitLinkInfo",
    "check_versions",
    "ir_release",
    "link",
    "nvjitlink_identity",
    "nvjitlink_version",
    "version_problem",
]

#: Known LTO-IR code versions (entry header major.minor) and the CUDA release
#: whose nvcc writes them. Code versions grow with CUDA releases, so a version
#: between two known points comes from a release between theirs.
LTO_IR_RELEASES: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((1, 64), (12, 9)),  # NVRTC 12.9 (nvidia-cuda-nvrtc-cu12)
    ((1, 65), (13, 0)),
    ((1, 67), (13, 5)),
)

_LTO_IR = 8


@dataclass(frozen=True)
class NvJitLinkInfo:
    """The installed nvidia-nvjitlink wheel and its library file."""

    distribution: str
    version: str
    library: Path

    @property
    def package(self) -> str:
        return f"{self.distribution} {self.version}"


#: Where the nvidia-nvjitlink wheels put the library, relative to site-packages
#: (the places cuda-pathfinder searches first).
_WHEEL_LIB_DIRS = ("nvidia/cu13/lib", "nvidia/cu12/lib", "nvidia/nvjitlink/lib")


@functools.cache
def installed_nvjitlink() -> NvJitLinkInfo | None:
    """The nvidia-nvjitlink wheel of this environment: its library file and version.

    Looks for the file along ``sys.path`` the way cuda-pathfinder finds it, and
    reads the version from the ``*.dist-info`` directory name: no library load
    and no ``importlib.metadata`` import (which alone costs tens of ms).
    """
    for entry in sys.path:
        site = Path(entry or ".")
        for sub in _WHEEL_LIB_DIRS:
            libdir = site / sub
            if not libdir.is_dir():
                continue
            libs = sorted(libdir.glob("libnvJitLink.so*"))
            if not libs:
                continue
            name, version = "nvidia-nvjitlink", "unknown"
            for info in sorted(site.glob("nvidia_nvjitlink*.dist-info")):
                dist, _, rest = info.name[: -len(".dist-info")].partition("-")
                name, version = dist.replace("_", "-"), rest
                break
            return NvJitLinkInfo(name, version, libs[0].resolve())
    return None


def nvjitlink_identity() -> str:
    """A string that changes whenever the nvJitLink that would link changes.

    From the wheel's metadata and the library file's stat (no library load).
    Without the wheel, the library is loaded to ask its version and path.
    """
    info = installed_nvjitlink()
    if info is not None:
        st = info.library.stat()
        return f"{info.package};{info.library};{st.st_size};{st.st_mtime_ns}"
    from cuda.pathfinder import load_nvidia_dynamic_lib

    loaded = load_nvidia_dynamic_lib("nvJitLink")
    major, minor = nvjitlink_version()
    return f"nvJitLink {major}.{minor};{loaded.abs_path}"


def nvjitlink_version() -> tuple[int, int]:
    """``nvjitlink.version()`` (loads libnvJitLink)."""
    from cuda.bindings import nvjitlink

    major, minor = nvjitlink.version()
    return int(major), int(minor)


def _fmt(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def version_problem(code_version: tuple[int, int], nvjitlink: tuple[int, int]) -> str | None:
    """Why nvJitLink ``nvjitlink`` cannot link LTO-IR ``code_version``; None if it can (or unknown).

    Rule: the LTO-IR must come from the same CUDA major as nvJitLink and from no
    newer minor. Code versions grow with releases, so from the known points of
    :data:`LTO_IR_RELEASES` a version is placed above or below a release. Only
    certain violations are reported; nvJitLink decides the rest (and its
    ``ERROR_OUTDATED_LIBRARY`` is reported as a version mismatch too).
    """
    ir = _fmt(code_version)
    for known, release in LTO_IR_RELEASES:
        if code_version == known and release > nvjitlink:
            return (
                f"LTO-IR code version {ir} comes from CUDA {_fmt(release)}, "
                f"newer than nvJitLink {_fmt(nvjitlink)}"
            )
    for known, release in LTO_IR_RELEASES:
        if code_version > known and release >= nvjitlink:
            return (
                f"LTO-IR code version {ir} comes from a CUDA release newer than {_fmt(release)} "
                f"(which writes {_fmt(known)}), too new for nvJitLink {_fmt(nvjitlink)}"
            )
    for known, release in LTO_IR_RELEASES:
        if code_version <= known and release[0] < nvjitlink[0]:
            return (
                f"LTO-IR code version {ir} comes from CUDA {release[0]} or older, "
                f"not from CUDA {nvjitlink[0]} like nvJitLink {_fmt(nvjitlink)}"
            )
    return None


def ir_release(code_version: tuple[int, int]) -> tuple[int, int] | None:
    """The CUDA release (major, minor) that writes LTO-IR ``code_version``, if known; an
    unknown version between two known points gives the older point's major with minor -1
    (a release of that major after it)."""
    best = None
    for known, release in LTO_IR_RELEASES:
        if code_version == known:
            return release
        if code_version > known:
            best = (release[0], -1)
    return best


def _extra(major: int) -> str:
    return f"pip install 'skbuild-cudaq[cu{major}]'"


def _nvjitlink_requirement(major: int, minor: int) -> str:
    name = "nvidia-nvjitlink-cu12" if major == 12 else "nvidia-nvjitlink"
    return f"'{name}>={major}.{minor},<{major + 1}'"


def _advice(
    source: str, nvjitlink: tuple[int, int], code_version: tuple[int, int] | None = None
) -> str:
    """How to align ``source``'s LTO-IR and nvJitLink (which extra, which compiler)."""
    info = installed_nvjitlink()
    have = info.package if info else f"nvJitLink {_fmt(nvjitlink)} (not from a wheel)"
    major = nvjitlink[0]
    release = ir_release(code_version) if code_version is not None else None
    if release is not None and release[0] != major:
        ir_major = release[0]
        nvrtc = "nvidia-cuda-nvrtc-cu12" if major == 12 else f"nvidia-cuda-nvrtc=={major}.*"
        return (
            f"the LTO-IR is CUDA {ir_major} code and nvJitLink is CUDA {major} (have {have}): "
            f"install the CUDA {ir_major} stack ({_extra(ir_major)}: cuda-bindings and nvJitLink "
            f"of CUDA {ir_major}), or rebuild {source} for CUDA {major} ([tool.cudaq] "
            f'compiler = "nvrtc" with {nvrtc} in build-system.requires, or an nvcc of CUDA {major})'
        )
    if release is not None and release[1] >= 0:
        need = _nvjitlink_requirement(*release)
    else:
        need = _nvjitlink_requirement(major, nvjitlink[1] + 1)
    version = _fmt(nvjitlink)
    compiler = (
        f"NVRTC: 'nvidia-cuda-nvrtc-cu12=={version}.*' and [tool.cudaq] compiler = \"nvrtc\""
        if major == 12
        else f"'nvidia-cuda-nvcc=={version}.*' or 'nvidia-cuda-nvrtc=={version}.*'"
    )
    return (
        f"align the two: install an nvJitLink as new as the compiler that built {source} "
        f"(have {have}; e.g. pip install -U {need}), or rebuild {source} with a compiler of "
        f"CUDA {major} no newer than {version} (the CUDA toolkit's nvcc, or {compiler})"
    )


def check_versions(
    groups: Sequence[tuple[str, Sequence[LinkInput]]], nvjitlink: tuple[int, int]
) -> None:
    """Check every LTO-IR entry against the version rule, up front.

    ``groups`` pairs a source description (e.g. the binary's path, or
    "skbuild-cudaq's device run time") with its inputs.
    """
    for source, inputs in groups:
        for item in inputs:
            for entry in item.container.entries:
                if entry.kind_code != _LTO_IR:
                    continue
                problem = version_problem(entry.code_version, nvjitlink)
                if problem:
                    msg = (
                        f"cannot link {item.name} ({entry.sm} LTO-IR) from {source}: "
                        f"{problem}; {_advice(source, nvjitlink, entry.code_version)}"
                    )
                    raise VersionMismatchError(msg)


def _log(nvjitlink: object, handle: int, error: bool) -> str:
    get_size = nvjitlink.get_error_log_size if error else nvjitlink.get_info_log_size  # type: ignore[attr-defined]
    get_log = nvjitlink.get_error_log if error else nvjitlink.get_info_log  # type: ignore[attr-defined]
    try:
        size = int(get_size(handle))
        if size <= 1:
            return ""
        buf = bytearray(size)
        get_log(handle, buf)
    except Exception:  # a log we cannot read must not hide the link error
        return ""
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


def link(inputs: Sequence[LinkInput], options: Sequence[str], sources: str = "") -> bytes:
    """Link ``inputs`` (each a ``FATBIN``) with ``options``: the cubin, or :class:`LinkError`."""
    from cuda.bindings import nvjitlink

    opts = list(options)
    handle = nvjitlink.create(len(opts), opts)
    stage = "nvJitLink"
    try:
        try:
            for item in inputs:
                stage = f"adding {item.name}"
                data = item.container.data
                nvjitlink.add_data(handle, nvjitlink.InputType.FATBIN, data, len(data), item.name)
            stage = "linking"
            nvjitlink.complete(handle)
            size = int(nvjitlink.get_linked_cubin_size(handle))
            cubin = bytearray(size)
            nvjitlink.get_linked_cubin(handle, cubin)
        except nvjitlink.nvJitLinkError as exc:
            status = getattr(exc, "status", None)
            try:
                result = nvjitlink.Result(status).name
            except ValueError:
                result = str(exc)
            log = _log(nvjitlink, handle, error=True)
            what = f"nvJitLink failed while {stage}"
            if sources:
                what += f" ({sources}; options {' '.join(opts)})"
            if result == "ERROR_OUTDATED_LIBRARY":
                major, minor = nvjitlink.version()
                what += f": the LTO-IR is newer than nvJitLink {major}.{minor}; " + _advice(
                    "the binary", (int(major), int(minor))
                )
                raise VersionMismatchError(what, log, result) from None
            raise LinkError(what, log, result) from None
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin)
