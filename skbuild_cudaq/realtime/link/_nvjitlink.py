"""nvJitLink: its identity without loading it, the version rule, and the link itself.

A warm start (cache hit) must not load libnvJitLink, so the cache key uses
:func:`nvjitlink_identity`: the library ``cuda.bindings`` loads, found the way
cuda-pathfinder finds it (one already mapped into the process, else the
wheels' directories under site-packages, else ``$CONDA_PREFIX``), described by
its path and stat without loading it. Only a cache miss loads it; it then
checks that the library it loaded is the one the key described (see
``link.PreparedLink.finish``).

A cache miss calls that very file's C functions through ctypes
(:class:`CLibrary`: nine functions, the ``__nvJitLink*_<major>_0`` entry points
the C header of each major names): importing ``cuda.bindings.nvjitlink`` costs
~60-90 ms, most of it ``cuda.pathfinder``, which the cold start's link worker
would otherwise wait for while the main thread imports the driver. Only where
the file cannot be found without the system loader does the link go through
``cuda.bindings`` (the same library, loaded by cuda-pathfinder).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skbuild_cudaq._cuda_majors import cuda_major, cuda_majors
from skbuild_cudaq.realtime.errors import LinkError, VersionMismatchError
from skbuild_cudaq.realtime.link.device_code import LinkInput

__all__ = [
    "LTO_IR_RELEASES",
    "RESULT_NAMES",
    "CLibrary",
    "NvJitLinkInfo",
    "c_library",
    "check_versions",
    "installed_nvjitlink",
    "ir_release",
    "known_defect",
    "link",
    "link_blobs",
    "mapped_nvjitlink",
    "nvjitlink_identity",
    "nvjitlink_major",
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

#: Per CUDA major, the first nvJitLink release known to link every dispatch module the
#: project's tests build. Older releases of that major crash (SIGSEGV inside their ptxas:
#: 13.0.39, 13.0.88) or stop with a ptxas internal compiler error (13.1.80) on some valid
#: modules, e.g. a cooperative-grid kernel with handlers and a bridge of one's own for sm_90.
FIXED_RELEASES: dict[int, tuple[int, ...]] = {
    m.major: m.nvjitlink_fixed for m in cuda_majors() if m.nvjitlink_fixed
}


@dataclass(frozen=True)
class NvJitLinkInfo:
    """A libnvJitLink file (resolved) and the wheel it comes from, if any."""

    library: Path
    distribution: str | None = None
    version: str | None = None

    @property
    def package(self) -> str:
        if self.distribution is None:
            return f"nvJitLink at {self.library}"
        return f"{self.distribution} {self.version}"

    def identity(self) -> str:
        """Its package, path, size, mtime and inode: any change of the file changes it."""
        try:
            st = self.library.stat()
        except OSError as exc:
            return f"{self.package};{self.library};unreadable {exc.errno}"
        return f"{self.package};{self.library};{st.st_size};{st.st_mtime_ns};{st.st_ino}"


#: cuda-pathfinder's search for nvJitLink on Linux (cuda.bindings loads it with
#: ``load_nvidia_dynamic_lib("nvJitLink")``): the sonames, the wheel directories
#: under each site-packages, and the directories under ``$CONDA_PREFIX``.
_SONAMES = tuple(m.nvjitlink_soname for m in cuda_majors())
_WHEEL_LIB_DIRS = tuple(d for m in cuda_majors() for d in m.nvjitlink_dirs)
_CONDA_LIB_DIRS = ("lib64", "lib")


def _site_packages() -> list[str]:
    """The site-packages directories in cuda-pathfinder's order.

    As its ``find_sub_dirs_all_sitepackages``: ``site.getsitepackages()``, with
    the user site inserted second in a virtual environment and first otherwise.
    """
    import site  # already imported by the interpreter's start-up

    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        user = site.getusersitepackages()
        if user:
            dirs.insert(1 if sys.prefix != sys.base_prefix else 0, user)
    return dirs


def _nvjitlink_wheels(site: Path) -> list[tuple[str, str]]:
    """``(distribution, version)`` of every nvidia-nvjitlink wheel installed in ``site``."""
    found = []
    for info in sorted(site.glob("nvidia_nvjitlink*.dist-info")):
        dist, _, version = info.name[: -len(".dist-info")].partition("-")
        found.append((dist.replace("_", "-"), version))
    return found


@functools.cache
def _wheel_of(library: Path) -> NvJitLinkInfo:
    """``library`` (resolved) with the nvidia-nvjitlink wheel that installed it, if any: of
    the wheels in its site-packages, the one of the library's CUDA major (both majors' wheels
    may be installed side by side)."""
    major = _major(library.name.partition(".so.")[2])
    for sub in _WHEEL_LIB_DIRS:
        if library.parent.as_posix().endswith("/" + sub):
            wheels = _nvjitlink_wheels(library.parents[len(Path(sub).parts)])
            same = [w for w in wheels if major and _major(w[1]) == major]
            for dist, version in same or wheels:
                return NvJitLinkInfo(library, dist, version)
    return NvJitLinkInfo(library)


def _other_major_wheels(major: int) -> list[str]:
    """``"<distribution> <version>"`` of the nvJitLink wheels of CUDA ``major`` installed in
    the site-packages the search reads (beside one of another major, found first)."""
    return [
        f"{dist} {version}"
        for site in _site_packages()
        for dist, version in _nvjitlink_wheels(Path(site))
        if _major(version) == major
    ]


@functools.cache
def _found_nvjitlink() -> Path | None:
    """The file cuda-pathfinder would load when nothing has loaded nvJitLink yet.

    Its first two steps, without loading anything: the wheel directories under
    every site-packages (for each directory in order, every site-packages in
    order, every soname in order), then ``$CONDA_PREFIX/lib64`` and ``lib``.
    None: pathfinder would ask the system loader (``LD_LIBRARY_PATH``, ldconfig).
    """
    sites = _site_packages()
    for sub in _WHEEL_LIB_DIRS:
        for site in sites:
            for soname in _SONAMES:
                candidate = Path(site, sub, soname)
                if candidate.is_file():
                    return candidate.resolve()
    conda = os.environ.get("CONDA_PREFIX")
    if conda:
        for sub in _CONDA_LIB_DIRS:
            for soname in _SONAMES:
                candidate = Path(conda, sub, soname)
                if candidate.is_file():
                    return candidate.resolve()
    return None


def mapped_nvjitlink() -> list[Path]:
    """The libnvJitLink files mapped into this process (``/proc/self/maps``), sorted.

    cuda-pathfinder returns an already loaded nvJitLink before any other, so once
    one is mapped it is the one ``cuda.bindings`` uses (or used).
    """
    try:
        data = Path("/proc/self/maps").read_bytes()
    except OSError:
        return []
    if b"libnvJitLink" not in data:
        return []
    found = set()
    for line in data.split(b"\n"):
        start = line.find(b"/")
        if start >= 0 and b"/libnvJitLink.so" in line:
            found.add(Path(os.fsdecode(line[start:])))
    return sorted(found)


def installed_nvjitlink() -> NvJitLinkInfo | None:
    """The nvJitLink ``cuda.bindings`` uses (loaded) or would load (found without loading it).

    None when only the system loader can find it.
    """
    mapped = mapped_nvjitlink()
    if mapped:
        return _wheel_of(mapped[0])
    found = _found_nvjitlink()
    return None if found is None else _wheel_of(found)


def nvjitlink_major() -> int | None:
    """The CUDA major of the nvJitLink the run time links with (None if unknown).

    Read from its wheel's version or the library's name (``libnvJitLink.so.12[.9.86]``)
    without loading it; only when neither says is the library loaded to ask it.
    """
    info = installed_nvjitlink()
    if info is not None:
        for text in (info.version or "", info.library.name.partition(".so.")[2]):
            release = _release(text)
            if release is not None:
                return release[0]
    try:
        return nvjitlink_version()[0]
    except Exception:  # no cuda-bindings / nvJitLink: the link reports that itself
        return None


def nvjitlink_identity() -> str:
    """A string that changes whenever the nvJitLink that links in this process changes.

    That library is resolved the way cuda-pathfinder resolves it for
    ``cuda.bindings``: one already mapped into the process first, else the first
    found in the wheel directories of site-packages or under ``$CONDA_PREFIX``;
    it is described by its stat, without loading it (a warm start never loads
    libnvJitLink). Only when neither finds it is it loaded through
    cuda-pathfinder (the system loader's search cannot be repeated without it).
    """
    libraries = mapped_nvjitlink()
    if not libraries:
        found = _found_nvjitlink()
        if found is None:
            from cuda.pathfinder import load_nvidia_dynamic_lib

            found = Path(load_nvidia_dynamic_lib("nvJitLink").abs_path).resolve()
        libraries = [found]
    return "|".join(_wheel_of(lib).identity() for lib in libraries)


#: nvJitLink's result codes (``nvJitLinkResult`` in nvJitLink.h; ``cuda.bindings`` names them
#: the same, which the tests check).
RESULT_NAMES = (
    "SUCCESS",
    "ERROR_UNRECOGNIZED_OPTION",
    "ERROR_MISSING_ARCH",
    "ERROR_INVALID_INPUT",
    "ERROR_PTX_COMPILE",
    "ERROR_NVVM_COMPILE",
    "ERROR_INTERNAL",
    "ERROR_THREADPOOL",
    "ERROR_UNRECOGNIZED_INPUT",
    "ERROR_FINALIZE",
    "ERROR_NULL_INPUT",
    "ERROR_INCOMPATIBLE_OPTIONS",
    "ERROR_INCORRECT_INPUT_TYPE",
    "ERROR_ARCH_MISMATCH",
    "ERROR_OUTDATED_LIBRARY",
    "ERROR_MISSING_FATBIN",
    "ERROR_UNRECOGNIZED_ARCH",
    "ERROR_UNSUPPORTED_ARCH",
    "ERROR_LTO_NOT_ENABLED",
)
INPUT_FATBIN = 4  #: NVJITLINK_INPUT_FATBIN
INPUT_LIBRARY = 6  #: NVJITLINK_INPUT_LIBRARY (a static library: the device runtime)


def result_name(status: int) -> str:
    return RESULT_NAMES[status] if 0 <= status < len(RESULT_NAMES) else f"status {status}"


class _CallError(Exception):
    """A failed nvJitLink call: its status, and (from :meth:`CLibrary.link`) what the link
    was doing and the handle's error log."""

    def __init__(self, status: int) -> None:
        super().__init__(result_name(status))
        self.status = status
        self.stage = "nvJitLink"
        self.log = ""


class CLibrary:
    """One libnvJitLink file, its C functions called through ctypes.

    The entry points are the versioned ones the C header of the library's major
    maps each name to (``__nvJitLinkCreate_13_0`` for ``nvJitLinkCreate`` in
    CUDA 13), else the plain names; ``nvJitLinkVersion`` is not versioned.
    """

    _FUNCTIONS = (  # name, argument types (c_void_p: the handle; the pointer: its address)
        ("Create", ("handle_p", "u32", "char_pp")),
        ("Destroy", ("handle_p",)),
        ("AddData", ("handle", "int", "void_p", "size", "char_p")),
        ("Complete", ("handle",)),
        ("GetLinkedCubinSize", ("handle", "size_p")),
        ("GetLinkedCubin", ("handle", "void_p")),
        ("GetErrorLogSize", ("handle", "size_p")),
        ("GetErrorLog", ("handle", "void_p")),
    )

    def __init__(self, path: Path) -> None:
        import ctypes

        self.path = path
        self._lib = lib = ctypes.CDLL(str(path))
        version = lib.nvJitLinkVersion
        version.restype = ctypes.c_int
        version.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]
        major, minor = ctypes.c_uint(), ctypes.c_uint()
        status = version(ctypes.byref(major), ctypes.byref(minor))
        if status != 0:
            msg = f"nvJitLinkVersion of {path} failed: {result_name(status)}"
            raise LinkError(msg)
        self.version = (int(major.value), int(minor.value))
        kinds = {
            "handle": ctypes.c_void_p,
            "handle_p": ctypes.POINTER(ctypes.c_void_p),
            "u32": ctypes.c_uint32,
            "int": ctypes.c_int,
            "void_p": ctypes.c_void_p,
            "size": ctypes.c_size_t,
            "size_p": ctypes.POINTER(ctypes.c_size_t),
            "char_p": ctypes.c_char_p,
            "char_pp": ctypes.POINTER(ctypes.c_char_p),
        }
        self._fn: dict[str, Any] = {}
        for name, args in self._FUNCTIONS:
            for symbol in (f"__nvJitLink{name}_{self.version[0]}_0", f"nvJitLink{name}"):
                try:
                    fn = getattr(lib, symbol)
                except AttributeError:
                    continue
                fn.restype = ctypes.c_int
                fn.argtypes = [kinds[a] for a in args]
                self._fn[name] = fn
                break
            else:
                msg = f"{path} exports no nvJitLink{name}: not an nvJitLink library"
                raise LinkError(msg)

    def _call(self, name: str, *args: Any) -> None:
        status = self._fn[name](*args)
        if status != 0:
            raise _CallError(int(status))

    def link(
        self,
        inputs: Sequence[tuple[str, bytes]],
        options: Sequence[str],
        libraries: Sequence[tuple[str, bytes]] = (),
    ) -> bytes:
        """The cubin, or :class:`_CallError` with the stage and the handle's error log.

        ``inputs`` are fatbin containers, ``libraries`` static libraries (``LIBRARY``).
        """
        import ctypes

        handle = ctypes.c_void_p()
        opts = (ctypes.c_char_p * max(1, len(options)))(*(o.encode() for o in options))
        stage = "creating the linker"
        typed = [(n, d, INPUT_FATBIN) for n, d in inputs]
        typed += [(n, d, INPUT_LIBRARY) for n, d in libraries]
        try:
            self._call("Create", ctypes.byref(handle), len(options), opts)
            for name, data, kind in typed:
                stage = f"adding {name}"
                self._call("AddData", handle, kind, data, len(data), name.encode())
            stage = "linking"
            self._call("Complete", handle)
            size = ctypes.c_size_t()
            self._call("GetLinkedCubinSize", handle, ctypes.byref(size))
            cubin = ctypes.create_string_buffer(size.value)
            self._call("GetLinkedCubin", handle, cubin)
            return cubin.raw[: size.value]
        except _CallError as exc:  # a failed create may still leave a handle with its log
            exc.stage = stage
            exc.log = self._error_log(handle) if handle.value else ""
            raise
        finally:
            if handle.value:
                self._fn["Destroy"](ctypes.byref(handle))

    def _error_log(self, handle: Any) -> str:
        import ctypes

        size = ctypes.c_size_t()
        if self._fn["GetErrorLogSize"](handle, ctypes.byref(size)) != 0 or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        if self._fn["GetErrorLog"](handle, buf) != 0:
            return ""
        return buf.raw.rstrip(b"\0").decode(errors="replace")


