"""Build-time records: the build side's half (names from PTX and objects, the CMake
package's command line). The format itself, and its reader, are :mod:`skbuild_cudaq._records`.

Names come from what the compiler itself emitted, never from parsing C++:

* a side-compiled source (a dispatch kernel, ``cudaq_realtime_add_device_sources``)
  is also compiled to PTX (``nvcc -ptx``, same flags, first architecture): its
  ``.visible .entry`` lines are the kernels and its ``.visible .global``
  ``cudaq_handler_<name>`` lines the exported handlers;
* an nvcc object (handlers compiled as sources of the extension) names them in
  its host symbol table: the shadow variable ``cudaq_handler_<name>`` of each
  export, and ``__device_stub__Z<len><name>`` next to a host stub ``<name>`` for
  each ``extern "C"`` kernel.

Never imports ``cuda.*``.

Run as ``python -m skbuild_cudaq.build._device_info`` by the CMake package (see
:func:`main`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skbuild_cudaq import _log
from skbuild_cudaq._records import HANDLER_PREFIX, container_digest, read_records
from skbuild_cudaq.build._handler_switch import generated_switch_name
from skbuild_cudaq.errors import DeviceCodeError

if TYPE_CHECKING:
    import argparse

__all__ = [
    "main",
    "make_record",
    "names_from_object",
    "names_from_ptx",
    "nvcc_compiler",
    "nvcc_version",
    "object_record",
    "object_records",
    "write_record",
]

_PTX_ENTRY = re.compile(r"^\s*\.visible\s+\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.M)
_PTX_GLOBAL = re.compile(
    r"^\s*\.visible\s+\.global\s+(?:\.\w+\s+(?:\d+\s+)?)*" + HANDLER_PREFIX + r"(\w+)\b",
    re.M,
)
_STUB = re.compile(r"^_Z\d+__device_stub__Z(\d+)([A-Za-z_]\w*)")


def names_from_ptx(ptx: str) -> tuple[list[str], list[str]]:
    """``(kernels, handlers)`` a PTX module defines with external linkage."""
    kernels = list(dict.fromkeys(_PTX_ENTRY.findall(ptx)))
    handlers = list(dict.fromkeys(_PTX_GLOBAL.findall(ptx)))
    return kernels, handlers


def names_from_object(path: Path) -> tuple[list[str], list[str]]:
    """``(kernels, handlers)`` an ``nvcc -c -rdc=true`` object defines (its host symbols)."""
    from skbuild_cudaq._elf import elf_symbols

    with Path(path).open("rb") as f:
        defined = [s.name for s in elf_symbols(f, Path(path)) if s.section != 0]  # defined
    names = set(defined)
    handlers = [n[len(HANDLER_PREFIX) :] for n in defined if n.startswith(HANDLER_PREFIX)]
    kernels = []
    for name in defined:
        match = _STUB.match(name)
        if match:
            length = int(match.group(1))
            kernel = match.group(2)[:length]
            if len(kernel) == length and kernel in names:  # extern "C": host stub unmangled
                kernels.append(kernel)
    return list(dict.fromkeys(kernels)), list(dict.fromkeys(handlers))


def nvcc_version(nvcc: str | os.PathLike[str]) -> str:
    """``13.0.88`` (or ``13.0``) from ``nvcc --version``; ``"unknown"`` when it cannot tell."""
    import subprocess  # here: the reading side (`inspect`) never runs a program

    try:
        proc = subprocess.run(
            [str(nvcc), "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    match = re.search(r"\bV(\d+\.\d+(?:\.\d+)?)", proc.stdout) or re.search(
        r"release (\d+\.\d+)", proc.stdout
    )
    return match.group(1) if match else "unknown"


def nvcc_compiler(nvcc: str | os.PathLike[str]) -> str:
    """A record's ``compiler`` for ``nvcc``: ``"nvcc 13.0.88"`` (``"nvcc unknown"`` when its
    version cannot be read)."""
    return f"nvcc {nvcc_version(nvcc)}"


def _display_source(source: Path, project_dir: Path | None) -> str:
    source = Path(source).resolve()
    generated = generated_switch_name(source)
    if generated is not None:
        return generated
    if project_dir is not None:
        try:
            return source.relative_to(Path(project_dir).resolve()).as_posix()
        except ValueError:
            pass
    return source.as_posix()


def make_record(
    *,
    source: Path,
    project_dir: Path | None,
    compiled: str,
    compiler: str,
    architectures: Sequence[str],
    kernels: Iterable[str],
    handlers: Iterable[str],
    containers: Iterable[bytes],
) -> dict[str, Any]:
    """One record (see the module docstring); ``containers`` are the containers' bytes,
    ``compiler`` the device compiler and its version (``"nvcc 13.0.88"``, ``"NVRTC 13.0"``)."""
    return {
        "source": _display_source(source, project_dir),
        "compiled": compiled,
        "compiler": compiler,
        "architectures": [str(a) for a in architectures],
        "kernels": sorted(kernels),
        "handlers": sorted(handlers),
        "containers": [container_digest(c) for c in containers],
    }


def write_record(path: Path, record: dict[str, Any]) -> bool:
    """Write the record's JSON (only when it changes: keeps the mtime); True when written."""
    from skbuild_cudaq.build._embed import write_if_changed

    return write_if_changed(path, json.dumps(record, sort_keys=True, separators=(",", ":")))


