"""Fuzzing ``[tool.cudaq]``: random tables through every front door, zero tracebacks (issue 11).

Each case writes a ``pyproject.toml`` -- a random table of plausible and hostile values (paths
with ``;``, ``..``, links out of the project, names over 255 bytes, 5000-digit architectures,
NaN, dates, deep nesting ...) serialized as TOML, and one case in eight mutated at the byte level
(invalid UTF-8, truncation, nesting) -- and drives the real code:

* :func:`skbuild_cudaq.settings.load_settings`: settings, or a :class:`CudaqError`;
* ``python -m skbuild_cudaq schema --check`` (``__main__.main``, in process): status 0, or 1 with
  ``skbuild-cudaq: error: <the same message>`` on stderr;
* the PEP 517 backend ``skbuild_cudaq.build``: its hooks' shared front door (``_call``) on every
  case, the whole ``get_requires_for_build_sdist`` hook on one in 16: requirements, or
  ``SystemExit(1)`` with the same message;
* and when the table is accepted, the committed JSON schema accepts it too.

Anything else (an exception that is not a ``CudaqError``, a disagreement between the doors) is
a failure. Fixed seed, fixed case count, a time bound. ``python tests/test_settings_fuzz.py
[CASES] [SEED]`` prints the figures (cases, accepted, clean errors by kind, crashes, time, peak
memory).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from datetime import time as dtime
from pathlib import Path
from typing import Any

CASES = 5000
SEED = 20261130
#: A guard against a hang, not a budget: 5000 cases take about 40 s of CPU (1 core), several
#: minutes of wall time on a 2-core machine shared with other jobs.
TIME_BOUND_S = 900.0

HEAD = '[project]\nname = "fuzz"\nversion = "0.1"\n\n'

# -- values -------------------------------------------------------------------------------------

GOOD_SOURCES = ["src/k.cu", "src/other.cu", "kernels/a.cu", "./src/k.cu", "src/../src/other.cu"]
HOSTILE_SOURCES = [
    "",
    "  ",
    "src/k.cu;/etc/passwd.cu",
    "src/k.cu;../outside/x.cu",
    "src/semi;x.cu",  # exists: CMake would still split it
    "src/out.cu",  # a symbolic link out of the project
    "linked/x.cu",  # under a symbolic link to a directory outside
    "../outside/x.cu",
    "/etc/passwd.cu",
    "src/../../outside/x.cu",
    "src/a[b.cu",
    "src/a]b.cu",
    "src/$HOME.cu",
    "src/`id`.cu",
    "src/a|b.cu",
    "src/a:b.cu",
    'src/a"b.cu',
    "src\\k.cu",
    "src/k\n.cu",
    "src/k\x00.cu",
    "src/k\x7f.cu",
    "src/" + "a" * 300 + ".cu",
    "src/" + "\u00e9" * 200 + ".cu",
    "/".join(["d" * 250] * 20) + "/k.cu",
    "src/k.cuh",
    "src/k.cpp",
    "src/" + "b" * 300 + ".txt",
    "dir.cu",
    "src",
    "missing.cu",
    "src/k.CU",
    "\u202esrc/k.cu",
    "src/\U0001f600.cu",
]
GOOD_ARCHS: list[Any] = [80, 90, 100, "80", "sm_90", "lto_100", "compute_120", "103", "080", 9999]
HOSTILE_ARCHS: list[Any] = [
    -1,
    0,
    75,
    10**20,
    2**63 - 1,
    -(2**63),
    "9" * 5000,
    "sm_" + "9" * 5000,
    "0" * 4000 + "80",
    "90a",
    "80-real",
    "8.0",
    " 80",
    "",
    "sm_",
    "\u0668\u0660",  # Arabic-Indic digits: str.isdigit() but not [0-9]
    80.0,
    1e308,
    math.nan,
    math.inf,
    -0.0,
    True,
    date(2026, 11, 30),
    [80],
    {"arch": 80},
]
TARGETS = [
    "_core",
    "pkg._core",
    "a" * 300,
    "",
    " ",
    "bad name",
    "sources",
    "architectures",
    "x;y",
    "\u00e9t\u00e9",
    "a\nb",
    "tool",
]
KEYS = ["dispatch-kernels", "dispatch_kernels", "dispatch-kernel", "verbose", "", "\x00", "sources"]
ENTRY_KEYS = ["sources", "architectures", "source", "archs", "Sources", "", "extra"]


def _random_string(rng: random.Random) -> str:
    alphabet = 'ab/._-;[]$`"\\|: \n\t\x00\x7f\u00e9\u202e\U0001f600' + "0123456789"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))


def _junk(rng: random.Random, depth: int = 0) -> Any:
    """Any TOML value, nested at most a few levels."""
    kind = rng.randrange(10 if depth < 4 else 7)
    if kind == 0:
        return _random_string(rng)
    if kind == 1:
        return rng.choice([0, -1, 1, 2**63 - 1, -(2**63), 10**30, rng.randrange(-1000, 1000)])
    if kind == 2:
        return rng.choice([0.5, -1e-300, 1e308, math.nan, math.inf, -math.inf, 80.0])
    if kind == 3:
        return rng.random() < 0.5
    if kind == 4:
        return rng.choice(
            [date(1979, 5, 27), datetime(1979, 5, 27, 7, 32), dtime(7, 32, 0, 999000)]
        )
    if kind in (5, 6):
        return rng.choice(HOSTILE_SOURCES + GOOD_SOURCES)
    if kind in (7, 8):
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {_random_string(rng): _junk(rng, depth + 1) for _ in range(rng.randrange(0, 4))}


def _pick(rng: random.Random, good: list[Any], hostile: list[Any], junk: float = 0.1) -> Any:
    roll = rng.random()
    if roll < junk:
        return _junk(rng)
    return rng.choice(good if roll < 0.55 else hostile)


def _entry(rng: random.Random) -> Any:
    roll = rng.random()
    sources = [_pick(rng, GOOD_SOURCES, HOSTILE_SOURCES) for _ in range(rng.randrange(0, 4))]
    if roll < 0.45:
        return sources  # short form
    if roll < 0.9:
        entry: dict[str, Any] = {}
        if rng.random() < 0.9:
            entry["sources"] = sources
        if rng.random() < 0.7:
            entry["architectures"] = [
                _pick(rng, GOOD_ARCHS, HOSTILE_ARCHS) for _ in range(rng.randrange(0, 4))
            ]
        if rng.random() < 0.15:
            entry[rng.choice(ENTRY_KEYS)] = _junk(rng)
        return entry
    return _junk(rng)


def random_table(rng: random.Random) -> dict[str, Any]:
    """A random ``[tool.cudaq]`` table: mostly well-formed in shape, hostile in values."""
    table: dict[str, Any] = {}
    if rng.random() < 0.9:
        kernels: Any = {
            _pick(rng, TARGETS[:2], TARGETS[2:], junk=0.0): _entry(rng)
            for _ in range(rng.randrange(0, 4))
        }
        if rng.random() < 0.05:
            kernels = _junk(rng)
        table["dispatch-kernels"] = kernels
    if rng.random() < 0.1:
        table[rng.choice(KEYS)] = _junk(rng)
    return table


# -- TOML text ----------------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (datetime, date, dtime)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    items = ", ".join(f"{_toml_string(k)} = {toml_value(v)}" for k, v in value.items())
    return "{ " + items + " }" if items else "{}"


def toml_document(table: dict[str, Any]) -> bytes:
    lines = [HEAD, "[tool.cudaq]"]
    lines += [f"{_toml_string(k)} = {toml_value(v)}" for k, v in table.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def mutate(rng: random.Random, data: bytes) -> bytes:
    """Byte-level damage: what a broken editor, a bad merge or an attacker leaves."""
    buf = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0 and buf:  # flip bytes, invalid UTF-8 among them
        for _ in range(rng.randrange(1, 4)):
            buf[rng.randrange(len(buf))] = rng.choice([0xFF, 0xC3, 0x80, 0x00, 0x5B, 0x22])
    elif kind == 1:  # truncate
        del buf[rng.randrange(len(buf) + 1) :]
    elif kind == 2:  # deep nesting
        depth = rng.choice([50, 400, 3000])
        buf += b"deep = " + b"[" * depth + b"]" * depth + b"\n"
    elif kind == 3:  # deep inline tables
        depth = rng.choice([50, 400, 3000])
        buf += b"deep = " + b"{a = " * depth + b"1" + b"}" * depth + b"\n"
    elif kind == 4:  # a huge integer
        buf += b"big = " + b"7" * rng.choice([19, 4301, 5000]) + b"\n"
    else:  # duplicate a line (duplicate keys and tables)
        lines = bytes(buf).split(b"\n")
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        buf = bytearray(b"\n".join(lines))
    return bytes(buf)


# -- the project the paths are checked against ------------------------------------------------


def make_project(root: Path) -> Path:
    project = root / "proj"
    for name in ("src/k.cu", "src/other.cu", "kernels/a.cu", "src/k.cuh", "src/k.cpp"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text("// fuzz\n")
    (project / "src/semi;x.cu").write_text("// a file with ; in its name\n")
    (project / "dir.cu").mkdir()
    outside = root / "outside"
    outside.mkdir()
    (outside / "x.cu").write_text("// outside the project\n")
    (project / "src/out.cu").symlink_to(outside / "x.cu")
    (project / "linked").symlink_to(outside, target_is_directory=True)
    return project


# -- driving the front doors --------------------------------------------------------------------


@dataclass
class Figures:
    cases: int = 0
    accepted: int = 0
    errors: Counter[str] = field(default_factory=Counter)  #: clean errors by kind
    crashes: list[str] = field(default_factory=list)  #: one line each: case, door, exception

    def line(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.errors.items()))
        return (
            f"{self.cases} cases: {self.accepted} accepted, {sum(self.errors.values())} clean "
            f"errors ({kinds}), {len(self.crashes)} crashes"
        )


@contextlib.contextmanager
def _in(directory: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def _capture_stderr() -> tuple[io.StringIO, Any]:
    stream = io.StringIO()
    return stream, contextlib.redirect_stderr(stream)


def run_case(project: Path, data: bytes, schema_check: Any, figures: Figures) -> None:
    from skbuild_cudaq import build
    from skbuild_cudaq.__main__ import main
    from skbuild_cudaq.errors import CudaqError, SettingsError
    from skbuild_cudaq.settings import load_settings, read_pyproject

    case = figures.cases
    figures.cases += 1
    pyproject = project / "pyproject.toml"
    pyproject.write_bytes(data)

    def crash(door: str, exc: BaseException) -> None:
        figures.crashes.append(f"case {case}: {door}: {type(exc).__name__}: {exc!s:.300}")

    # 1. the loader
    message: str | None = None
    try:
        settings = load_settings(pyproject)
    except SettingsError as exc:
        message = str(exc)
        figures.errors["SettingsError"] += 1
        if not exc.problems or any(not p.key.startswith("tool") for p in exc.problems):
            crash("load_settings", AssertionError(f"problems without key paths: {exc.problems}"))
    except CudaqError as exc:
        message = str(exc)
        figures.errors[f"CudaqError({message.split(': ', 2)[-1][:24]})"] += 1
    except BaseException as exc:  # the finding
        crash("load_settings", exc)
        return
    else:
        figures.accepted += 1
        tool = read_pyproject(pyproject).get("tool", {})
        try:
            schema_check({"tool": {"cudaq": tool.get("cudaq", {})}})
        except Exception as exc:
            crash("schema (accepted by load_settings, refused by the JSON schema)", exc)
        del settings
    if message is not None and "Traceback" in message:
        crash("load_settings", AssertionError("a traceback in the message"))

    # 2. python -m skbuild_cudaq schema --check
    stream, redirect = _capture_stderr()
    try:
        with redirect, contextlib.redirect_stdout(io.StringIO()):
            status = main(["schema", "--check", str(pyproject)])
    except BaseException as exc:
        crash("schema --check", exc)
    else:
        expected = (0, "") if message is None else (1, f"skbuild-cudaq: error: {message}\n")
        if (status, stream.getvalue()) != expected:
            crash("schema --check", AssertionError(f"{status}, {stream.getvalue()!r:.300}"))

    # 3. the PEP 517 backend: every hook is _call(<scikit-build-core's hook>, ...); the real
    # get_requires_for_build_sdist (scikit-build-core's part costs ~50 ms) on one case in 16
    def passed_through(config_settings: Any) -> list[str]:
        return []

    stream, redirect = _capture_stderr()
    try:
        with _in(project), redirect:
            if case % 16 == 0:
                requires = build.get_requires_for_build_sdist()
            else:
                requires = build._call(passed_through, None, for_build=False)
    except SystemExit as exc:
        if (
            message is None
            or exc.code != 1
            or stream.getvalue() != (f"skbuild-cudaq: error: {message}\n")
        ):
            crash(
                "get_requires_for_build_sdist",
                AssertionError(f"{exc.code}, {stream.getvalue()!r:.300}"),
            )
    except BaseException as exc:
        crash("get_requires_for_build_sdist", exc)
    else:
        if message is not None or not isinstance(requires, list):
            crash("get_requires_for_build_sdist", AssertionError(f"accepted: {requires!r:.200}"))


def fuzz(root: Path, cases: int = CASES, seed: int = SEED, deadline: float = math.inf) -> Figures:
    import fastjsonschema

    from skbuild_cudaq.schema import get_schema

    validate = fastjsonschema.compile(
        {
            "type": "object",
            "properties": {"tool": {"properties": {"cudaq": get_schema()}}},
        }
    )
    project = make_project(root)
    rng = random.Random(seed)
    figures = Figures()
    while figures.cases < cases and time.monotonic() < deadline:
        data = toml_document(random_table(rng))
        if rng.random() < 0.125:
            data = mutate(rng, data)
        run_case(project, data, validate, figures)
    return figures


def test_5000_random_tables_give_zero_tracebacks(tmp_path: Path) -> None:
    start = time.monotonic()
    figures = fuzz(tmp_path, deadline=start + TIME_BOUND_S)
    assert not figures.crashes, figures.line() + "\n" + "\n".join(figures.crashes[:20])
    assert figures.cases == CASES, f"time bound hit: {figures.line()}"
    # The corpus exercises both outcomes and the hostile classes (not just one error).
    assert figures.accepted >= CASES // 20, figures.line()
    assert figures.errors["SettingsError"] >= CASES // 2, figures.line()
    assert len(figures.errors) >= 4, figures.line()


if __name__ == "__main__":
    import resource
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else CASES
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else SEED
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        result = fuzz(Path(tmp), count, seed)
        elapsed = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"seed {seed}: {result.line()}; {elapsed:.1f} s; peak RSS {peak:.0f} MiB")
    for line in result.crashes[:40]:
        print("  " + line)
