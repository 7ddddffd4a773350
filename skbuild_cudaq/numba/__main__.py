"""``python -m skbuild_cudaq.numba SOURCE.py --arch 80 ... -o OUT.fatbin``: the build step of
a Python device source.

Run by the CMake package (``cudaq_realtime_add_dispatch_kernel`` / ``_add_device_sources``
with a ``.py`` source) through the steps runner, in the build's Python environment (where
the backend put numba-cuda and NVVM). It imports the file, compiles every handler it defines
at module level (:func:`skbuild_cudaq.numba.handler` / ``thread_handler``) for each
architecture, writes the fatbin containers (one per handler) to ``OUT``, the build record
(``--record``, see :mod:`skbuild_cudaq.build._device_info`) and a make-style depfile
(``--depfile``: the source and every module it imported from the project). A failure is one
``skbuild-cudaq: error:`` line naming the file, the function and numba's reason (numba's
whole message with ``-C cudaq.verbose=true``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from skbuild_cudaq import _log
from skbuild_cudaq.errors import CompileError, CudaqError
from skbuild_cudaq.numba import PyHandler, PyKernel


def _load(source: Path) -> ModuleType:
    """Import ``source`` as a module of its own (its directory first on ``sys.path``)."""
    name = "_cudaq_python_device_" + "".join(c if c.isalnum() else "_" for c in source.stem)
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        msg = f"{source}: not a Python file"
        raise CudaqError(msg)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(source.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except CudaqError:
        raise
    except Exception as exc:  # the user's module failed to import: say where, in one line
        msg = f"importing {source} failed: {type(exc).__name__}: {exc}"
        raise CudaqError(msg) from None
    return module


def handlers_of(module: ModuleType) -> list[PyHandler | PyKernel]:
    """The handlers and dispatch kernels ``module`` defines (at module level, in order)."""
    return [v for v in vars(module).values() if isinstance(v, (PyHandler, PyKernel))]


def _depfile(path: Path, target: str, source: Path, project: Path | None) -> None:
    roots = [p.resolve() for p in (project, source.parent) if p is not None]
    seen = [source.resolve()]
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        resolved = Path(file).resolve()
        if resolved not in seen and any(resolved.is_relative_to(r) for r in roots):
            seen.append(resolved)

    def quoted(p: Path | str) -> str:
        return str(p).replace(" ", "\\ ")

    path.write_text(f"{quoted(target)}: " + " ".join(quoted(p) for p in seen) + "\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m skbuild_cudaq.numba")
    parser.add_argument("source", help="the .py file of handlers")
    parser.add_argument("--arch", action="append", required=True, help="e.g. 80 (repeatable)")
    parser.add_argument("-o", "--output", required=True, help="fatbin file to write")
    parser.add_argument("--record", help="the build record (JSON) to write")
    parser.add_argument("--depfile", help="make-style depfile to write")
    parser.add_argument("--project-dir", default="")
    parser.add_argument("--target", default="", help="the CMake target (for messages)")
    return parser


def run(args: argparse.Namespace) -> None:
    """Compile, write the fatbin, the record and the depfile."""
    from skbuild_cudaq.build._device_info import make_record, write_record
    from skbuild_cudaq.numba._compile import check_versions, handler_containers, numba_compiler

    source = Path(args.source).resolve()
    project = Path(args.project_dir).resolve() if args.project_dir else None
    inside = project is not None and source.is_relative_to(project)
    shown = source.relative_to(project).as_posix() if project and inside else str(source)
    archs = [int(a) for arch in args.arch for a in arch.replace(",", ";").split(";") if a]
    handlers = handlers_of(_load(source))
    if not handlers:
        msg = (
            f"{shown} defines no handler: decorate a function with "
            "skbuild_cudaq.numba.handler or thread_handler (or dispatch_kernel)"
        )
        raise CudaqError(msg)
    where = f"{shown} for CMake target {args.target}" if args.target else shown
    containers = handler_containers(handlers, archs, where)
    check_versions(containers[0])
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(b"".join(containers))
    if args.record:
        record = make_record(
            source=source,
            project_dir=project,
            compiled="side",
            compiler=numba_compiler(),
            architectures=[str(a) for a in archs],
            kernels=[k.name for k in handlers if isinstance(k, PyKernel)],
            handlers=[h.name for h in handlers if isinstance(h, PyHandler)],
            containers=containers,
        )
        write_record(Path(args.record), record)
    if args.depfile:
        _depfile(Path(args.depfile), args.output, source, project)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        run(args)
    except CompileError as exc:
        if _log.verbose() and exc.log:
            _log.diagnostics(exc.log)
        _log.error(str(exc))
        return 1
    except CudaqError as exc:
        _log.error(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
