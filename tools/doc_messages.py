"""Every error message skbuild-cudaq can print, and whether the troubleshooting page explains it.

(Over 400 lines: one extractor, whose parts, the AST resolver and the two site finders, only
make sense together.)

A static extractor: it reads the package's Python code (``ast``) and its CMake modules, finds
every site that raises or prints an error message (``CudaqError`` and every other exception class
of the package, the settings reporters, ``_log.error``, CMake ``message(FATAL_ERROR)``, and any
function that passes one of its parameters on to one of those), resolves each message to a
template (values as placeholders), and takes the constant fragment of it that
``docs/reference/troubleshooting.md`` must contain verbatim (:func:`fragment_of`).

``tests/test_docs.py`` runs it (every message documented) and tests it on small samples. Run it
by hand to see what a new message needs::

    python tools/doc_messages.py          # every message: ok/MISSING, fragment, where
    python tools/doc_messages.py json     # the same as JSON
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "PLACEHOLDER",
    "TROUBLESHOOTING",
    "Message",
    "cmake_messages",
    "describe",
    "error_messages",
    "fragment_of",
    "missing_messages",
    "python_messages",
]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "skbuild_cudaq"
CMAKE_DIR = PACKAGE / "cmake"
TROUBLESHOOTING = ROOT / "docs" / "reference" / "troubleshooting.md"
TROUBLESHOOTING_REL = TROUBLESHOOTING.relative_to(ROOT).as_posix()

#: Where a message goes, besides CudaqError subclasses: callable name -> (argument index,
#: keyword). ``SettingsProblem(key, message, fix)`` and ``report(path, message, fix)`` (the
#: settings converter's reporter) carry ``[tool.cudaq]`` problems; ``Invalid(message, fix)``
#: is the settings rules' internal form of one; ``_log.error(message)`` prints. Exception
#: classes of the package (``CudaqError`` and its subclasses, and any class derived from an
#: ``...Error``) carry their first argument.
BASE_CARRIERS: dict[str, tuple[int, str]] = {
    "SettingsProblem": (1, "message"),
    "Invalid": (0, "message"),
    "report": (1, "message"),
    "_log.error": (0, "message"),
}
ERROR_BASE = "CudaqError"
MIN_WORDS = 2  # a fragment shorter than this says nothing on its own
MIN_CHARS = 8
_EDGE = " \t\n:;,.()[]{}'\"=`"


@dataclass
class Message:
    """One error message of the code: its template and the fragment the docs must contain."""

    template: str  #: the message with ``{}`` where a value goes
    fragment: str  #: its constant leading fragment (see :func:`fragment_of`)
    where: list[str] = field(default_factory=list)  #: ``path:line (how)`` of each site


PLACEHOLDER = "\x00"


def fragment_of(template: str) -> str:
    """The text of ``template`` that the troubleshooting page must contain.

    The constant leading fragment: the text before the first placeholder, cut at the end of its
    first clause (``: ``, ``; ``, ``. ``). When that is too short to identify the message (fewer
    than two words, e.g. the message starts with a value), the first later run of at least three
    words is used, else the longest of two words. Empty when no run is: the message is all values.
    The ``skbuild-cudaq:`` prefix every printed message gets is not part of it.
    """
    template = re.sub(r"^skbuild[-_]cudaq:\s*", "", template)
    candidates = []
    for position, run in enumerate(template.split(PLACEHOLDER)):
        text = " ".join(run.split()).strip(_EDGE)
        clause = re.split(r"[:;.] ", text, maxsplit=1)[0].strip(_EDGE)
        least = MIN_WORDS if position == 0 else MIN_WORDS + 1  # later runs: more context
        for candidate in (clause, text):
            words = [w for w in candidate.split() if re.search(r"[A-Za-z]", w)]
            if len(words) >= least and len(candidate) >= MIN_CHARS:
                return candidate
            if len(words) >= MIN_WORDS and len(candidate) >= MIN_CHARS:
                candidates.append(candidate)
    return max(candidates, key=len, default="")


def _rel(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


class _Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rel = _rel(path)
        self.tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        self.parents: dict[ast.AST, ast.AST] = {}
        self._assigned: dict[ast.AST, dict[str, list[ast.expr]]] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) around ``node``."""
        current = self.parents.get(node)
        while current is not None:
            if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return current
            current = self.parents.get(current)
        return self.tree

    @staticmethod
    def params(scope: ast.AST) -> list[str]:
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return []
        args = scope.args
        return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]

    def assignments(self, scope: ast.AST, name: str) -> list[ast.expr]:
        """Values assigned to ``name`` directly in ``scope`` (not in nested functions)."""
        table = self._assigned.get(scope)
        if table is None:  # one walk per scope, not one per name looked up (was most of the time)
            table = self._assigned[scope] = self._assignment_table(scope)
        return list(table.get(name, ()))

    def _assignment_table(self, scope: ast.AST) -> dict[str, list[ast.expr]]:
        table: dict[str, list[ast.expr]] = {}
        for node in ast.walk(scope):
            if node is not scope and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if self.scope_of(node) is not scope and node is not scope:
                continue
            names: set[str] = set()
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.value is not None
            ):
                names = {node.target.id}
            for assigned in names:
                table.setdefault(assigned, []).append(node.value)  # type: ignore[arg-type]
        return table

    def templates(self, node: ast.expr, scope: ast.AST, depth: int = 0) -> list[str]:
        """Every form the string expression ``node`` can take, values as placeholders."""
        if depth > 6:
            return [PLACEHOLDER]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            parts = [""]
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts = [p + value.value for p in parts]
                else:
                    parts = [p + PLACEHOLDER for p in parts]
            return parts
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.templates(node.left, scope, depth + 1)
            right = self.templates(node.right, scope, depth + 1)
            return [a + b for a in left for b in right][:32]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return [
                re.sub(r"%[-#0 +]*[0-9.*]*[a-zA-Z%]", PLACEHOLDER, t)
                for t in self.templates(node.left, scope, depth + 1)
            ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
        ):
            return [
                re.sub(r"\{[^{}]*\}", PLACEHOLDER, t)
                for t in self.templates(node.func.value, scope, depth + 1)
            ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Name)
        ):  # "\n".join(problems): every item appended to or listed in `problems`
            out: list[str] = []
            for item in self.list_items(scope, node.args[0].id):
                out += self.templates(item, scope, depth + 1)
            return out or [PLACEHOLDER]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"strip", "rstrip", "lstrip", "capitalize"}
        ):
            return self.templates(node.func.value, scope, depth + 1)
        if isinstance(node, ast.IfExp):
            return self.templates(node.body, scope, depth + 1) + self.templates(
                node.orelse, scope, depth + 1
            )
        if isinstance(node, ast.Name):
            if node.id in self.params(scope):
                return [PLACEHOLDER]
            values = self.assignments(scope, node.id)
            if not values and scope is not self.tree:
                values = self.assignments(self.tree, node.id)
            out: list[str] = []
            for value in values:
                out += self.templates(
                    value, scope if value in self._in(scope) else self.tree, depth + 1
                )
            return out or [PLACEHOLDER]
        return [PLACEHOLDER]

    def list_items(self, scope: ast.AST, name: str) -> list[ast.expr]:
        """Items of the list ``name`` in ``scope``: literal elements and ``.append()`` args."""
        items: list[ast.expr] = []
        for value in self.assignments(scope, name):
            if isinstance(value, ast.List):
                items += value.elts
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == name
                and node.args
            ):
                items.append(node.args[0])
        return items

    def _in(self, scope: ast.AST) -> set[ast.AST]:
        return set(ast.walk(scope))

    def uses_param(self, node: ast.expr, scope: ast.AST) -> int | None:
        """Index of the parameter of ``scope`` that ``node`` (a message) is made from, if any."""
        params = self.params(scope)
        seen = [node]
        for name_node in ast.walk(node):
            if isinstance(name_node, ast.Name):
                seen += self.assignments(scope, name_node.id)
        for expr in seen:
            for sub in ast.walk(expr):
                if isinstance(sub, ast.Name) and sub.id in params:
                    return params.index(sub.id)
        return None


