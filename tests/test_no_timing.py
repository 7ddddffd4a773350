"""No test asserts that something took less than some time (issue 56, item 10).

On a loaded 2-core CI runner a step of a few milliseconds can take seconds: a test that bounds
a duration fails there without a defect. Tests assert behaviour (answers, counts, order, states);
a deadline only guards against a hang, at :data:`MIN_HANG_GUARD_S` or more; how fast something is
belongs in ``bench/``.

The check reads every test module (and every Python script a module keeps in a string, which
tests run in child processes) and reports each ``assert`` that compares a *duration* with a
bound under :data:`MIN_HANG_GUARD_S`, or with a bound it cannot evaluate. A duration is a
difference involving a clock read (``time.monotonic()``, ``perf_counter()``, ``time()``, their
``_ns`` forms) or a name assigned one, a name that says it is one (``took``, ``elapsed``,
``worst``, ``duration``, ``*_seconds``, ``*_s``) or a ``.seconds`` attribute. Comparing the clock
with a deadline (``time.monotonic() < end``) is a hang guard, not a duration.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
#: The smallest bound a test may put on a duration: a hang guard, which no working code nears.
MIN_HANG_GUARD_S = 5.0
_CLOCKS = frozenset(
    {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "time", "time_ns"}
)
_DURATION_NAME = re.compile(r"(took|elapsed|worst|duration|wall|[a-z0-9_]*_(s|seconds))")
_LESS = (ast.Lt, ast.LtE)
_MORE = (ast.Gt, ast.GtE)


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in _CLOCKS and isinstance(func.value, ast.Name) and func.value.id == "time"
    return isinstance(func, ast.Name) and func.id in _CLOCKS - {"time"}


class _Scope:
    """What one function (or module) assigns: names read from a clock, names of durations."""

    def __init__(self, body: ast.AST) -> None:
        self.clock_names: set[str] = set()
        self.duration_names: set[str] = set()
        assigns = [n for n in ast.walk(body) if isinstance(n, (ast.Assign, ast.AnnAssign))]
        for _ in range(3):  # a name assigned from a name assigned from a clock
            for node in assigns:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is None:
                    continue
                values = (
                    node.value.elts
                    if isinstance(node.value, ast.Tuple)
                    and len(targets) == 1
                    and isinstance(targets[0], ast.Tuple)
                    else [node.value]
                )
                names = (
                    targets[0].elts
                    if len(values) > 1 and isinstance(targets[0], ast.Tuple)
                    else targets
                )
                for target, value in zip(names, values, strict=False):
                    if not isinstance(target, ast.Name):
                        continue
                    if self.is_duration(value):
                        self.duration_names.add(target.id)
                    elif self.reads_clock(value):
                        self.clock_names.add(target.id)

    def reads_clock(self, node: ast.AST) -> bool:
        return any(
            _is_clock_call(n) or (isinstance(n, ast.Name) and n.id in self.clock_names)
            for n in ast.walk(node)
        )

    def is_duration(self, node: ast.AST) -> bool:
        return self.scale(node) is not None

    def scale(self, node: ast.AST) -> float | None:
        """How many of its units make a second, where ``node`` is a duration (``took * 1e3``:
        1000, milliseconds); None where it is none."""
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id not in {"float", "int", "round", "abs"}:
                break
            node = node.args[0]  # float(took), round(elapsed, 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            clocked = self.reads_clock(node.left) or self.reads_clock(node.right)
            return 1.0 if clocked else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            for inner, factor in ((node.left, node.right), (node.right, node.left)):
                scale, number = self.scale(inner), _evaluate(factor, {})
                if scale is not None and number:
                    if isinstance(node.op, ast.Mult):
                        return scale * number
                    return scale / number if inner is node.left else None
            return None
        if isinstance(node, ast.Name):
            named = node.id in self.duration_names or bool(_DURATION_NAME.fullmatch(node.id))
            return 1.0 if named else None
        if isinstance(node, ast.Subscript):  # stats["slowest_case_s"]: a figure by its name
            key = node.slice
            named = isinstance(key, ast.Constant) and isinstance(key.value, str)
            return 1.0 if named and _DURATION_NAME.fullmatch(key.value) else None  # type: ignore[union-attr]
        return 1.0 if isinstance(node, ast.Attribute) and node.attr == "seconds" else None


def _constants(tree: ast.Module) -> dict[str, float]:
    """The module's numeric constants (``DEADLINE = 10.0``)."""
    found: dict[str, float] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = _evaluate(node.value, found)
            for target in targets:
                if isinstance(target, ast.Name) and value is not None:
                    found[target.id] = value
    return found