@functools.lru_cache(maxsize=1)
def c_library() -> CLibrary | None:
    """The libnvJitLink :func:`nvjitlink_identity` describes, loaded through ctypes; None
    where only the system loader (through cuda-pathfinder) can find it."""
    mapped = mapped_nvjitlink()
    path = mapped[0] if mapped else _found_nvjitlink()
    return None if path is None else CLibrary(path)


def nvjitlink_version() -> tuple[int, int]:
    """nvJitLink's version (loads libnvJitLink)."""
    lib = c_library()
    if lib is not None:
        return lib.version
    from cuda.bindings import nvjitlink

    try:
        major, minor = nvjitlink.version()
    except (RuntimeError, OSError) as exc:  # cuda-pathfinder found no libnvJitLink to load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        msg = f"libnvJitLink cannot be loaded: {first}"
        raise ImportError(msg) from None
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


def _release(text: str) -> tuple[int, ...] | None:
    """``"13.0.88"`` -> ``(13, 0, 88)`` (leading numeric fields only); None if none."""
    fields: list[int] = []
    for field in text.split("."):
        if not field.isdigit():
            break
        fields.append(int(field))
    return tuple(fields) or None


def _major(text: str | None) -> int:
    """The major release of a version string (``"13.0.88"`` -> 13); 0 if it has none."""
    return (_release(text or "") or (0,))[0]


