"""The ``build_cudaq_kernels`` command (entry point ``distutils.commands``): the nvcc half.

Every dispatch kernel of ``[tool.cudaq.dispatch-kernels]`` compiled on its own to an
LTO-IR fatbin with its extension's flags, every ``.cu`` source of an extension compiled
with ``-c -rdc=true``, the handler switch, the build records and the generated embed C
source, each only when out of date; an ``ExtensionPlan`` per extension for
the wrapped ``build_ext`` (:mod:`.build_ext`). Runnable on its own:
``python setup.py build_cudaq_kernels``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from setuptools import Command

from skbuild_cudaq import _log
from skbuild_cudaq._architectures import DEFAULT_ARCHITECTURES
from skbuild_cudaq.build import _device_info, _embed, _handler_switch
from skbuild_cudaq.errors import CudaqError
from skbuild_cudaq.setuptools._plan import (
    ExtensionPlan,
    check_for_setuptools,
    extension_flags,
    is_cuda_source,
)

__all__ = ["build_cudaq_kernels"]

#: kind -> (build subdirectory, output suffix, log label, nvcc command builder)
_SOURCE_KINDS: dict[str, tuple[str, str, str, Callable[..., list[str]]]] = {
    "kernel": ("kernels", ".fatbin", "nvcc (LTO-IR dispatch kernel)", _embed.fatbin_command),
    "handler": ("objects", ".o", "nvcc (-rdc, LTO-IR)", _embed.rdc_object_command),
}


def _fail(exc: CudaqError) -> NoReturn:
    _log.error(str(exc))
    raise SystemExit(1) from None


@contextmanager
def front_door() -> Iterator[None]:
    """Show the library's log; a :class:`~skbuild_cudaq.errors.CudaqError` becomes one
    ``skbuild-cudaq: error:`` line and exit status 1."""
    _log.show_library_log()
    try:
        yield
    except CudaqError as exc:
        _fail(exc)


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:8]


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
        """Every dispatch kernel source and the project's headers it includes (through its
        extension's include directories), project-relative: what an sdist must carry for a
        build from it to compile the kernel (setuptools adds the extension's sources only)."""
        with front_door():
            settings = self.settings()
        from skbuild_cudaq.build._nvrtc import include_dependencies

        extensions = {ext.name: ext for ext in self._extensions()}
        project = self.project_dir.resolve()
        files: dict[str, None] = {}
        for name, entry in settings.dispatch_kernels.items():
            ext = extensions.get(name)
            include_dirs = extension_flags(ext).include_dirs if ext is not None else ()
            for source in entry.sources:
                files[source] = None
                for header in include_dependencies(project / source, include_dirs):
                    try:
                        files[header.relative_to(project).as_posix()] = None
                    except ValueError:
                        continue  # outside the project: skbuild-cudaq's own headers, CUDA's
        return list(files)

    # -- Command API --------------------------------------------------------
    def get_source_files(self) -> list[str]:
        return self.kernel_sources()

    def get_outputs(self) -> list[str]:
        # Intermediate files only: what ships is the extension build_ext writes.
        return []

    def run(self) -> None:
        with front_door():
            self.plans = self.build_plans()

    # -- the work -------------------------------------------------------------
    def build_plans(self) -> dict[str, ExtensionPlan]:
        """Validate, compile what is out of date, write the embed sources: a plan per extension."""
        settings = self.settings()
        extensions = self._extensions()
        kernels = settings.dispatch_kernels
        names = [ext.name for ext in extensions]
        check_for_setuptools(list(kernels), names, compiler=settings.compiler)
        wanted = [
            ext
            for ext in extensions
            if ext.name in kernels or any(is_cuda_source(s) for s in ext.sources)
        ]
        if not wanted:
            return {}
        from skbuild_cudaq.build._toolchain import find_nvcc

        python_only = all(
            all(s.endswith(".py") for s in kernels[ext.name].sources)
            if ext.name in kernels
            else True
            for ext in wanted
        ) and not any(is_cuda_source(s) for ext in wanted for s in ext.sources)
        nvcc = Path("nvcc") if python_only else find_nvcc()  # Python handlers need no nvcc
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
                    if source.endswith(".py"):
                        fatbin = self._compile_python(ext.name, source, architectures, plan)
                        plan.fatbins.append(fatbin)
                        plan.records.append(fatbin.with_name(fatbin.name + ".json"))
                        continue
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
                if is_cuda_source(source):
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

    def _compile_python(
        self, ext_name: str, source: str, architectures: tuple[str, ...], plan: ExtensionPlan
    ) -> Path:
        """A file of Python handlers: ``python -m skbuild_cudaq.numba`` (numba-cuda), which
        writes the fatbin, its record and a depfile; unless up to date."""
        import sys

        path = (self.project_dir / source).resolve()
        output = plan.directory / "kernels" / f"{path.stem}-{_short_hash(source)}.fatbin"
        archs = [a for arch in architectures for a in ("--arch", arch)]
        command = [sys.executable, "-m", "skbuild_cudaq.numba", str(path), *archs]
        command += ["-o", str(output), "--record", f"{output}.json"]
        command += ["--project-dir", str(self.project_dir), "--target", ext_name]
        return self._compile(
            f"numba-cuda (LTO-IR) {source} -> {ext_name}",
            output,
            lambda dep: [*command, "--depfile", str(dep)],
            path,
        )

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
        paths = [(self.project_dir / s).resolve() for s in sources if is_cuda_source(s)]
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
