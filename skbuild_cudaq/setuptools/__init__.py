"""Setuptools front door: ``[tool.cudaq.dispatch-kernels]`` for setuptools projects.

(Over 400 lines: one setuptools command and the ``build_ext`` wrapper that drives it.)

Two entry points of skbuild-cudaq plug this module into setuptools; a project
only declares its ``Extension`` in ``setup.py`` and the table in
``pyproject.toml`` (keys are full extension names, ``"pkg._core"``):

``setuptools.finalize_distribution_options`` -> :func:`finalize_distribution_options`
    Runs for *every* setuptools build in an environment where skbuild-cudaq is
    installed. It does nothing unless ``pyproject.toml`` has a ``[tool.cudaq]``
    table; then it wraps the project's ``build_ext`` (setuptools' own, or the
    one in ``setup(cmdclass=...)``) with :class:`CudaqBuildExtMixin`.

``distutils.commands`` -> :class:`build_cudaq_kernels`
    The nvcc half, also runnable on its own (``setup.py build_cudaq_kernels``):
    every dispatch kernel compiled on its own to an LTO-IR fatbin with the
    extension's include directories, macros and C++ standard; every ``.cu``
    source of an extension compiled with ``-c -rdc=true`` (its handlers' LTO-IR
    lands in ``__nv_relfatbin``); the generated embed C source. Incremental
    (depfiles + recorded command lines).

The wrapped ``build_ext`` runs ``build_cudaq_kernels`` first, then builds each
extension without its ``.cu`` sources, linking the handler objects, the compiled
embed source and the static CUDA runtime instead. Library code raises typed
errors; this module is the front door that prints them and exits.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from setuptools import Command

from skbuild_cudaq import _log
from skbuild_cudaq.build import _device_info, _embed, _handler_switch
from skbuild_cudaq.build._architectures import DEFAULT_ARCHITECTURES
from skbuild_cudaq.errors import CudaqError, KernelCompileError, SettingsError, SettingsProblem

__all__ = [
    "CudaqBuildExtMixin",
    "ExtensionPlan",
    "build_cudaq_kernels",
    "check_extension_names",
    "finalize_distribution_options",
    "project_uses_cudaq",
]

_TABLE = "tool.cudaq.dispatch-kernels"
_CUDA_SUFFIXES = (".cu",)
#: kind -> (build subdirectory, output suffix, log label, nvcc command builder)
_SOURCE_KINDS: dict[str, tuple[str, str, str, Callable[..., list[str]]]] = {
    "kernel": ("kernels", ".fatbin", "nvcc (LTO-IR dispatch kernel)", _embed.fatbin_command),
    "handler": ("objects", ".o", "nvcc (-rdc, LTO-IR)", _embed.rdc_object_command),
}


# ---------------------------------------------------------------------------
# The finalize_distribution_options hook (runs for every setuptools build)
# ---------------------------------------------------------------------------
def project_uses_cudaq(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a ``[tool.cudaq]`` table. Never raises.

    Cheap on purpose: most projects are rejected by a byte search before any
    TOML parsing. A malformed file is "not ours": setuptools reports it itself.
    """
    try:
        data = pyproject.read_bytes()
    except OSError:
        return False
    if b"cudaq" not in data:
        return False
    from skbuild_cudaq.settings import read_pyproject

    try:
        table = read_pyproject(pyproject)
    except CudaqError:
        return False
    tool = table.get("tool")
    return isinstance(tool, dict) and isinstance(tool.get("cudaq"), dict)


def finalize_distribution_options(dist: Any) -> None:
    """Wrap ``build_ext`` of projects that declare ``[tool.cudaq]``; leave others untouched.

    Setuptools calls this while constructing the distribution, before it reads
    ``pyproject.toml``: a ``build_ext`` given in ``setup(cmdclass=...)`` is
    wrapped; one given in ``[tool.setuptools.cmdclass]`` would replace the
    wrapper (give it in ``setup.py`` instead).
    """
    if not project_uses_cudaq(Path.cwd() / "pyproject.toml"):
        return
    cmdclass = dist.cmdclass
    base = cmdclass.get("build_ext")
    if base is None:
        from setuptools.command.build_ext import build_ext

        base = build_ext
    if not getattr(base, "_skbuild_cudaq_wrapped", False):
        cmdclass["build_ext"] = _wrap_build_ext(base)
    cmdclass.setdefault("build_cudaq_kernels", build_cudaq_kernels)