def known_defect(nvjitlink: tuple[int, int]) -> str | None:
    """Why the nvJitLink in use (version ``nvjitlink``) may crash on valid input; None if
    it is not a release known to (:data:`FIXED_RELEASES`).

    The wheel's version decides (``13.1.80`` vs ``13.1.115``); without a wheel, the
    library's own major.minor, which flags only minors wholly before the fix.
    """
    fixed = FIXED_RELEASES.get(nvjitlink[0])
    if fixed is None or nvjitlink > fixed[:2]:
        return None  # a later minor: no file read (this runs before every in-process link)
    info = installed_nvjitlink()
    wheel = _release(info.version) if info is not None and info.version else None
    if info is not None and wheel is not None and wheel[:2] == nvjitlink:
        have, package = wheel, info.package
    else:  # no wheel, or a stale one beside another library: the library's major.minor
        have, package = nvjitlink, f"nvJitLink {_fmt(nvjitlink)}"
    if have >= fixed[: len(have)]:
        return None
    release = ".".join(map(str, fixed))
    return (
        f"{package} is known to crash (SIGSEGV in its ptxas) or to stop with a ptxas internal "
        f"compiler error on some valid dispatch modules; nvJitLink {release} and later link "
        f"them: pip install -U '{_wheel(fixed[0], 'nvjitlink')}>={release},<{fixed[0] + 1}'"
    )


