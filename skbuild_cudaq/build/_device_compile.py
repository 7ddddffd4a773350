"""The steps of one side-compiled device source, run by CMake's custom command.

The CMake package compiles every dispatch kernel and side-compiled handler source with a
custom command. Written out, that command is long (nvcc with every include directory and
definition of the target, a PTX compile, the build record): when nvcc fails, ninja prints
all of it (~2,000 characters) after ``FAILED:``, and the compiler's diagnostics hide behind
it. So the command is short -- this runner and one file of steps, which CMake writes at
generate time (``file(GENERATE)``: the target's flags are generator expressions) -- and a
failure ends with the diagnostics and one line naming the source and the target::

    src/k.cu(5): error: identifier "x" is undefined
    skbuild-cudaq: error: nvcc could not compile src/k.cu for CMake target _core (exit
    status 2); its diagnostics are above

(one line in the log).

The steps file, one value per line (no value holds a newline: the CMake package refuses
paths that do)::

    skbuild-cudaq device compile 1
    target
    _core
    source
    /abs/src/k.cu
    project-dir
    /abs
    step nvcc
    /usr/local/cuda/bin/nvcc
    -fatbin
    ...
    end
    step record
    side
    ...
    end

A step runs a program (``nvcc``: its argv follows; ``numba``: ``python -m
skbuild_cudaq.numba``, which says itself, in one line, what failed), or in this process
``nvrtc`` (the arguments of ``python -m skbuild_cudaq nvrtc``) or ``record`` (the arguments of
:func:`skbuild_cudaq.build._device_info.main`). Empty lines inside a step are skipped (a
generator expression that gave nothing). With ``SKBUILD_CUDAQ_VERBOSE`` (``-C
cudaq.verbose=true``) every command is printed before it runs, as ``cd DIR && COMMAND``.

Run as ``python <cmake dir>/_run_device_compile.py STEPS-FILE``. Never imports ``cuda.*``.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skbuild_cudaq import _log
from skbuild_cudaq.errors import CompileError, CudaqError

__all__ = ["MAGIC", "Steps", "main", "parse_steps", "run_steps"]

MAGIC = "skbuild-cudaq device compile 1"
_KEYS = ("target", "source", "project-dir")


@dataclass(frozen=True)
class Steps:
    """A parsed steps file."""

    target: str
    source: Path
    project_dir: Path | None
    steps: tuple[tuple[str, tuple[str, ...]], ...]  #: (kind, argv)

    def source_name(self) -> str:
        """The source as records name it: relative to the project when inside it."""
        if self.project_dir is not None:
            try:
                return self.source.resolve().relative_to(self.project_dir.resolve()).as_posix()
            except ValueError:
                pass
        return self.source.as_posix()


def parse_steps(text: str, where: str = "steps file") -> Steps:
    """The steps of ``text``; :class:`CudaqError` naming ``where`` when it is malformed."""
    lines = text.splitlines()
    if not lines or lines[0] != MAGIC:
        msg = f"{where}: not a skbuild-cudaq steps file (first line {lines[:1]!r})"
        raise CudaqError(msg)
    values: dict[str, str] = {}
    steps: list[tuple[str, tuple[str, ...]]] = []
    i = 1
    while i < len(lines):
        line = lines[i]
        if line in _KEYS and i + 1 < len(lines):
            values[line] = lines[i + 1]
            i += 2
        elif line.startswith("step "):
            end = lines.index("end", i + 1) if "end" in lines[i + 1 :] else -1
            if end < 0:
                msg = f"{where}: step {line[5:]!r} has no end line"
                raise CudaqError(msg)
            steps.append((line[5:], tuple(a for a in lines[i + 1 : end] if a)))
            i = end + 1
        elif not line:
            i += 1
        else:
            msg = f"{where}: unexpected line {i + 1}: {line!r}"
            raise CudaqError(msg)
    missing = [k for k in ("target", "source") if k not in values]
    if missing:
        msg = f"{where}: no {' or '.join(missing)}"
        raise CudaqError(msg)
    project = values.get("project-dir")
    return Steps(
        values["target"], Path(values["source"]), Path(project) if project else None, tuple(steps)
    )


def _nvrtc(argv: Sequence[str]) -> str:
    """Run ``python -m skbuild_cudaq nvrtc ARGV`` in this process; the compiler's name."""
    from skbuild_cudaq.build._nvrtc import compile_args, parse_compile_args

    return compile_args(parse_compile_args(argv)).describe()


def run_steps(steps: Steps) -> int:
    """Run every step in order; at the first failure, say which source and target it was."""
    source = steps.source_name()
    for kind, argv in steps.steps:
        if kind == "record":
            from skbuild_cudaq.build._device_info import main as record

            if record(list(argv)) != 0:  # it said what went wrong
                return 1
            continue
        if kind == "nvrtc":
            try:
                _nvrtc(argv)
            except CompileError as exc:
                if exc.log:
                    _log.diagnostics(exc.log)
                _log.error(
                    f"{exc.compiler or 'NVRTC'} could not compile {source} for CMake target "
                    f"{steps.target}; {'its diagnostics are above' if exc.log else exc}"
                )
                return 1
            continue
        if not argv:
            continue
        if kind == "numba":  # python -m skbuild_cudaq.numba: its failure is its one line
            _log.progress(f"cd {shlex.quote(str(Path.cwd()))} && {shlex.join(argv)}")
            if subprocess.run(list(argv), check=False).returncode != 0:
                return 1
            continue
        _log.progress(f"cd {shlex.quote(str(Path.cwd()))} && {shlex.join(argv)}")
        tool = Path(argv[0]).name
        try:
            proc = subprocess.run(list(argv), check=False)
        except OSError as exc:
            _log.error(
                f"cannot run {argv[0]} to compile {source} for CMake target {steps.target}: "
                f"{exc.strerror or exc}"
            )
            return 1
        if proc.returncode != 0:
            _log.error(
                f"{tool} could not compile {source} for CMake target {steps.target} (exit status "
                f"{proc.returncode}); its diagnostics are above"
            )
            return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``STEPS-FILE``: run its steps (see the module docstring)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        _log.error("usage: _run_device_compile.py STEPS-FILE")
        return 2
    try:
        text = Path(args[0]).read_text(encoding="utf-8")
        steps = parse_steps(text, args[0])
    except (OSError, CudaqError) as exc:
        _log.error(str(exc))
        return 1
    try:
        return run_steps(steps)
    except CudaqError as exc:
        _log.error(str(exc))
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
