"""The documentation: it builds with warnings as errors, documents every public name, and explains
every error message the project can print.

Run ``python tests/test_docs.py messages`` to list every error message the code can print, with the
fragment ``docs/troubleshooting.md`` must contain and whether it does.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "skbuild_cudaq"
CMAKE_DIR = PACKAGE / "cmake"
TROUBLESHOOTING = DOCS / "troubleshooting.md"
REPORT = ROOT / "bench" / "report.py"


# ---------------------------------------------------------------------------------------------
# Error messages of the code
# ---------------------------------------------------------------------------------------------

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


_PLACEHOLDER = "\x00"


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
    for position, run in enumerate(template.split(_PLACEHOLDER)):
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
        found: list[ast.expr] = []
        for node in ast.walk(scope):
            if node is not scope and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if self.scope_of(node) is not scope and node is not scope:
                continue
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            ) or (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
                and node.value is not None
            ):
                found.append(node.value)
        return found

    def templates(self, node: ast.expr, scope: ast.AST, depth: int = 0) -> list[str]:
        """Every form the string expression ``node`` can take, values as placeholders."""
        if depth > 6:
            return [_PLACEHOLDER]
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            parts = [""]
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts = [p + value.value for p in parts]
                else:
                    parts = [p + _PLACEHOLDER for p in parts]
            return parts
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.templates(node.left, scope, depth + 1)
            right = self.templates(node.right, scope, depth + 1)
            return [a + b for a in left for b in right][:32]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return [
                re.sub(r"%[-#0 +]*[0-9.*]*[a-zA-Z%]", _PLACEHOLDER, t)
                for t in self.templates(node.left, scope, depth + 1)
            ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
        ):
            return [
                re.sub(r"\{[^{}]*\}", _PLACEHOLDER, t)
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
            return out or [_PLACEHOLDER]
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
                return [_PLACEHOLDER]
            values = self.assignments(scope, node.id)
            if not values and scope is not self.tree:
                values = self.assignments(self.tree, node.id)
            out: list[str] = []
            for value in values:
                out += self.templates(
                    value, scope if value in self._in(scope) else self.tree, depth + 1
                )
            return out or [_PLACEHOLDER]
        return [_PLACEHOLDER]

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

    # functions that pass one of their parameters on as a message become carriers too
    changed = True
    while changed:
        changed = False
        for mod in modules:
            for call in (n for n in ast.walk(mod.tree) if isinstance(n, ast.Call)):
                found = carrier_of(call)
                if found is None:
                    continue
                arg = _message_arg(call, *found[1])
                scope = mod.scope_of(call)
                if arg is None or not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
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

    for mod in modules:
        for call in (n for n in ast.walk(mod.tree) if isinstance(n, ast.Call)):
            found = carrier_of(call)
            if found is None:
                continue
            arg = _message_arg(call, *found[1])
            if arg is None:
                continue
            for template in mod.templates(arg, mod.scope_of(call)):
                yield template, f"{mod.rel}:{call.lineno}", found[0]


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
                    template += re.sub(r"\$\{[^}]*\}|\$<[^>]*>", _PLACEHOLDER, arg)
                else:
                    template += _PLACEHOLDER
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
        message = table.setdefault(key, Message(template.replace(_PLACEHOLDER, "{}"), frag))
        message.where.append(f"{where} ({how})")
    return list(by_fragment.values()), list(dynamic.values())


def _normal(text: str) -> str:
    return " ".join(text.split())


def missing_messages(page: Path = TROUBLESHOOTING) -> list[Message]:
    text = _normal(page.read_text(encoding="utf-8")) if page.is_file() else ""
    found, _ = error_messages()
    return [m for m in found if _normal(m.fragment) not in text]


def _describe(messages: list[Message]) -> str:
    lines = []
    for m in sorted(messages, key=lambda m: m.where[0]):
        lines.append(f"  - {m.fragment!r}")
        lines.append(f"      message: {m.template!r}")
        lines += [f"      at {w}" for w in m.where]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Tests of the extractor itself
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "fragment"),
    [
        ("nvcc not found: it compiles the kernels. Set X", "nvcc not found"),
        (f"cannot read {_PLACEHOLDER}: {_PLACEHOLDER}", "cannot read"),
        (
            f"{_PLACEHOLDER} is an absolute path; expected a .cu path {_PLACEHOLDER}",
            "is an absolute path",
        ),
        (
            f'{_PLACEHOLDER}: target "{_PLACEHOLDER}" is IMPORTED; use a target',
            "is IMPORTED; use a target",
        ),
        (f"{_PLACEHOLDER}: {_PLACEHOLDER}", ""),
        (f"{_PLACEHOLDER} is {_PLACEHOLDER}; expected {_PLACEHOLDER}", ""),
        (f"block={_PLACEHOLDER}: 1..1024 threads", ""),
        (
            f'{_PLACEHOLDER}: source file "{_PLACEHOLDER}" does not exist '
            f"(looked for {_PLACEHOLDER})",
            "does not exist (looked for",
        ),
    ],
)
def test_fragment_of(template: str, fragment: str) -> None:
    assert fragment_of(template) == fragment


def test_extractor_finds_every_kind_of_site(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "errors.py").write_text(
        "class CudaqError(Exception): ...\n"
        "class LinkError(CudaqError): ...\n"
        "class DeepError(LinkError): ...\n"
        "class Unrelated: ...\n"
        "class _UsageError(ValueError): ...\n",
        encoding="utf-8",
    )
    (pkg / "code.py").write_text(
        "from . import _log\n"
        "from .errors import DeepError, LinkError, Unrelated\n"
        "TOP = 'module level constant message'\n"
        "def f(x):\n"
        "    msg = f'{x} direct f-string message'\n"
        "    raise LinkError(msg) from None\n"
        "def g(x):\n"
        "    raise DeepError('plain ' + 'concatenated message %s' % x)\n"
        "def h(x):\n"
        "    raise Unrelated('never a documented message')\n"
        "def wrap(what, code):\n"
        "    return LinkError(f'{what}: {code}')\n"
        "def i():\n"
        "    raise wrap('wrapped call message', 3)\n"
        "def j(ok):\n"
        "    _log.error('first branch message' if ok else TOP)\n"
        "def k(report):\n"
        "    report(('a',), 'reported settings problem', 'fix it')\n"
        "def m(keys):\n"
        "    problems = ['listed problem message']\n"
        "    for key in keys:\n"
        "        problems.append(f'unknown setting name {key!r}; x'.rstrip())\n"
        "    raise _UsageError('\\n'.join(problems))\n",
        encoding="utf-8",
    )
    found = {fragment_of(t) for t, _, _ in python_messages(pkg)}
    assert {
        "direct f-string message",
        "plain concatenated message",
        "wrapped call message",
        "first branch message",
        "module level constant message",
        "reported settings problem",
        "listed problem message",
        "unknown setting name",
    } <= found
    assert "never a documented message" not in found

    cmake = tmp_path / "cmake"
    cmake.mkdir()
    (cmake / "x.cmake").write_text(
        'if(NOT X)\n  message(FATAL_ERROR "${where}: no source files given; pass one."\n'
        '    " more (${n})")\nendif()\n# message(FATAL_ERROR "commented out message")\n'
        'message(STATUS "not an error message")\n',
        encoding="utf-8",
    )
    cm = [(fragment_of(t), w) for t, w, _ in cmake_messages(cmake)]
    assert [f for f, _ in cm] == ["no source files given"]
    assert cm[0][1].endswith("x.cmake:2")


# ---------------------------------------------------------------------------------------------
# The docs
# ---------------------------------------------------------------------------------------------


def test_every_error_message_is_in_troubleshooting() -> None:
    found, _ = error_messages()
    assert found, "the extractor found no error messages at all: it is broken"
    missing = missing_messages()
    assert not missing, (
        f"{len(missing)} error message(s) the code can print are not explained in "
        f"docs/troubleshooting.md. Add each fragment below (verbatim) with its cause and fix:\n"
        + _describe(missing)
    )


@pytest.fixture(scope="session")
def built_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, PYTHONWARNINGS="ignore")  # Sphinx's own deprecations are not ours
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-n",  # nitpicky: every cross-reference must resolve
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(out / ".doctrees"),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"sphinx -n -W failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_docs_build_nitpicky_with_warnings_as_errors(built_docs: Path) -> None:
    for page in (
        "index",
        "getting-started",
        "troubleshooting",
        "performance",
        "reference/python",
        "reference/cmake",
        "reference/tool-cudaq",
        "reference/device-header",
        "guides/index",
    ):
        assert (built_docs / f"{page}.html").is_file(), page


def _inventory(built: Path) -> set[str]:
    """Names of every Python object the built docs describe (from objects.inv)."""
    data = (built / "objects.inv").read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    names = set()
    for line in zlib.decompress(data[header_end:]).decode().splitlines():
        m = re.match(r"(\S+)\s+(py:\w+)\s", line)
        if m:
            names.add(m.group(1))
    return names


def public_modules() -> list[str]:
    """``skbuild_cudaq`` and every module of it with no ``_``-prefixed part."""
    names = ["skbuild_cudaq"]
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="skbuild_cudaq."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(n for n in names if n != "skbuild_cudaq.cmake")


def test_every_public_name_is_in_the_reference(built_docs: Path) -> None:
    documented = _inventory(built_docs)
    missing = []
    for module_name in public_modules():
        module = importlib.import_module(module_name)
        if f"{module_name}" not in documented:
            missing.append(f"module {module_name}")
        for name in getattr(module, "__all__", []):
            candidates = {f"{module_name}.{name}"}
            try:
                value = getattr(module, name)
            except (AttributeError, ImportError) as exc:
                missing.append(f"{module_name}.{name} (cannot be imported: {exc})")
                continue
            home, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
            if isinstance(home, str) and isinstance(qual, str):
                candidates.add(f"{home}.{qual}")
            # a package that re-exports the name documents it under its own name
            parts = module_name.split(".")
            for depth in range(1, len(parts)):
                parent = importlib.import_module(".".join(parts[:depth]))
                if name in getattr(parent, "__all__", []) and getattr(parent, name) is value:
                    candidates.add(f"{parent.__name__}.{name}")
            if not candidates & documented:
                missing.append(f"{module_name}.{name}")
    assert not missing, "not in the built API reference:\n  " + "\n  ".join(missing)


def test_cmake_reference_is_extracted(built_docs: Path) -> None:
    html = (built_docs / "reference" / "cmake.html").read_text(encoding="utf-8")
    cmake_files = sorted(CMAKE_DIR.glob("*.cmake")) if CMAKE_DIR.is_dir() else []
    if not cmake_files:  # before the CMake package exists the page says so
        assert "not part of this checkout yet" in html
        return
    assert "not part of this checkout yet" not in html
    rst = re.compile(r"^#\[(=*)\[\.rst:[ \t]*\n(.*?)^#\]\1\]", re.M | re.S)
    blocks = [m.group(2) for p in cmake_files for m in rst.finditer(p.read_text("utf-8"))]
    assert blocks, "skbuild_cudaq/cmake/*.cmake exist but carry no reST documentation blocks"
    commands = {c for b in blocks for c in re.findall(r"^\.\. command:: (\w+)", b, re.M)}
    assert "cudaq_realtime_add_dispatch_kernel" in commands
    for command in sorted(commands):
        assert f'id="command-{command}"' in html, f"{command} is not described on the page"
    for block in blocks:  # every block's first paragraph line made it onto the page
        first = next(line for line in block.splitlines() if line.strip() and line[0].isalpha())
        assert first.split()[0] in html


def test_device_header_is_included(built_docs: Path) -> None:
    html = (built_docs / "reference" / "device-header.html").read_text(encoding="utf-8")
    assert "cudaq_dev_enter_kernel" in html and "CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION" in html


# ---------------------------------------------------------------------------------------------
# python tests/test_docs.py messages
# ---------------------------------------------------------------------------------------------

if __name__ == "__main__":
    found, dynamic = error_messages()
    missing = {m.fragment for m in missing_messages()}
    if len(sys.argv) > 1 and sys.argv[1] == "json":
        json.dump(
            [m.__dict__ | {"documented": m.fragment not in missing} for m in found],
            sys.stdout,
            indent=1,
        )
        sys.exit(0)
    for m in sorted(found, key=lambda m: m.where[0]):
        mark = "MISSING " if m.fragment in missing else "ok      "
        print(f"{mark}{m.fragment!r}  <- {m.where[0]}")
    print(
        f"\n{len(found)} messages, {len(missing)} missing from docs/troubleshooting.md; "
        f"{len(dynamic)} without constant text (not checked):"
    )
    for m in dynamic:
        print(f"  {m.template!r}  <- {m.where[0]}")


# ---------------------------------------------------------------------------------------------
# bench/report.py: the performance page
# ---------------------------------------------------------------------------------------------


def _report(results: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    figures = out.parent / "_static" / "perf"
    return subprocess.run(
        [
            sys.executable,
            str(REPORT),
            "--results",
            str(results),
            "--out",
            str(out),
            "--figures",
            str(figures),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def test_report_says_not_measured_without_results(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "performance.md"
    _report(tmp_path / "no-results", out)
    page = out.read_text(encoding="utf-8")
    for name in ("dispatch", "startup", "build_overhead"):
        assert f"Not measured yet: no `{name}` results file" in page
    assert "![" not in page
    assert not (tmp_path / "docs" / "_static").exists()


def test_report_tables_and_figures_come_from_the_json(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # distinctive inputs; the page must carry exactly these, with where they were measured
    (results / "dispatch.json").write_text(
        json.dumps(
            {
                "benchmark": "dispatch",
                "date": "2031-02-03T04:05:06+00:00",
                "device": "GPU-X17",
                "compute_capability": "9.0",
                "versions": {
                    "cuda-bindings": "13.3.7",
                    "nvidia_driver": "580.99",
                    "cuda_driver_api": "13.0",
                },
                "latency_us": {
                    "pingpong_floor": {
                        "p50": 3.217,
                        "p99": 3.9,
                        "p99.9": 4.4,
                        "min": 3.0,
                        "mean": 3.3,
                        "n": 777,
                    },
                    "single_thread": {
                        "p50": 6.434,
                        "p99": 7.1,
                        "p99.9": 8.8,
                        "min": 6.0,
                        "mean": 6.5,
                        "n": 777,
                    },
                },
                "throughput_mrps": {"warp_parallel": {"1": 0.123, "64": 4.567}},
                "errors": {"cluster": "InvalidArgumentError: needs sm_90"},
            }
        ),
        encoding="utf-8",
    )
    (results / "old-dispatch.json").write_text(
        json.dumps(
            {
                "benchmark": "dispatch",
                "date": "2020-01-01T00:00:00+00:00",
                "device": "OLD-GPU",
                "latency_us": {"pingpong_floor": {"p50": 99.0}},
            }
        ),
        encoding="utf-8",
    )
    (results / "startup.json").write_text(
        json.dumps(
            {
                "benchmark": "startup",
                "date": "2031-02-04T00:00:00+00:00",
                "device": {"name": "GPU-X17", "arch": "sm_90", "sms": 132},
                "driver": {"nvidia": "580.99", "cuda_driver_api": "13.0"},
                "versions": {"nvJitLink": "13.0"},
                "results": {
                    "floor": {
                        "runs": 7,
                        "ok": 7,
                        "median_in_process_s": 0.0812,
                        "in_process_s": [0.0812, 0.0815],
                    },
                    "warm": {
                        "runs": 7,
                        "ok": 7,
                        "median_in_process_s": 0.0833,
                        "ratio_to_floor": 1.026,
                        "in_process_s": [0.0833],
                    },
                },
            }
        ),
        encoding="utf-8",
    )
    (results / "smoke.json").write_text('{"p50_us": 5.15}', encoding="utf-8")
    (results / "broken.json").write_text("{", encoding="utf-8")
    out = tmp_path / "docs" / "performance.md"
    _report(results, out)
    page = out.read_text(encoding="utf-8")

    assert "GPU-X17" in page and "580.99" in page and "2031-02-03T04:05:06+00:00" in page
    assert "cuda-bindings 13.3.7" in page
    assert "| 3.22 |" in page and "| 6.43 |" in page and "| 777 |" in page
    assert "2.00×" in page  # 6.434 / 3.217
    assert "4.567" in page and "81.2" in page and "1.03" in page
    assert "InvalidArgumentError: needs sm_90" in page
    assert "OLD-GPU" not in page and "old-dispatch.json" in page  # superseded, named
    assert "Not measured yet: no `build_overhead` results file" in page
    assert "does not state its device, date, versions" in page  # smoke.json
    assert "broken.json" in page
    figures = sorted(p.name for p in (tmp_path / "docs" / "_static" / "perf").iterdir())
    assert figures == ["dispatch_latency.png", "dispatch_throughput.png", "startup.png"]
    for name in figures:
        assert f"](_static/perf/{name})" in page
        assert (tmp_path / "docs" / "_static" / "perf" / name).read_bytes()[:8] == (
            b"\x89PNG\r\n\x1a\n"
        )


def test_committed_performance_page_is_fresh(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "performance.md"
    _report(ROOT / "bench" / "results", out, "--no-figures")
    committed = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert committed == out.read_text(encoding="utf-8"), (
        "docs/performance.md is stale: run python bench/report.py"
    )
    for png in re.findall(r"\]\((_static/perf/[^)]+\.png)\)", committed):
        assert (DOCS / png).is_file(), f"{png} is referenced but not committed"