@functools.cache
def warn_known_defect(nvjitlink: tuple[int, int]) -> None:
    """Log :func:`known_defect` once a process, before an in-process link that might crash."""
    defect = known_defect(nvjitlink)
    if defect is not None:
        from skbuild_cudaq.realtime._logging import get_logger

        get_logger(__name__).warning("%s (a crash would end this process)", defect)


def _extra(major: int) -> str:
    return f"pip install 'skbuild-cudaq[cu{major}]'"


def _wheel(major: int, kind: str) -> str:
    """The name of CUDA ``major``'s ``kind`` wheel (``nvrtc``, ``nvjitlink``, ``nvcc``), from
    ``cuda-majors.txt``; for a major it does not list, words that say what to find."""
    facts = cuda_major(major)
    if facts is None:
        return f"the {kind} wheel of CUDA {major}"
    names = {"nvrtc": facts.nvrtc_wheel, "nvjitlink": facts.nvjitlink_wheel}
    return names.get(kind) or facts.nvcc_wheels[0]


def _nvjitlink_requirement(major: int, minor: int) -> str:
    return f"'{_wheel(major, 'nvjitlink')}>={major}.{minor},<{major + 1}'"


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
        beside = _other_major_wheels(ir_major)
        if (
            beside
            and info is not None
            and info.distribution is not None
            and _major(info.version) == major  # the wheel found first is the one in use
        ):
            return (
                f"the LTO-IR is CUDA {ir_major} code and nvJitLink is CUDA {major} (have "
                f"{have}); {beside[0]} is installed too, but the nvJitLink search "
                f"(cuda-pathfinder's order) finds {have} first: keep one CUDA major's run time "
                f"in an environment (pip uninstall {info.distribution}, or a fresh environment "
                f"with {_extra(ir_major)})"
            )
        nvrtc = _wheel(major, "nvrtc") if major == 12 else f"{_wheel(major, 'nvrtc')}=={major}.*"
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
        f"NVRTC: '{_wheel(major, 'nvrtc')}=={version}.*' and [tool.cudaq] compiler = \"nvrtc\""
        if major == 12  # CUDA 12's nvcc wheel carries no nvcc
        else f"'{_wheel(major, 'nvcc')}=={version}.*' or '{_wheel(major, 'nvrtc')}=={version}.*'"
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