# Run after hooks that might set build_ext themselves (setuptools sorts by ``order``).
finalize_distribution_options.order = 100  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# Front-door error handling
# ---------------------------------------------------------------------------
def _fail(exc: CudaqError) -> NoReturn:
    _log.error(str(exc))
    raise SystemExit(1) from None


@contextmanager
def _front_door() -> Iterator[None]:
    _log.show_library_log()
    try:
        yield
    except CudaqError as exc:
        _fail(exc)


# ---------------------------------------------------------------------------
# Validation shared with the scikit-build-core path
# ---------------------------------------------------------------------------
def check_extension_names(table_keys: Sequence[str], extension_names: Sequence[str]) -> None:
    """Every key of ``[tool.cudaq.dispatch-kernels]`` must name an extension of the project."""
    problems: list[SettingsProblem] = []
    known = sorted(extension_names)
    for key in table_keys:
        if key in extension_names:
            continue
        listed = ", ".join(repr(n) for n in known) if known else "none"
        message = f"no extension named {key!r} in this project (extensions: {listed})"
        suffix = [n for n in known if n.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]]
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        guess = close[0] if close else (suffix[0] if len(suffix) == 1 else None)
        if guess is not None:
            fix = f"did you mean {guess!r}?"
        else:
            fix = "use the full name of an Extension passed to setup(), e.g. 'pkg._core'"
        problems.append(SettingsProblem(key=f"{_TABLE}.{key}", message=message, fix=fix))
    if problems:
        raise SettingsError(problems)


# ---------------------------------------------------------------------------
# The nvcc half: build_cudaq_kernels
# ---------------------------------------------------------------------------
@dataclass
class ExtensionPlan:
    """What ``build_cudaq_kernels`` made for one extension and ``build_ext`` links into it."""

    name: str
    directory: Path  #: build_temp/cudaq/<extension name>
    fatbins: list[Path] = field(default_factory=list)  #: one per dispatch kernel
    handler_objects: list[Path] = field(default_factory=list)  #: nvcc -c -rdc of .cu sources
    records: list[Path] = field(default_factory=list)  #: build records (JSON), embedded too
    embed_source: Path | None = None  #: the generated C file
    link_cudart: Path | None = None  #: libcudart_static.a when handler objects need it

    @property
    def embed_object(self) -> Path | None:
        if self.embed_source is None:
            return None
        return self.embed_source.with_suffix(".o")

    def depends(self) -> list[Path]:
        """Files whose change must relink the extension."""
        deps = [*self.handler_objects]
        if self.embed_object is not None:
            deps.append(self.embed_object)
        return deps


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]


def _is_cuda_source(path: str) -> bool:
    return path.endswith(_CUDA_SUFFIXES)


