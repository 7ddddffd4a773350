"""The ``setuptools.finalize_distribution_options`` hook: runs for every setuptools build.

In an environment where skbuild-cudaq is installed, setuptools calls
:func:`finalize_distribution_options` for every project it builds, so this module imports
nothing but the standard library and the error types until a project declares
``[tool.cudaq]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skbuild_cudaq.errors import CudaqError

__all__ = ["finalize_distribution_options", "project_uses_cudaq"]


def project_uses_cudaq(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a ``[tool.cudaq]`` table (or a near miss of it, such as
    ``[tool.cuda-q]``, which the build then reports). Never raises.

    Cheap on purpose: most projects are rejected by a byte search before any
    TOML parsing. A malformed file is "not ours": setuptools reports it itself.
    """
    try:
        data = pyproject.read_bytes()
    except OSError:
        return False
    if b"cudaq" not in data.lower().replace(b"-", b"").replace(b"_", b""):
        return False
    from skbuild_cudaq.settings import near_miss_tables, read_pyproject

    try:
        table = read_pyproject(pyproject)
    except CudaqError:
        return False
    tool = table.get("tool")
    if not isinstance(tool, dict):
        return False
    # a near miss ([tool.cuda-q]) too: the build then reads the settings and names it
    return isinstance(tool.get("cudaq"), dict) or bool(near_miss_tables(tool))


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
    from skbuild_cudaq.setuptools.build_ext import wrap_build_ext
    from skbuild_cudaq.setuptools.command import build_cudaq_kernels

    if not getattr(base, "_skbuild_cudaq_wrapped", False):
        cmdclass["build_ext"] = wrap_build_ext(base)
    cmdclass.setdefault("build_cudaq_kernels", build_cudaq_kernels)


# Run after hooks that might set build_ext themselves (setuptools sorts by ``order``).
finalize_distribution_options.order = 100  # type: ignore[attr-defined]