def link(
    inputs: Sequence[LinkInput],
    options: Sequence[str],
    sources: str = "",
    libraries: Sequence[tuple[str, bytes]] = (),
) -> bytes:
    """Link ``inputs`` (each a ``FATBIN``) and ``libraries`` (``(name, bytes)`` of static
    libraries, each a ``LIBRARY``) with ``options``: the cubin, or :class:`LinkError`."""
    return link_blobs([(i.name, i.container.data) for i in inputs], options, sources, libraries)


def link_blobs(
    inputs: Sequence[tuple[str, bytes]],
    options: Sequence[str],
    sources: str = "",
    libraries: Sequence[tuple[str, bytes]] = (),
) -> bytes:
    """:func:`link` of ``(name, fatbin container bytes)`` pairs (what a child process gets)."""
    lib = c_library()
    if lib is None:
        return _link_with_bindings(inputs, options, sources, libraries)
    opts = list(options)
    try:
        return lib.link(inputs, opts, libraries)
    except _CallError as exc:
        raise _link_error(exc.stage, sources, opts, exc.status, exc.log) from None


def _link_error(stage: str, sources: str, opts: list[str], status: int, log: str) -> LinkError:
    result = result_name(status)
    what = f"nvJitLink failed while {stage}"
    if sources:
        what += f" ({sources}; options {' '.join(opts)})"
    if result == "ERROR_OUTDATED_LIBRARY":
        version = nvjitlink_version()
        what += f": the LTO-IR is newer than nvJitLink {_fmt(version)}; " + _advice(
            "the binary", version
        )
        return VersionMismatchError(what, log, result)
    if result == "ERROR_PTX_COMPILE" and "Internal compiler error" in log:
        version = nvjitlink_version()
        what += (
            f": ptxas inside nvJitLink {_fmt(version)} failed on this input (a defect of "
            "nvJitLink, not of the code); "
            + (known_defect(version) or "a newer nvJitLink may link it")
        )
    return LinkError(what, log, result)