class build_cudaq_kernels(Command):  # type: ignore[misc]  # setuptools is untyped here
    """Compile [tool.cudaq] dispatch kernels (LTO-IR fatbins) and .cu sources with nvcc."""

    description = (
        "compile [tool.cudaq.dispatch-kernels] to LTO-IR fatbins and the extensions' "
        ".cu sources with nvcc (-rdc=true)"
    )
    user_options = [  # noqa: RUF012 - distutils API
        ("build-temp=", "t", "directory for temporary build files (default: build_ext's)"),
        ("force", "f", "recompile everything, even what is up to date"),
    ]
    boolean_options = ["force"]  # noqa: RUF012 - distutils API

    def initialize_options(self) -> None:
        self.build_temp: str | None = None
        self.force: bool | None = None
        self.plans: dict[str, ExtensionPlan] = {}
        self._settings: Any = None
        self._compilers: dict[Path, str] = {}

    def finalize_options(self) -> None:
        self.set_undefined_options("build_ext", ("build_temp", "build_temp"), ("force", "force"))

    # -- settings ---------------------------------------------------------
    @property
    def project_dir(self) -> Path:
        return Path.cwd()

    def settings(self) -> Any:
        """The validated ``[tool.cudaq]`` of the project (``load_settings``: the shared core)."""
        if self._settings is None:
            from skbuild_cudaq.settings import load_settings

            self._settings = load_settings(self.project_dir / "pyproject.toml")
        return self._settings

    def _extensions(self) -> list[Any]:
        return list(self.distribution.ext_modules or [])

    def kernel_sources(self) -> list[str]:
        """Every dispatch kernel source, project-relative (for sdists)."""
        with _front_door():
            settings = self.settings()
        return [s for entry in settings.dispatch_kernels.values() for s in entry.sources]

    # -- Command API --------------------------------------------------------
    def get_source_files(self) -> list[str]:
        return self.kernel_sources()

    def get_outputs(self) -> list[str]:
        # Intermediate files only: what ships is the extension build_ext writes.
        return []

    def run(self) -> None:
        with _front_door():
            self.plans = self.build_plans()

    # -- the work -------------------------------------------------------------
    def build_plans(self) -> dict[str, ExtensionPlan]:
        """Validate, compile what is out of date, write the embed sources: a plan per extension."""
        settings = self.settings()
        extensions = self._extensions()
        kernels = settings.dispatch_kernels
        check_extension_names(list(kernels), [ext.name for ext in extensions])
        wanted = [
            ext
            for ext in extensions
            if ext.name in kernels or any(_is_cuda_source(s) for s in ext.sources)
        ]
        if not wanted:
            return {}
        from skbuild_cudaq.build._toolchain import find_nvcc

        nvcc = find_nvcc()
        build_ext = self.get_finalized_command("build_ext")
        assert self.build_temp is not None
        root = Path(self.build_temp).resolve() / "cudaq"
        plans: dict[str, ExtensionPlan] = {}
        for ext in wanted:
            entry = kernels.get(ext.name)
            architectures = (
                tuple(entry.architectures) if entry is not None else DEFAULT_ARCHITECTURES
            )
            flags = extension_flags(ext, build_ext)
            plan = ExtensionPlan(name=ext.name, directory=root / ext.name)
            if entry is not None:
                for source in entry.sources:
                    fatbin = self._compile_source(
                        "kernel",
                        nvcc,
                        ext.name,
                        source,
                        architectures=architectures,
                        flags=flags,
                        plan=plan,
                    )
                    plan.fatbins.append(fatbin)
                    plan.records.append(
                        self._kernel_record(
                            nvcc, ext.name, source, fatbin, architectures=architectures, flags=flags
                        )
                    )
            for source in ext.sources:
                if _is_cuda_source(source):
                    obj = self._compile_source(
                        "handler",
                        nvcc,
                        ext.name,
                        source,
                        architectures=architectures,
                        flags=flags,
                        plan=plan,
                    )
                    plan.handler_objects.append(obj)
                    record = _device_info.object_record(
                        obj,
                        (self.project_dir / source).resolve(),
                        project_dir=self.project_dir,
                        compiler=self._compiler(nvcc),
                        architectures=architectures,
                    )
                    if record is not None:
                        json_path = obj.with_name(obj.name + ".json")
                        _device_info.write_record(json_path, record)
                        plan.records.append(json_path)
            self._handler_switch(
                nvcc, ext, entry, architectures=architectures, flags=flags, plan=plan
            )
            module_ids = _embed.linked_binary_module_ids(plan.handler_objects)
            if plan.fatbins or module_ids:
                plan.embed_source = plan.directory / "cudaq_embed.c"
                _embed.write_if_changed(
                    plan.embed_source,
                    _embed.embed_c_source(plan.fatbins, module_ids, plan.records),
                )
            if module_ids and not _links_cudart(ext):
                plan.link_cudart = _embed.cudart_static_library(nvcc)
            plans[ext.name] = plan
        return plans

    def _handler_switch(
        self,
        nvcc: Path,
        ext: Any,
        entry: Any,
        *,
        architectures: tuple[str, ...],
        flags: _embed.CompileFlags,
        plan: ExtensionPlan,
    ) -> None:
        """The extension's handler switch (as the CMake package makes it): a fatbin of its own
        over the exports of its kernels and .cu sources, for the lowest architecture."""
        sources = [*(entry.sources if entry is not None else ()), *ext.sources]
        paths = [(self.project_dir / s).resolve() for s in sources if _is_cuda_source(s)]
        switch = plan.directory / _handler_switch.SWITCH_FILE
        if not _handler_switch.write_switch(switch, ext.name, paths, self.project_dir):
            return  # nothing to call directly: the run time's default form does the same
        lowest = (min(architectures, key=int),)
        fatbin = self._compile_source(
            "kernel", nvcc, ext.name, str(switch), architectures=lowest, flags=flags, plan=plan
        )
        plan.fatbins.append(fatbin)
        plan.records.append(
            self._kernel_record(
                nvcc, ext.name, str(switch), fatbin, architectures=lowest, flags=flags
            )
        )

    def _compile(
        self,
        what: str,
        output: Path,
        make: Callable[[Path], list[str]],
        source: Path,
    ) -> Path:
        depfile = output.with_name(output.name + ".d")
        command = make(depfile)
        if self.force or _embed.is_stale(output, command, depfile, [source]):
            _log.info(what)
            _embed.run_compile(command, output, what, cwd=source.parent)
        else:
            _log.progress(f"{what}: up to date")
        return output

    def _compiler(self, nvcc: Path) -> str:
        """What the build records name as the compiler: ``nvcc 13.0.88``."""
        if nvcc not in self._compilers:
            self._compilers[nvcc] = _device_info.nvcc_compiler(nvcc)
        return self._compilers[nvcc]

    def _kernel_record(
        self,
        nvcc: Path,
        ext_name: str,
        source: str,
        fatbin: Path,
        *,
        architectures: tuple[str, ...],
        flags: _embed.CompileFlags,
    ) -> Path:
        """The build record of a side-compiled kernel: names from its PTX (compiled if stale)."""
        from skbuild_cudaq.fatbin import read_fatbin_file

        path = (self.project_dir / source).resolve()
        ptx = fatbin.with_suffix(".ptx")
        self._compile(
            f"nvcc (PTX: names) {source} -> {ext_name}",
            ptx,
            lambda dep: _embed.ptx_command(
                nvcc, path, ptx, architecture=architectures[0], flags=flags, depfile=dep
            ),
            path,
        )
        kernels, handlers = _device_info.names_from_ptx(ptx.read_text(encoding="utf-8"))
        record = _device_info.make_record(
            source=path,
            project_dir=self.project_dir,
            compiled="side",
            compiler=self._compiler(nvcc),
            architectures=architectures,
            kernels=kernels,
            handlers=handlers,
            containers=[c.data for c in read_fatbin_file(fatbin)],
        )
        json_path = fatbin.with_name(fatbin.name + ".json")
        _device_info.write_record(json_path, record)
        return json_path

    def _compile_source(
        self,
        kind: str,
        nvcc: Path,
        ext_name: str,
        source: str,
        *,
        architectures: tuple[str, ...],
        flags: _embed.CompileFlags,
        plan: ExtensionPlan,
    ) -> Path:
        """Compile a kernel (``kind="kernel"``: LTO-IR fatbin) or a handler source
        (``kind="handler"``: ``-rdc`` object) of ``ext_name`` unless up to date."""
        subdir, suffix, label, command = _SOURCE_KINDS[kind]
        path = (self.project_dir / source).resolve()
        output = plan.directory / subdir / f"{path.stem}-{_short_hash(source)}{suffix}"
        return self._compile(
            f"{label} {source} -> {ext_name}",
            output,
            lambda dep: command(
                nvcc, path, output, architectures=architectures, flags=flags, depfile=dep
            ),
            path,
        )


