"""The package's shape, pinned: a small run-time API that loads nothing of CUDA at import,
layers that import only downwards, no import circle, and rooms of a readable size (the map in
DEVELOPING.md says the same in words).

The import graph is read from the sources (every ``import``, function-level ones included), so
a lazy import cannot hide a dependency; the import checks run in fresh interpreters.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import skbuild_cudaq.realtime as rt

PACKAGE = Path(__file__).resolve().parent.parent / "skbuild_cudaq"

#: At most this many names in ``skbuild_cudaq.realtime.__all__``: the verbs and value objects an
#: application uses and the errors it catches (cuda.core exports ~25).
MAX_EXPORTS = 35


# ---------------------------------------------------------------------------------------------
# The run-time API
# ---------------------------------------------------------------------------------------------
def test_the_run_time_exports_at_most_35_names_each_of_them_real() -> None:
    assert len(rt.__all__) <= MAX_EXPORTS, sorted(rt.__all__)
    assert len(set(rt.__all__)) == len(rt.__all__)
    assert rt.__all__ == sorted(rt.__all__, key=lambda n: (n[0].islower(), n))
    for name in rt.__all__:
        value = getattr(rt, name)
        assert getattr(value, "__module__", "").startswith("skbuild_cudaq."), name
    with pytest.raises(AttributeError, match="no attribute 'link_with_options'"):
        _ = rt.link_with_options


def test_the_import_block_for_type_checkers_is_what_loads_at_run_time() -> None:
    """The ``TYPE_CHECKING`` block (plain ``from .x import A, B``) names exactly what ``_FROM``
    loads on first use, and ``__all__`` lists exactly those names."""
    source = Path(rt.__file__).read_text(encoding="utf-8")
    typed: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.level == 1, ast.dump(stmt)
                assert stmt.module is not None
                assert all(alias.asname is None for alias in stmt.names)
                typed[stmt.module] = tuple(alias.name for alias in stmt.names)
    assert typed == rt._FROM
    assert set(rt.__all__) == {name for names in typed.values() for name in names}


def _fresh(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    loaded: list[str] = json.loads(out.stdout.splitlines()[-1])
    return loaded


_LOADED = (
    "import json, sys\n{body}\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('cuda', 'numpy', 'elftools', 'setuptools', 'scikit_build_core', 'tomllib', 'tomli') "
    "or m.startswith(('skbuild_cudaq.settings', 'skbuild_cudaq.build', "
    "'skbuild_cudaq.setuptools', 'skbuild_cudaq._compat')))))"
)


def test_importing_the_run_time_loads_no_cuda_and_no_build_code() -> None:
    body = "import skbuild_cudaq.realtime as rt\nfor name in rt.__all__: getattr(rt, name)"
    assert _fresh(_LOADED.format(body=body)) == []


def test_importing_every_run_time_module_loads_no_cuda_and_no_settings_code() -> None:
    body = (
        "import importlib, pkgutil, skbuild_cudaq.realtime as rt\n"
        "for info in pkgutil.walk_packages(rt.__path__, 'skbuild_cudaq.realtime.'):\n"
        "    if info.name.rsplit('.', 1)[1] not in ('_child', '__main__'):\n"
        "        importlib.import_module(info.name)"
    )
    assert _fresh(_LOADED.format(body=body)) == []


# ---------------------------------------------------------------------------------------------
# Layers, from the sources
# ---------------------------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@functools.cache
def _imports() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Per module of the package: what it imports at module level, and anywhere."""
    top: dict[str, set[str]] = {}
    anywhere: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top[name], anywhere[name] = set(), set()
        module_level = {id(n) for n in tree.body} | {
            id(n) for stmt in tree.body if isinstance(stmt, ast.If) for n in stmt.body
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # "from pkg import sub": the module pkg.sub (pkg itself only runs its
                # __init__, see _reach); "from mod import name": mod
                targets = [f"{base}.{alias.name}" for alias in node.names]
                if not all(_is_module(t) for t in targets):
                    targets.append(base)
            else:
                continue
            anywhere[name].update(targets)
            if id(node) in module_level:
                top[name].update(targets)
    return top, anywhere


def _reach(start: str) -> set[str]:
    """Every module importing ``start`` can load: a module an import names with all its own
    imports (any of them may run once it is used), the packages above it with their
    module-level imports (``__init__`` runs on import; its functions need not be called)."""
    top, anywhere = _imports()
    used: set[str] = set()
    loaded: set[str] = set()
    todo = [(start, True)]
    while todo:
        name, is_used = todo.pop()
        if (name in used) if is_used else (name in loaded):
            continue
        loaded.add(name)
        if is_used:
            used.add(name)
        for target in (anywhere if is_used else top).get(name, ()):
            parts = target.split(".")
            todo += [(".".join(parts[:depth]), False) for depth in range(1, len(parts))]
            todo.append((target, True))
    return loaded


def _modules(prefix: str) -> list[str]:
    top, _ = _imports()
    return [m for m in top if m == prefix or m.startswith(prefix + ".")]


def _offending(starts: list[str], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad = {}
    for start in starts:
        hits = sorted(
            m for m in _reach(start) if any(m == f or m.startswith(f + ".") for f in forbidden)
        )
        if hits:
            bad[start] = hits
    return bad


def test_settings_import_nothing_of_the_build_backend_or_the_run_time() -> None:
    forbidden = (
        "skbuild_cudaq.build",
        "skbuild_cudaq.setuptools",
        "skbuild_cudaq.realtime",
        "skbuild_cudaq.cli",
        "cuda",
    )
    assert _offending(_modules("skbuild_cudaq.settings"), forbidden) == {}


def test_the_run_time_imports_no_settings_no_build_and_no_cli_code() -> None:
    forbidden = (
        "skbuild_cudaq.settings",
        "skbuild_cudaq.build",
        "skbuild_cudaq._compat",
        "skbuild_cudaq.setuptools",
        "skbuild_cudaq.cli",
        "scikit_build_core",
        "setuptools",
        "tomllib",
        "tomli",
    )
    assert _offending(_modules("skbuild_cudaq.realtime"), forbidden) == {}


def test_build_side_code_imports_no_cuda_and_no_run_time() -> None:
    build_side = [
        *_modules("skbuild_cudaq.build"),
        *_modules("skbuild_cudaq.settings"),
        *_modules("skbuild_cudaq.setuptools"),
        *_modules("skbuild_cudaq.cmake"),
        "skbuild_cudaq._architectures",
        "skbuild_cudaq._records",
        "skbuild_cudaq._log",
        "skbuild_cudaq._paths",
        "skbuild_cudaq.errors",
        "skbuild_cudaq.fatbin",
        "skbuild_cudaq.schema",
    ]
    assert _offending(build_side, ("cuda", "skbuild_cudaq.realtime", "skbuild_cudaq.cli")) == {}


def test_the_setuptools_hook_stays_cheap_for_projects_that_are_not_ours() -> None:
    """``finalize_distribution_options`` runs in every setuptools build: its module loads
    neither the command nor the build side nor setuptools until a project declares
    ``[tool.cudaq]``."""
    body = "import skbuild_cudaq.setuptools.hook"
    loaded = _fresh(_LOADED.format(body=body))
    assert loaded == ["skbuild_cudaq.setuptools", "skbuild_cudaq.setuptools.hook"]


# ---------------------------------------------------------------------------------------------
# No circle; the ground; the size of the rooms
# ---------------------------------------------------------------------------------------------
def _import_edges() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in it (function level and
    ``TYPE_CHECKING`` blocks included), with the packages above each (their ``__init__``
    runs) except the importer's own ancestors, which are already running."""
    _, anywhere = _imports()
    edges: dict[str, set[str]] = {}
    for name, targets in anywhere.items():
        edges[name] = set()
        for target in targets:
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                module = ".".join(parts[:depth])
                if module in anywhere and module != name and not name.startswith(module + "."):
                    edges[name].add(module)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_anywhere_in_the_package() -> None:
    assert _circles(_import_edges()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_the_errors_are_the_ground() -> None:
    """``skbuild_cudaq.errors`` imports nothing of ours; the run time's errors only it."""
    edges = _import_edges()
    assert edges["skbuild_cudaq.errors"] == set()
    assert edges["skbuild_cudaq.realtime.errors"] == {"skbuild_cudaq.errors"}


def test_settings_import_only_the_neutral_ground() -> None:
    """Below the settings: the architecture grammar, the paths, the errors, the TOML shim."""
    allowed = (
        "skbuild_cudaq.settings",
        "skbuild_cudaq._architectures",
        "skbuild_cudaq._paths",
        "skbuild_cudaq._compat",
        "skbuild_cudaq.errors",
        "skbuild_cudaq",
    )
    reached = {m for start in _modules("skbuild_cudaq.settings") for m in _reach(start)}
    ours = {m for m in reached if m.startswith("skbuild_cudaq")}
    assert {m for m in ours if not any(m == a or m.startswith(a + ".") for a in allowed)} == set()


#: Modules (files and subpackages' ``__init__`` aside) at the top of ``realtime/``.
MAX_RUN_TIME_TOP_MODULES = 12
#: Lines of one Python, C or CUDA source of the package.
MAX_SOURCE_LINES = 800


def test_the_run_time_has_at_most_12_modules_at_its_top() -> None:
    top = sorted(
        p.name
        for p in (PACKAGE / "realtime").iterdir()
        if p.suffix in (".py", ".c") and p.name != "__init__.py"
    )
    assert len(top) <= MAX_RUN_TIME_TOP_MODULES, top


def test_no_source_file_of_the_package_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sorted(PACKAGE.rglob("*"))
        if p.suffix in (".py", ".c", ".h", ".cu", ".cuh")
        and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_SOURCE_LINES
    }
    assert long == {}


def _map_of_the_house() -> str:
    text = (PACKAGE.parent / "DEVELOPING.md").read_text(encoding="utf-8")
    section = text.split("## The map of the house", 1)[1].split("\n## ", 1)[0]
    return "\n".join(section.split("```text")[2].split("```")[0].splitlines())


def test_the_map_in_developing_names_every_room_and_only_rooms_that_exist() -> None:
    """DEVELOPING.md's map of ``skbuild_cudaq/`` lists every package (a folder with an
    ``__init__.py``) and every module at the top of ``realtime/``, and names nothing that is
    not there."""
    drawn = _map_of_the_house()
    packages = {
        p.parent.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("__init__.py")
        if p.parent != PACKAGE and "_compat" not in p.parts
    }
    for package in sorted(packages):
        assert f"{package.rsplit('/', 1)[-1]}/" in drawn, f"{package}/ is not on the map"
    for name in re.findall(r"(?m)^\s+([a-z_]+)/", drawn):
        assert any(p.endswith(name) for p in packages) or name in (
            "skbuild_cudaq",
            "include",
            "device",
        ), name
    top = [p.stem for p in (PACKAGE / "realtime").glob("*.py") if p.name != "__init__.py"]
    for stem in top:
        assert re.search(rf"\b{stem}(\.py)?\b", drawn), f"realtime/{stem}.py is not on the map"