# ---------------------------------------------------------------------------
# Command line (run by the CMake package at build time)
# ---------------------------------------------------------------------------
def _side(args: argparse.Namespace) -> None:
    from skbuild_cudaq.fatbin import read_fatbin_file

    kernels, handlers = names_from_ptx(Path(args.ptx).read_text(encoding="utf-8"))
    containers = [c.data for c in read_fatbin_file(args.fatbin)]
    record = make_record(
        source=Path(args.source),
        project_dir=Path(args.project_dir) if args.project_dir else None,
        compiled="side",
        compiler=f"NVRTC {args.nvrtc}" if args.nvrtc else nvcc_compiler(args.nvcc),
        architectures=args.arch,
        kernels=kernels,
        handlers=handlers,
        containers=containers,
    )
    write_record(Path(args.output), record)


def object_record(
    obj: Path,
    source: Path,
    *,
    project_dir: Path | None,
    compiler: str,
    architectures: Sequence[str],
) -> dict[str, Any] | None:
    """The record of an nvcc object compiled from ``source`` (None: no device code of its own);
    ``compiler`` as :func:`make_record` takes it (:func:`nvcc_compiler`).

    An object without ``__nv_relfatbin`` is a host object; one that already
    carries records is an embed object of side-compiled fatbins.
    """
    from skbuild_cudaq.fatbin import read_relfatbin_sections

    try:
        sections = read_relfatbin_sections(obj)
    except DeviceCodeError:
        return None
    if read_records(obj):
        return None
    kernels, handlers = names_from_object(Path(obj))
    return make_record(
        source=source,
        project_dir=project_dir,
        compiled="nvcc",
        compiler=compiler,
        architectures=architectures,
        kernels=kernels,
        handlers=handlers,
        containers=[c.data for s in sections for c in s.containers],
    )


def object_records(
    objects: Iterable[Path],
    sources: Sequence[Path],
    *,
    project_dir: Path | None,
    nvcc: str,
    architectures: Sequence[str],
) -> list[tuple[Path, dict[str, Any]]]:
    """A record per nvcc object with device code, its source found by the object's name.

    CMake names an object ``<dir>/<source path>.o``: the source is the one whose
    path ends the object's path (longest match); else the object itself is named.
    """
    compiler = nvcc_compiler(nvcc)
    out: list[tuple[Path, dict[str, Any]]] = []
    for obj in objects:
        stem = Path(obj).as_posix()
        stem = stem[: -len(".o")] if stem.endswith(".o") else stem
        matches = [s for s in sources if stem.endswith("/" + Path(s).name)]
        matches.sort(key=lambda s: -len(_common_suffix(stem, Path(s).as_posix())))
        source = matches[0] if matches else Path(obj)
        record = object_record(
            Path(obj),
            source,
            project_dir=project_dir,
            compiler=compiler,
            architectures=architectures,
        )
        if record is not None:
            out.append((Path(obj), record))
    return out


def _common_suffix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _objects(args: argparse.Namespace) -> None:
    objects = [Path(p) for p in Path(args.object_list).read_text().splitlines() if p.strip()]
    sources = [Path(s) for s in args.sources]
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)  # records.txt even when no object has device code
    written = []
    for index, (_obj, record) in enumerate(
        object_records(
            objects,
            sources,
            project_dir=Path(args.project_dir) if args.project_dir else None,
            nvcc=args.nvcc,
            architectures=args.arch,
        )
    ):
        path = out_dir / f"handlers-{index}.json"
        write_record(path, record)
        written.append(str(path.resolve()))
    listing = "\n".join(written) + ("\n" if written else "")
    list_path = out_dir / "records.txt"
    if not list_path.is_file() or list_path.read_text() != listing:
        list_path.write_text(listing)


def main(argv: Sequence[str] | None = None) -> int:
    """``side``: a record for a side-compiled fatbin; ``objects``: records for nvcc objects."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m skbuild_cudaq.build._device_info")
    sub = parser.add_subparsers(dest="command", required=True)
    side = sub.add_parser("side")
    side.add_argument("--fatbin", required=True)
    side.add_argument("--ptx", required=True)
    side.add_argument("--source", required=True)
    side.add_argument("--project-dir", default="")
    compiler = side.add_mutually_exclusive_group(required=True)
    compiler.add_argument("--nvcc", help="the nvcc that compiled it (its version is recorded)")
    compiler.add_argument("--nvrtc", help="the version of the NVRTC that compiled it")
    side.add_argument("--arch", nargs="+", required=True)
    side.add_argument("-o", "--output", required=True)
    side.set_defaults(func=_side)
    objs = sub.add_parser("objects")
    objs.add_argument("--object-list", required=True)
    objs.add_argument("--sources", nargs="*", default=[])
    objs.add_argument("--project-dir", default="")
    objs.add_argument("--nvcc", default="", help="the nvcc of the objects (empty: none known)")
    objs.add_argument("--arch", nargs="+", required=True)
    objs.add_argument("--output-dir", required=True)
    objs.set_defaults(func=_objects)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (DeviceCodeError, OSError) as exc:
        _log.error(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
