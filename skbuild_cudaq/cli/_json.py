"""The commands' ``--json`` documents: one format version and one way to write them.

Every document starts with ``"schema_version"``. Keys may be added within one version; a key
renamed or removed, or a value whose meaning changes, gives a new version. The keys are listed
in the command-line reference (``docs/reference/cli.md``), which the tests compare with what
each command writes.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SCHEMA_VERSION", "document"]

SCHEMA_VERSION = 1


def document(content: dict[str, Any]) -> str:
    """``content`` as the text of a ``--json`` document, ``schema_version`` first."""
    return json.dumps({"schema_version": SCHEMA_VERSION, **content}, indent=2)
