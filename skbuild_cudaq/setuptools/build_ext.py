"""The ``build_ext`` half: a project's ``build_ext`` with :class:`CudaqBuildExtMixin` on top.

It runs ``build_cudaq_kernels`` (:mod:`.command`) first, then builds each extension
without its ``.cu`` sources, linking the handler objects, the compiled embed source and
the static CUDA runtime instead. The hook (:mod:`.hook`) puts it in place.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from skbuild_cudaq import _log
from skbuild_cudaq.errors import KernelCompileError
from skbuild_cudaq.setuptools._plan import ExtensionPlan, is_cuda_source
from skbuild_cudaq.setuptools.command import front_door

__all__ = ["CudaqBuildExtMixin", "wrap_build_ext"]


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
        with front_door():
            self._compile_embed(plan)
        patched = copy.copy(ext)
        patched.sources = [s for s in ext.sources if not is_cuda_source(s)]
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


def wrap_build_ext(base: type) -> type:
    """``base`` with :class:`CudaqBuildExtMixin` on top (same command name and options)."""
    return type(base.__name__, (CudaqBuildExtMixin, base), {"__module__": __name__})
