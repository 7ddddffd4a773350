"""The JSON schema of ``[tool.cudaq]`` under its published name (the entry point).

``skbuild_cudaq.schema:get_schema`` is the ``validate_pyproject.tool_schema`` entry point;
the code lives in :mod:`skbuild_cudaq.settings.json_schema`.
"""

from __future__ import annotations

from .settings.json_schema import (
    SCHEMA_ID,
    SCHEMA_RESOURCE,
    generate_markdown,
    generate_schema,
    get_schema,
    schema_text,
)

__all__ = [
    "SCHEMA_ID",
    "SCHEMA_RESOURCE",
    "generate_markdown",
    "generate_schema",
    "get_schema",
    "schema_text",
]
