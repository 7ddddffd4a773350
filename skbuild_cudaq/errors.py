"""Typed errors of skbuild-cudaq (build side and shared): every one is defined here.

Library code raises these; front doors (the PEP 517 hooks, the CLI, the
setuptools command) print them through :mod:`skbuild_cudaq._log` and exit.
Run-time (CUDA) errors live in :mod:`skbuild_cudaq.realtime.errors` and derive
from :class:`CudaqError` too.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CompileError",
    "ConfigSettingsError",
    "CudaqError",
    "DeviceCodeError",
    "KernelCompileError",
    "SettingsError",
    "SettingsProblem",
    "ToolchainError",
]


class CudaqError(Exception):
    """Base class of every error skbuild-cudaq raises on purpose."""


class SettingsProblem(NamedTuple):
    """One problem in ``[tool.cudaq]``: where, what was found, what is accepted, how to fix.

    (A named tuple rather than a dataclass: this module is imported on the run
    time's start-up path, where importing ``dataclasses`` alone costs ~1 ms.)
    """

    key: str  #: dotted key path, e.g. ``tool.cudaq.dispatch-kernels._core``
    message: str  #: what is wrong, naming the bad value
    fix: str = ""  #: what to do (may contain "did you mean ...")

    def __str__(self) -> str:
        text = f"{self.key}: {self.message}"
        if self.fix:
            text += f"; {self.fix}"
        return text


class SettingsError(CudaqError):
    """``[tool.cudaq]`` has one or more problems; all of them are listed."""

    def __init__(self, problems: list[SettingsProblem], source: str = "pyproject.toml") -> None:
        self.problems = list(problems)
        self.source = source
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"{count} {noun} in [tool.cudaq] of {source}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class ToolchainError(CudaqError):
    """A needed tool (nvcc, nvJitLink) is missing or unusable."""


class DeviceCodeError(CudaqError):
    """A binary's ``__nv_relfatbin`` section is absent, truncated or malformed."""


class CompileError(CudaqError):
    """A device compiler (NVRTC) rejected a source; the message carries its log.

    ``log`` is the compiler's own log (its diagnostics) alone, ``compiler`` the compiler
    that wrote it (e.g. ``"NVRTC 13.0"``), for front doors that show them apart.
    """

    def __init__(self, message: str, log: str = "", compiler: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.compiler = compiler


class KernelCompileError(CudaqError):
    """nvcc (or the host compiler) failed on a dispatch kernel, a handler or the embed source."""


class ConfigSettingsError(CudaqError):
    """A ``-C cudaq.*`` config setting of the ``skbuild_cudaq.build`` backend is unknown or has a
    bad value."""