def _message_arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if len(call.args) > index and not isinstance(call.args[index], ast.Starred):
        return call.args[index]
    return None


def python_messages(package: Path = PACKAGE) -> Iterator[tuple[str, str, str]]:
    """``(template, where, how)`` of every error message in the package's Python code."""
    modules = [_Module(p) for p in sorted(package.rglob("*.py"))]
    # error classes: CudaqError and its subclasses, by name, transitively
    bases: dict[str, set[str]] = {}
    for mod in modules:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    _dotted(b).rsplit(".", 1)[-1] for b in node.bases
                )
    # every exception class of the package: CudaqError's subclasses, and private ones such
    # as a CLI's usage error, which front doors print too
    errors = {ERROR_BASE} | {
        name for name, b in bases.items() if any(x.endswith(("Error", "Exception")) for x in b)
    }
    while True:
        more = {name for name, b in bases.items() if b & errors} - errors
        if not more:
            break
        errors |= more
    carriers: dict[str, tuple[int, str]] = dict(BASE_CARRIERS)
    carriers.update({name: (0, "message") for name in errors})

    def carrier_of(call: ast.Call) -> tuple[str, tuple[int, str]] | None:
        name = _dotted(call.func)
        if name in carriers:
            return name, carriers[name]
        last = name.rsplit(".", 1)[-1]
        if last in carriers and last != "error":  # self.report, errors.CudaqError, ...
            return last, carriers[last]
        return None

    calls = [(mod, [n for n in ast.walk(mod.tree) if isinstance(n, ast.Call)]) for mod in modules]

    def sites() -> Iterator[tuple[_Module, ast.Call, str, ast.expr]]:
        """Every call of a carrier (as known now) with its message argument."""
        for mod, mod_calls in calls:  # the calls, found once: sites() runs once a round
            for call in mod_calls:
                found = carrier_of(call)
                arg = None if found is None else _message_arg(call, *found[1])
                if found is not None and arg is not None:
                    yield mod, call, found[0], arg

    # functions that pass one of their parameters on as a message become carriers too
    changed = True
    while changed:
        changed = False
        for mod, call, _, arg in sites():
            scope = mod.scope_of(call)
            if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            index = mod.uses_param(arg, scope)
            if index is None or scope.name in carriers:
                continue
            params = mod.params(scope)
            if params[index] in {"self", "cls"}:
                continue
            is_method = params[0] in {"self", "cls"}
            carriers[scope.name] = (index - 1 if is_method else index, params[index])
            changed = True

    for mod, call, how, arg in sites():
        for template in mod.templates(arg, mod.scope_of(call)):
            yield template, f"{mod.rel}:{call.lineno}", how


