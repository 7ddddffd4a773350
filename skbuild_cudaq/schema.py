"""The JSON schema of ``[tool.cudaq]`` under its published name (the entry point).

``skbuild_cudaq.schema:get_schema`` is the ``validate_pyproject.tool_schema`` entry point;
the code, and the documentation of its names, is :mod:`skbuild_cudaq.settings.json_schema`.
"""

from __future__ import annotations

from skbuild_cudaq.settings.json_schema import *  # noqa: F403 (the same names, documented there)
