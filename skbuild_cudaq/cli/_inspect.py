"""``python -m skbuild_cudaq inspect EXT.so [--json]``: list a binary's device code.

Shows every ``__nv_relfatbin`` section, its fatbin containers and their entries
(kind, architecture, compression, size, code version), and for each container
what the build recorded about it (:mod:`skbuild_cudaq.build._device_info`): the
source it was compiled from, the kernels and exported handlers it defines, the
device compiler (nvcc or NVRTC, and its version) and architectures. Containers
without a record (modules built before records existed, or without a Python at
build time) are shown unnamed.
``cuobjdump`` does not list a linked module's ``__nv_relfatbin``; this is the
tool for it. Never imports ``cuda.*``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from skbuild_cudaq import _log
from skbuild_cudaq.cli._args import command
from skbuild_cudaq.cli._json import document
from skbuild_cudaq.errors import DeviceCodeError

__all__ = ["add_parser", "render_text"]


def add_parser(sub: Any) -> None:
    p = command(
        sub,
        "inspect",
        help="list the device code embedded in a binary: containers, kernels, handlers",
        description=(
            "List every __nv_relfatbin section of an ELF binary (extension module, "
            "shared library or object), its fatbin containers and their entries, and "
            "for each container what the build recorded: the source it came from, the "
            'extern "C" kernels and exported handlers it defines, the device compiler and '
            "architectures (containers built without a record are shown unnamed). "
            "A plain .fatbin file is listed too."
        ),
    )
    p.add_argument("binary", help="extension module (.so), object or .fatbin file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run)


_RECORD_KEYS = ("source", "compiled", "compiler", "architectures", "kernels", "handlers")


def _join_records(doc: dict[str, Any], sections: Any, binary: Path) -> None:
    """Give every container of ``doc`` the build record whose digest matches (else None)."""
    from skbuild_cudaq._records import container_digest, read_records

    by_digest: dict[str, dict[str, Any]] = {}
    for record in read_records(binary):
        for digest in record.get("containers", []):
            by_digest[str(digest)] = {k: record.get(k) for k in _RECORD_KEYS}
    for section_doc, section in zip(doc["sections"], sections, strict=True):
        containers = zip(section_doc["containers"], section.containers, strict=True)
        for container_doc, container in containers:
            # no records (built without them): no digest to compute, no hashlib to import
            digest = container_digest(container.data) if by_digest else ""
            container_doc["record"] = by_digest.get(digest)


def _refuse_wheel(binary: Path) -> None:
    """A wheel is a zip archive of binaries: say which command takes one."""
    import zipfile

    if binary.is_file() and zipfile.is_zipfile(binary):
        msg = (
            f"{binary} is a zip archive (a wheel?), not a binary: `skbuild-cudaq check "
            f"{binary}` links every module of a wheel; to inspect one module, unzip the wheel "
            "and pass its .so"
        )
        raise DeviceCodeError(msg)


def _sections_json(binary: Path) -> dict[str, Any]:
    from skbuild_cudaq.fatbin import read_fatbin_file, read_relfatbin_sections

    _refuse_wheel(binary)
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
    doc: dict[str, Any] = {"file": str(binary), "sections": [s.to_json() for s in sections]}
    _join_records(doc, sections, binary)
    return doc


def _names(names: list[str] | None) -> str:
    return ", ".join(names) if names else "none"


def _record_lines(record: dict[str, Any] | None, recordable: bool) -> list[str]:
    """What the build recorded about one container (nothing for a plain .fatbin file)."""
    if not recordable:
        return []
    if record is None:
        return ["      unnamed: no build record (built without one, or by an older skbuild-cudaq)"]
    how = "side-compiled" if record.get("compiled") == "side" else "compiled with the extension"
    archs = ", ".join(f"sm_{a}" for a in record.get("architectures") or []) or "unknown"
    return [
        f"      source   {record.get('source')} ({how}, {record.get('compiler')}, {archs})",
        f"      kernels  {_names(record.get('kernels'))}",
        f"      handlers {_names(record.get('handlers'))}",
    ]


def render_text(doc: dict[str, Any]) -> str:
    """What ``inspect`` prints: names from the binary (its build records' sources, kernels,
    handlers) and its path with what is not printable escaped, as ``--json`` escapes them."""
    from skbuild_cudaq.realtime.link.check import printable

    return "\n".join(printable(line) for line in _text_lines(doc))


def _text_lines(doc: dict[str, Any]) -> list[str]:
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
            lines += _record_lines(container.get("record"), "record" in container)
    return lines


def _run(args: argparse.Namespace) -> int:
    from skbuild_cudaq._elf import named_path

    doc = _sections_json(named_path(args.binary))
    if args.json:
        _log.result(document(doc))
    else:
        _log.result(render_text(doc))
    return 0