def _evaluate(node: ast.AST, constants: dict[str, float]) -> float | None:
    """A bound's value in seconds, where it is a number, a module constant or arithmetic of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, constants), _evaluate(node.right, constants)
        if left is None or right is None:
            return None
        ops = {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}
        if isinstance(node.op, ast.Div):
            return left / right if right else None
        return ops.get(type(node.op))
    return None


def _pairs(compare: ast.Compare) -> Iterator[tuple[ast.AST, ast.cmpop, ast.AST]]:
    left = compare.left
    for op, right in zip(compare.ops, compare.comparators, strict=True):
        yield left, op, right
        left = right


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope``, not those of the functions it defines (their own scopes)."""
    for child in ast.iter_child_nodes(scope):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield child
            yield from _own_nodes(child)


def _bounded(compare: ast.Compare, scope: _Scope) -> Iterator[tuple[ast.AST, float]]:
    """The bounds a comparison puts above a duration, each with the duration's units per
    second (``took < 3`` and ``3 > took``: 3, 1.0; ``took * 1e3 < 500``: 500, 1000.0)."""
    for left, op, right in _pairs(compare):
        if isinstance(op, _LESS) and (scale := scope.scale(left)) is not None:
            yield right, scale
        elif isinstance(op, _MORE) and (scale := scope.scale(right)) is not None:
            yield left, scale


def timed_asserts(source: str, name: str = "<test>") -> list[str]:
    """Each ``assert`` of ``source`` that bounds a duration under the hang-guard floor."""
    tree = ast.parse(source, name)
    constants = _constants(tree)
    found: list[str] = []
    functions = (
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    for scope_node in (tree, *functions):
        scope = _Scope(scope_node)
        for node in _own_nodes(scope_node):
            if not isinstance(node, ast.Assert):
                continue
            compares = (n for n in ast.walk(node.test) if isinstance(n, ast.Compare))
            for bound, scale in (b for c in compares for b in _bounded(c, scope)):
                value = _evaluate(bound, constants)
                if value is None or value / scale < MIN_HANG_GUARD_S:
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node.test)}")
    return found


def _scripts(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """The Python scripts a test module keeps in module-level strings (run in children)."""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and "\n" in node.value.value
        ):
            try:
                ast.parse(node.value.value)
            except SyntaxError:
                continue  # C source, a template
            yield node.lineno, node.value.value


def test_no_test_bounds_a_duration() -> None:
    problems: list[str] = []
    for path in sorted(TESTS.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        problems += timed_asserts(text, path.name)
        for line, script in _scripts(ast.parse(text)):
            problems += timed_asserts(script, f"{path.name} (script at line {line})")
    assert problems == [], "\n".join(
        [
            "assert behaviour (answers, counts, order, states), not time; a deadline is a hang "
            f"guard of {MIN_HANG_GUARD_S:g} s or more, and speed belongs in bench/:",
            *problems,
        ]
    )


_T0 = "import time\ndef f(x):\n    t0 = time.monotonic()\n"

#: Each bounds a duration under the floor.
_BOUNDED = [
    _T0 + "    assert time.monotonic() - t0 < 1.0\n",
    _T0 + "    took = time.monotonic() - t0\n    assert took < 3.0, took\n",
    _T0 + "    assert time.monotonic() - t0 < x\n",  # a bound it cannot evaluate
    _T0 + "    assert (time.monotonic() - t0) * 1e3 < 500\n",  # milliseconds
    "LIMIT = 0.5\n" + _T0 + "    assert 2 * LIMIT > time.monotonic() - t0\n",
    "from time import monotonic\ndef f():\n    t = monotonic()\n    assert monotonic() - t < 2\n",
    "def f(worst):\n    assert int(calls) > 10 and float(worst) < 0.4\n",  # a child's figure
    "def f(link):\n    assert 0 < link.seconds < 1\n",
    "def f(stats):\n    assert stats['slowest_case_s'] < 2\n",  # a child's figure, by name
]
#: Each is a hang guard, a lower bound or no duration at all.
_ALLOWED = [
    "import time\ndef f():\n    end = time.monotonic() + 1\n    assert time.monotonic() < end\n",
    "DEADLINE = 20.0\n" + _T0 + "    assert time.monotonic() - t0 < DEADLINE\n",
    _T0 + "    assert time.monotonic() - t0 >= 0.25\n",
    _T0 + "    assert (time.monotonic() - t0) * 1e3 < 6e3\n",
    "def f(link):\n    assert link.seconds > 0\n",
    "import time\ndef f():\n    before = time.monotonic_ns()\n    assert before <= g()\n",
    "def f(n):\n    assert n < 3\n",
]


@pytest.mark.parametrize("source", _BOUNDED)
def test_the_check_finds_a_bounded_duration(source: str) -> None:
    assert len(timed_asserts(source)) == 1


@pytest.mark.parametrize("source", _ALLOWED)
def test_the_check_lets_hang_guards_and_lower_bounds_pass(source: str) -> None:
    assert timed_asserts(source) == []
