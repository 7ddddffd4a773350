"""``python -m skbuild_cudaq inspect EXT.so [--json]``: list a binary's device code.

Shows every ``__nv_relfatbin`` section, its fatbin containers and their entries
(kind, architecture, compression, size, code version). ``cuobjdump`` does not
list a linked module's ``__nv_relfatbin``; this is the tool for it. Never
imports ``cuda.*``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from . import _log

__all__ = ["add_parser", "render_text"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "inspect",
        help="list the device code (fatbin containers and entries) embedded in a binary",
        description=(
            "List every __nv_relfatbin section of an ELF binary (extension module, "
            "shared library or object), its fatbin containers and their entries. "
            "A plain .fatbin file is listed too."
        ),
    )
    p.add_argument("binary", type=Path, help="extension module (.so), object or .fatbin file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


def _sections_json(binary: Path) -> dict[str, object]:
    from .fatbin import read_fatbin_file, read_relfatbin_sections

    if binary.suffix == ".fatbin":
        containers = read_fatbin_file(binary)
        return {
            "file": str(binary),
            "sections": [
                {
                    "index": None,
                    "file_offset": 0,
                    "size": sum(c.size for c in containers),
                    "flags": None,
                    "containers": [c.to_json() for c in containers],
                }
            ],
        }
    sections = read_relfatbin_sections(binary)
    return {"file": str(binary), "sections": [s.to_json() for s in sections]}


def render_text(doc: dict[str, Any]) -> str:
    lines = [f"{doc['file']}:"]
    for section in doc["sections"]:
        if section["index"] is None:
            lines.append(f"  fatbin file, {section['size']} bytes")
        else:
            lines.append(
                f"  section __nv_relfatbin [index {section['index']}] at file offset "
                f"0x{section['file_offset']:x}, {section['size']} bytes, "
                f"flags 0x{section['flags']:x}"
            )
        for number, container in enumerate(section["containers"]):
            lines.append(
                f"    container {number} at offset 0x{container['offset']:x}: "
                f"{container['size']} bytes, {len(container['entries'])} "
                f"{'entry' if len(container['entries']) == 1 else 'entries'}"
            )
            for entry in container["entries"]:
                state = "compressed" if entry["compressed"] else "uncompressed"
                lines.append(
                    f"      {entry['kind']:<7} {entry['arch']:<7} {state:<12} "
                    f"{entry['size']:>8} bytes  code version {entry['code_version']}"
                )
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    doc = _sections_json(args.binary)
    if args.json:
        _log.result(json.dumps(doc, indent=2))
    else:
        _log.result(render_text(doc))
    return 0