_CMAKE_FATAL = re.compile(r"\bmessage\s*\(\s*FATAL_ERROR\b", re.I)


def _cmake_args(text: str, start: int) -> tuple[list[tuple[bool, str]], int]:
    """The arguments of a CMake command call from ``start`` (just past its first keyword):
    ``(quoted, text)`` pairs, and the index after the closing parenthesis."""
    args: list[tuple[bool, str]] = []
    i, depth = start, 1
    while i < len(text):
        c = text[i]
        if c == '"':
            j, buf = i + 1, []
            while j < len(text) and text[j] != '"':
                if text[j] == "\\" and j + 1 < len(text):
                    buf.append({"n": "\n", "t": "\t"}.get(text[j + 1], text[j + 1]))
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            args.append((True, "".join(buf)))
            i = j + 1
        elif c == "#":
            i = text.find("\n", i) if text.find("\n", i) != -1 else len(text)
        elif c == "(":
            depth += 1
            i += 1
        elif c == ")":
            depth -= 1
            i += 1
            if depth == 0:
                break
        elif c.isspace():
            i += 1
        else:
            m = re.compile(r"[^\s()\"#]+").match(text, i)
            assert m is not None
            args.append((False, m.group(0)))
            i = m.end()
    return args, i


def cmake_messages(directory: Path = CMAKE_DIR) -> Iterator[tuple[str, str, str]]:
    """``(template, where, how)`` of every ``message(FATAL_ERROR ...)`` in the CMake package."""
    if not directory.is_dir():
        return
    for path in sorted(directory.rglob("*.cmake")):
        text = path.read_text(encoding="utf-8")
        for m in _CMAKE_FATAL.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if text[line_start : m.start()].lstrip().startswith("#"):
                continue  # commented out
            args, _ = _cmake_args(text, m.end())
            template = ""
            for quoted, arg in args:
                if quoted:
                    template += re.sub(r"\$\{[^}]*\}|\$<[^>]*>", PLACEHOLDER, arg)
                else:
                    template += PLACEHOLDER
            line = text.count("\n", 0, m.start()) + 1
            yield template, f"{_rel(path)}:{line}", "message(FATAL_ERROR)"


def error_messages(
    package: Path = PACKAGE, cmake_dir: Path = CMAKE_DIR
) -> tuple[list[Message], list[Message]]:
    """(messages with a checkable fragment, messages that are all values), deduplicated."""
    by_fragment: dict[str, Message] = {}
    dynamic: dict[str, Message] = {}
    for template, where, how in [*python_messages(package), *cmake_messages(cmake_dir)]:
        frag = fragment_of(template)
        table = by_fragment if frag else dynamic
        key = frag or template
        message = table.setdefault(key, Message(template.replace(PLACEHOLDER, "{}"), frag))
        message.where.append(f"{where} ({how})")
    return list(by_fragment.values()), list(dynamic.values())


def _normal(text: str) -> str:
    return " ".join(text.split())


def missing_messages(page: Path = TROUBLESHOOTING) -> list[Message]:
    text = _normal(page.read_text(encoding="utf-8")) if page.is_file() else ""
    found, _ = error_messages()
    return [m for m in found if _normal(m.fragment) not in text]


def describe(messages: list[Message]) -> str:
    lines = []
    for m in sorted(messages, key=lambda m: m.where[0]):
        lines.append(f"  - {m.fragment!r}")
        lines.append(f"      message: {m.template!r}")
        lines += [f"      at {w}" for w in m.where]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``doc_messages.py [json]``: list every message and whether the page explains it."""
    found, dynamic = error_messages()
    missing = {m.fragment for m in missing_messages()}
    if len(argv) > 1 and argv[1] == "json":
        json.dump(
            [m.__dict__ | {"documented": m.fragment not in missing} for m in found],
            sys.stdout,
            indent=1,
        )
        return 0
    for m in sorted(found, key=lambda m: m.where[0]):
        mark = "MISSING " if m.fragment in missing else "ok      "
        print(f"{mark}{m.fragment!r}  <- {m.where[0]}")
    print(
        f"\n{len(found)} messages, {len(missing)} missing from {TROUBLESHOOTING_REL}; "
        f"{len(dynamic)} without constant text (not checked):"
    )
    for m in dynamic:
        print(f"  {m.template!r}  <- {m.where[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
