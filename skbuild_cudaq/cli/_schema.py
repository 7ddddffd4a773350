"""``python -m skbuild_cudaq schema``: print the ``[tool.cudaq]`` JSON schema or reference table,
or check a ``pyproject.toml``.

- ``schema`` prints the JSON schema (what ``skbuild_cudaq/resources/cudaq.schema.json`` holds);
- ``schema --markdown`` prints the reference table (``docs/reference/tool-cudaq.md``);
- ``schema --check [PYPROJECT]`` validates ``[tool.cudaq]`` of a project (default
  ``./pyproject.toml``) exactly as a build does, source files included, and lists every problem.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from skbuild_cudaq import _log

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "schema",
        help="print the [tool.cudaq] JSON schema, its reference table, or check a pyproject.toml",
        description="Print the [tool.cudaq] JSON schema (default) or its reference table, or "
        "check [tool.cudaq] of a pyproject.toml exactly as a build does.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--markdown", action="store_true", help="print the reference table (Markdown) instead"
    )
    what.add_argument(
        "--check",
        nargs="?",
        const=Path("pyproject.toml"),
        type=Path,
        metavar="PYPROJECT",
        help="validate [tool.cudaq] of PYPROJECT (default: ./pyproject.toml) and report problems",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.check is not None:
        from skbuild_cudaq.settings import load_settings

        settings = load_settings(args.check)  # SettingsError -> printed by __main__, exit 1
        count = len(settings.dispatch_kernels)
        noun = "dispatch kernel" if count == 1 else "dispatch kernels"
        details = "".join(
            f"\n  {target}: {', '.join(kernel.sources)} (architectures "
            f"{', '.join(kernel.architectures)})"
            for target, kernel in settings.dispatch_kernels.items()
        )
        _log.result(f"{args.check}: [tool.cudaq] is valid: {count} {noun}{details}")
        return 0
    from skbuild_cudaq.settings import json_schema as schema

    _log.result(schema.generate_markdown() if args.markdown else schema.schema_text())
    return 0
