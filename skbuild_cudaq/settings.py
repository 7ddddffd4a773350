"""``[tool.cudaq]`` settings: documented dataclasses, validation that reports every problem.

PLACEHOLDER INTERFACE (to be completed by the settings work): the dataclasses
and ``load_settings`` signature below are what the front doors use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SettingsError, SettingsProblem

__all__ = ["CudaqSettings", "DispatchKernelSettings", "load_settings", "parse_settings"]

DEFAULT_ARCHITECTURES = ("80",)


@dataclass(frozen=True)
class DispatchKernelSettings:
    """One entry of ``[tool.cudaq.dispatch-kernels]``."""

    sources: tuple[str, ...] = field(
        metadata={"help": "Kernel sources (.cu), relative to the project directory."}
    )
    architectures: tuple[str, ...] = field(
        default=DEFAULT_ARCHITECTURES,
        metadata={"help": "LTO-IR architectures (>= 80): each links for that GPU and newer."},
    )


@dataclass(frozen=True)
class CudaqSettings:
    """The ``[tool.cudaq]`` table."""

    dispatch_kernels: dict[str, DispatchKernelSettings] = field(
        default_factory=dict,
        metadata={
            "toml": "dispatch-kernels",
            "help": "Target (CMake) or extension (setuptools) name -> dispatch kernel sources.",
        },
    )


def parse_settings(table: dict[str, Any], project_dir: Path) -> CudaqSettings:
    """Validate the ``[tool.cudaq]`` table; raise :class:`SettingsError` listing every problem."""
    problems: list[SettingsProblem] = []
    kernels: dict[str, DispatchKernelSettings] = {}
    for name, value in dict(table.get("dispatch-kernels", {})).items():
        if isinstance(value, list):
            kernels[name] = DispatchKernelSettings(sources=tuple(value))
        else:
            kernels[name] = DispatchKernelSettings(
                sources=tuple(value["sources"]),
                architectures=tuple(str(a) for a in value.get("architectures", ["80"])),
            )
    if problems:
        raise SettingsError(problems)
    return CudaqSettings(dispatch_kernels=kernels)


def load_settings(pyproject: Path) -> CudaqSettings:
    """Read ``pyproject`` and return its validated ``[tool.cudaq]`` settings."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    with pyproject.open("rb") as f:
        data = tomllib.load(f)
    return parse_settings(data.get("tool", {}).get("cudaq", {}), pyproject.parent)


_ = dataclasses