def _link_with_bindings(
    inputs: Sequence[tuple[str, bytes]],
    options: Sequence[str],
    sources: str = "",
    libraries: Sequence[tuple[str, bytes]] = (),
) -> bytes:
    """:func:`link_blobs` through ``cuda.bindings.nvjitlink`` (where the library could only
    be found by cuda-pathfinder)."""
    from cuda.bindings import nvjitlink

    opts = list(options)
    handle = nvjitlink.create(len(opts), opts)
    stage = "nvJitLink"
    try:
        try:
            for name, data in inputs:
                stage = f"adding {name}"
                nvjitlink.add_data(handle, nvjitlink.InputType.FATBIN, data, len(data), name)
            for name, data in libraries:
                stage = f"adding {name}"
                nvjitlink.add_data(handle, nvjitlink.InputType.LIBRARY, data, len(data), name)
            stage = "linking"
            nvjitlink.complete(handle)
            size = int(nvjitlink.get_linked_cubin_size(handle))
            cubin = bytearray(size)
            nvjitlink.get_linked_cubin(handle, cubin)
        except nvjitlink.nvJitLinkError as exc:
            status = getattr(exc, "status", None)
            log = _log(nvjitlink, handle, error=True)
            code = int(status) if isinstance(status, int) else -1
            raise _link_error(stage, sources, opts, code, log) from None
    finally:
        nvjitlink.destroy(handle)
    return bytes(cubin)
