"""The settings model: the documented dataclasses of ``[tool.cudaq]``.

These are the single description of ``[tool.cudaq]``: the converter (:mod:`._sources`),
the JSON schema and the reference table in the docs (:mod:`.json_schema`) are all derived
from their fields and the field metadata made by :func:`~._fields.setting`. Adding a key
means adding a field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skbuild_cudaq._architectures import DEFAULT_ARCHITECTURES
from skbuild_cudaq.settings._fields import Reporter, setting
from skbuild_cudaq.settings._rules import ARCHITECTURE, COMPILER, KERNEL_SOURCE, TARGET_NAME
from skbuild_cudaq.settings._toml_text import format_key, show_value

__all__ = ["CudaqSettings", "DispatchKernelSettings"]

#: Where the settings live in ``pyproject.toml``.
ROOT_KEY: tuple[str, ...] = ("tool", "cudaq")


def _one_target_per_source(
    kernels: dict[str, DispatchKernelSettings],
    raw: dict[str, Any],
    path: tuple[str | int, ...],
    report: Reporter,
) -> None:
    """A kernel source belongs to one target: the same file under two targets is an error."""
    owner: dict[str, tuple[str, tuple[str | int, ...]]] = {}
    for target, kernel in kernels.items():
        base = (*path, target) if isinstance(raw[target], list) else (*path, target, "sources")
        for index, source in enumerate(kernel.sources):
            where = (*base, index)
            if source in owner:
                first_target, first_where = owner[source]
                report(
                    where,
                    f"{show_value(source)} is already the dispatch kernel of target "
                    f"{show_value(first_target)} ({format_key(first_where)}); expected each "
                    "kernel source under one target",
                    "keep it under one target (each binary links its own kernel), or copy it "
                    "to a second .cu file",
                )
            else:
                owner[source] = (target, where)


@dataclass(frozen=True)
class DispatchKernelSettings:
    """A custom dispatch kernel of one target: its sources and architectures.

    Short form ``_core = ["src/k.cu"]``; long form
    ``_core = { sources = ["src/k.cu"], architectures = ["80", "90"] }``.
    """

    sources: tuple[str, ...] = setting(
        help="Dispatch kernel sources (.cu), or .py files of Python handlers (skbuild_cudaq.numba, "
        "compiled by numba-cuda), relative to the project directory and inside it "
        '(no symbolic link leading out), without ; [ ] $ ` " \\ | : or control characters; '
        "each is compiled on its own to LTO-IR and embedded in the target's binary.",
        item=KERNEL_SOURCE,
        min_items=1,
        unique=True,
        shorthand=True,
    )
    architectures: tuple[str, ...] = setting(
        help='GPU architectures to build LTO-IR for (numbers 80 to 9999; 80, "80", "sm_80", '
        '"lto_80" and "compute_80" are the same). LTO-IR for one architecture links for that GPU '
        "and every newer one.",
        default=DEFAULT_ARCHITECTURES,
        item=ARCHITECTURE,
        min_items=1,
        unique=True,
    )

    def source_paths(self, project_dir: Path) -> tuple[Path, ...]:
        """The sources as absolute, resolved paths (``project_dir`` is the pyproject's folder)."""
        return tuple((project_dir / source).resolve() for source in self.sources)


@dataclass(frozen=True)
class CudaqSettings:
    """Settings of skbuild-cudaq (``[tool.cudaq]`` of ``pyproject.toml``): custom CUDA-Q
    realtime dispatch kernels to build into the project's binaries."""

    dispatch_kernels: dict[str, DispatchKernelSettings] = setting(  # noqa: RUF009 (a Field)
        help="Custom dispatch kernels, by the CMake target (scikit-build-core) or extension "
        "(setuptools) whose binary embeds them and holds their handlers.",
        default_factory=dict,
        key=TARGET_NAME,
        key_name="<target>",
        key_example="_core",
        min_items=1,
        validate=_one_target_per_source,
    )
    compiler: str = setting(
        help='Device compiler of dispatch kernels and side-compiled handlers: "nvcc", '
        '"nvrtc" (NVRTC of the project\'s CUDA major from its nvidia-cuda-nvrtc wheel in the '
        'build environment: no CUDA toolkit needed) or "auto" (nvcc where found, else NVRTC). '
        'The setuptools front door compiles with nvcc only and refuses "nvrtc".',
        default="auto",
        item=COMPILER,
    )