def _links_cudart(ext: Any) -> bool:
    return any(lib in {"cudart", "cudart_static"} for lib in ext.libraries or [])


def extension_flags(ext: Any, build_ext: Any = None) -> _embed.CompileFlags:
    """nvcc flags of an extension, in the order distutils gives them to the host compiler.

    Macros: ``build_ext --define/--undef``, the extension's ``define_macros``,
    its ``undef_macros``, then ``-D``/``-U`` in ``extra_compile_args``. Include
    directories: the extension's, ``-I`` in its arguments, then build_ext's
    (Python's headers among them). C++ standard: ``-std=`` in
    ``extra_compile_args``, else c++17.
    """
    Macro = _embed.Macro
    args = [str(a) for a in (ext.extra_compile_args or [])]
    arg_macros, arg_includes = _embed.preprocessor_from_args(args)
    macros: list[_embed.Macro] = []
    if build_ext is not None:
        macros += [Macro(str(n), None if v is None else str(v)) for n, v in build_ext.define or []]
        macros += [Macro(str(n), undefine=True) for n in build_ext.undef or []]
    macros += [Macro(str(n), None if v is None else str(v)) for n, v in ext.define_macros or []]
    macros += [Macro(str(n), undefine=True) for n in ext.undef_macros or []]
    macros += arg_macros
    includes = [str(Path(d).resolve()) for d in [*(ext.include_dirs or []), *arg_includes]]
    if build_ext is not None:
        includes += [str(Path(d).resolve()) for d in build_ext.include_dirs or []]
    return _embed.CompileFlags(
        include_dirs=tuple(dict.fromkeys(includes)),
        macros=tuple(macros),
        std=_embed.std_from_args(args),
    )


# ---------------------------------------------------------------------------
# The build_ext half
# ---------------------------------------------------------------------------
class CudaqBuildExtMixin:
    """Mixed over a project's ``build_ext``: runs ``build_cudaq_kernels`` and links its output."""

    _skbuild_cudaq_wrapped = True
    # Provided by the build_ext this is mixed over:
    compiler: Any
    force: Any
    distribution: Any

    def run(self) -> None:
        self.run_command("build_cudaq_kernels")  # type: ignore[attr-defined]
        super().run()  # type: ignore[misc]

    def _cudaq_plans(self) -> dict[str, ExtensionPlan]:
        command = self.get_finalized_command("build_cudaq_kernels")  # type: ignore[attr-defined]
        plans: dict[str, ExtensionPlan] = command.plans
        return plans

    def get_source_files(self) -> list[str]:
        files: list[str] = super().get_source_files()  # type: ignore[misc]
        command = self.get_finalized_command("build_cudaq_kernels")  # type: ignore[attr-defined]
        return files + [s for s in command.get_source_files() if s not in files]

    def build_extension(self, ext: Any) -> None:
        plan = self._cudaq_plans().get(ext.name)
        if plan is None:
            super().build_extension(ext)  # type: ignore[misc]
            return
        with _front_door():
            self._compile_embed(plan)
        patched = copy.copy(ext)
        patched.sources = [s for s in ext.sources if not _is_cuda_source(s)]
        extra_objects = [*(ext.extra_objects or [])]
        extra_objects += [str(o) for o in plan.handler_objects]
        if plan.embed_object is not None:
            extra_objects.append(str(plan.embed_object))
        libraries = [*(ext.libraries or [])]
        if plan.link_cudart is not None:
            # The static runtime and what it needs (as nvcc links it).
            extra_objects.append(str(plan.link_cudart))
            libraries += [lib for lib in ("rt", "pthread", "dl") if lib not in libraries]
        patched.extra_objects = extra_objects
        patched.libraries = libraries
        patched.depends = [*(ext.depends or []), *(str(d) for d in plan.depends())]
        if plan.handler_objects and not ext.language:
            patched.language = "c++"  # nvcc objects are C++: link with the C++ driver
        super().build_extension(patched)  # type: ignore[misc]

    def _compile_embed(self, plan: ExtensionPlan) -> None:
        source, obj = plan.embed_source, plan.embed_object
        if source is None or obj is None:
            return
        inputs = [source, *plan.fatbins, *plan.records]
        if not self.force and obj.is_file():
            mtime = obj.stat().st_mtime_ns
            if all(p.stat().st_mtime_ns <= mtime for p in inputs):
                _log.progress(f"{obj}: up to date")
                return
        # Relative source path: distutils then writes the object next to it.
        rel = os.path.relpath(source)
        try:
            objects = self.compiler.compile([rel], output_dir=None)
        except Exception as exc:  # distutils' CompileError, without importing distutils here
            msg = f"compiling the generated embed source {source} failed: {exc}"
            raise KernelCompileError(msg) from exc
        produced = Path(objects[0]).resolve()
        if produced != obj:
            produced.replace(obj)


def _wrap_build_ext(base: type) -> type:
    """``base`` with :class:`CudaqBuildExtMixin` on top (same command name and options)."""
    return type(base.__name__, (CudaqBuildExtMixin, base), {"__module__": __name__})
