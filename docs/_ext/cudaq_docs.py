"""Sphinx extension of the skbuild-cudaq docs.

- ``cmake-reference``: the reST blocks (``#[==[.rst: ... #]==]``) of the CMake
  package's ``*.cmake`` files, with ``.. command::`` / ``.. variable::``
  directives and ``:command:`` / ``:variable:`` roles (the CMake docs' own markup).
- ``python-api``: ``automodule`` of a module and of each public submodule; names
  a package re-exports are documented once, under the package.
- ``optional-toctree``: a toctree that lists only the entries that exist (pages
  other branches add land on their own schedule).
- ``example-file``: ``literalinclude`` of a file of the repository, or a note
  when the file is not in this checkout.
- Python cross-references the ``py`` domain cannot resolve on its own (names in
  type hints, re-exported names, the standard library) are resolved when they
  name an object that exists (see :func:`_resolve_python`); the docs build
  nitpicky, so a reference to nothing still fails the build.

Nothing here imports ``cuda.*``; autodoc imports modules, which never touch CUDA
at import.
"""

from __future__ import annotations

import builtins
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude
from sphinx.directives.other import TocTree
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
CMAKE_DIR = ROOT / "skbuild_cudaq" / "cmake"

#: ``#[==[.rst:`` ... ``#]==]`` (any number of ``=``, matching closer), at line starts.
RST_BLOCK = re.compile(r"^#\[(?P<eq>=*)\[\.rst:[ \t]*\n(?P<body>.*?)^#\](?P=eq)\]", re.M | re.S)


def cmake_files() -> list[Path]:
    """The CMake package's ``*.cmake`` files, sorted (the main config first)."""
    if not CMAKE_DIR.is_dir():
        return []
    files = sorted(CMAKE_DIR.glob("*.cmake"))
    return sorted(files, key=lambda p: (not p.name.endswith("Config.cmake"), p.name))


def cmake_rst_blocks(path: Path) -> list[str]:
    """The reST documentation blocks of one ``.cmake`` file."""
    return [m.group("body") for m in RST_BLOCK.finditer(path.read_text(encoding="utf-8"))]


class CMakeReference(SphinxDirective):
    """Every reST block of every ``skbuild_cudaq/cmake/*.cmake`` file, in order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        _note_volatile(self.env)
        files = [(p, cmake_rst_blocks(p)) for p in cmake_files()]
        files = [(p, blocks) for p, blocks in files if blocks]
        if not files:
            para = nodes.paragraph(
                text="The CMake package (skbuild_cudaq/cmake/*.cmake) is not part of this "
                "checkout yet; its reference is extracted from the files when they are."
            )
            return [para]
        lines = StringList()
        for path, blocks in files:
            self.env.note_dependency(str(path))
            rel = path.relative_to(ROOT).as_posix()
            for block in blocks:
                for number, line in enumerate(block.splitlines(), 1):
                    lines.append(line, rel, number)
                lines.append("", rel, 0)
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(lines, 0, container, match_titles=True)
        return list(container.children)


def public_modules(package: str) -> list[str]:
    """``package`` and its public submodules (no ``_`` in any component), recursively."""
    mod = importlib.import_module(package)
    names = [package]
    for info in pkgutil.iter_modules(getattr(mod, "__path__", []), prefix=package + "."):
        last = info.name.rsplit(".", 1)[1]
        if last.startswith("_"):
            continue
        if info.ispkg:
            names += public_modules(info.name)
        else:
            names.append(info.name)
    return names


class PythonApi(SphinxDirective):
    """``automodule`` of a module and its public submodules, each under its own heading.

    Options: ``:exclude:`` module names to leave out (space separated);
    ``:no-submodules:``. Names re-exported by a package in its ``__all__`` are
    documented under the package and left out of the submodule.
    """

    required_arguments = 1
    option_spec = {  # noqa: RUF012 (docutils API)
        "exclude": directives.unchanged,
        "no-submodules": directives.flag,
    }

    def run(self) -> list[nodes.Node]:
        _note_volatile(self.env)
        package = self.arguments[0]
        exclude = set((self.options.get("exclude") or "").split())
        if "no-submodules" in self.options:
            modules = [package]
        else:
            modules = [
                m
                for m in public_modules(package)
                if not any(m == x or m.startswith(x + ".") for x in exclude)
            ]
        # module -> {name: package}: names a package re-exports, documented under the package
        documented: dict[str, dict[str, str]] = {}
        lines = StringList()
        src = self.get_source_info()[0]
        for name in modules:
            mod = importlib.import_module(name)
            # names an outer package already documents (a subpackage re-exporting them too)
            earlier: dict[str, str] = {}
            for value_name in getattr(mod, "__all__", []):
                try:
                    value = getattr(mod, value_name)
                except (AttributeError, ImportError):
                    continue  # autodoc reports it
                home = getattr(value, "__module__", None)
                if isinstance(home, str) and home != name:
                    first = documented.setdefault(home, {}).setdefault(value_name, name)
                    if first != name:
                        earlier[value_name] = first
            skip = {**documented.get(name, {}), **earlier}
            rst = [f".. automodule:: {name}", "   :members:", "   :undoc-members:"]
            if hasattr(mod, "__all__"):
                # __all__ decides; autodoc would otherwise drop constants (their __module__
                # is "builtins") and names a module re-exports on purpose
                rst.append("   :imported-members:")
            if skip:
                rst.append(f"   :exclude-members: {', '.join(sorted(skip))}")
                rst += [
                    "",
                    "Also defined here and documented under the package that re-exports them: "
                    + ", ".join(f":py:obj:`~{skip[n]}.{n}`" for n in sorted(skip))
                    + ".",
                ]
            for data_name, value in _undocumented_data(mod).items():
                rst += ["", f".. py:data:: {data_name}", f"   :value: {_short_repr(value)}"]
            block = [f"## `{name}`", "", "```{eval-rst}", *rst, "```", ""]
            for line in block:
                lines.append(line, src, 0)
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(lines, 0, container, match_titles=True)
        return list(container.children)


def _undocumented_data(mod: Any) -> dict[str, Any]:
    """Constants in ``mod.__all__`` without a ``#:`` doc comment or docstring of their own.

    autodoc (Sphinx 9) leaves these out even with ``:undoc-members:``; they are
    public all the same, so the page lists them with their values.
    """
    import inspect

    from sphinx.pycode import ModuleAnalyzer

    try:
        attr_docs = ModuleAnalyzer.for_module(mod.__name__).find_attr_docs()
    except Exception:
        attr_docs = {}
    documented = {name for (_, name) in attr_docs}
    out: dict[str, Any] = {}
    for name in getattr(mod, "__all__", []):
        try:
            value = getattr(mod, name)
        except (AttributeError, ImportError):
            continue
        if name in documented or inspect.isclass(value) or inspect.isroutine(value):
            continue
        if not inspect.ismodule(value):
            out[name] = value
    return out


def _short_repr(value: Any) -> str:
    text = hex(value) if isinstance(value, int) and value > 0xFFFF else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def _packages_of(module: str, modules: list[str]) -> list[str]:
    parents = [m for m in modules if module.startswith(m + ".")]
    return parents[-1:] or [module]


def _note_volatile(env: Any) -> None:
    """Re-read the current document on every build: what it shows depends on other files."""
    volatile: set[str] = env.__dict__.setdefault("cudaq_volatile_docs", set())
    volatile.add(env.docname)


def _outdated(
    app: Sphinx, env: Any, added: set[str], changed: set[str], removed: set[str]
) -> list[str]:
    volatile: set[str] = env.__dict__.get("cudaq_volatile_docs", set())
    return sorted(volatile & set(env.found_docs))


def _purge(app: Sphinx, env: Any, docname: str) -> None:
    env.__dict__.get("cudaq_volatile_docs", set()).discard(docname)


def _merge(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    mine: set[str] = env.__dict__.setdefault("cudaq_volatile_docs", set())
    mine |= other.__dict__.get("cudaq_volatile_docs", set()) & docnames


class OptionalTocTree(TocTree):
    """A toctree that silently leaves out entries whose document does not exist (yet)."""

    def run(self) -> list[nodes.Node]:
        _note_volatile(self.env)
        kept = []
        for line in self.content:
            entry = line.strip()
            target = entry.rsplit("<", 1)[-1].rstrip(">").strip() if entry.endswith(">") else entry
            if not target:
                continue
            docname = self.env.relfn2path(target, self.env.docname)[1]
            if any(Path(docname + ext).is_file() for ext in (".md", ".rst")):
                kept.append(line)
        self.content = StringList(kept, self.content.parent)
        return super().run()


class ExampleFile(LiteralInclude):
    """``literalinclude`` of a repository file; a note instead when it is absent."""

    def run(self) -> list[nodes.Node]:
        _note_volatile(self.env)
        path = Path(self.env.relfn2path(self.arguments[0], self.env.docname)[1])
        if not path.is_file():
            para = nodes.paragraph()
            para += nodes.Text("(")
            para += nodes.literal(text=self.arguments[0].lstrip("/"))
            para += nodes.Text(" is not part of this checkout yet.)")
            return [para]
        return super().run()


class OptionalInclude(SphinxDirective):
    """MyST ``{include}`` of a repository Markdown file; a note when it is absent.

    Links relative to the included file keep working (``relative-docs`` and
    ``relative-images``).
    """

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        _note_volatile(self.env)
        path = self.env.relfn2path(self.arguments[0], self.env.docname)[1]
        if not Path(path).is_file():
            para = nodes.paragraph()
            para += nodes.Text("(")
            para += nodes.literal(text=self.arguments[0].lstrip("/"))
            para += nodes.Text(" is not part of this checkout yet.)")
            return [para]
        self.env.note_dependency(path)
        src = self.get_source_info()[0]
        base = str(Path(self.arguments[0]).parent)
        block = [
            f"```{{include}} {self.arguments[0]}",
            f":relative-docs: {base}/",
            ":relative-images:",
            "```",
        ]
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(block, src), 0, container, match_titles=True)
        return list(container.children)


class CliHelp(SphinxDirective):
    """The ``--help`` of ``python -m skbuild_cudaq`` and of each of its sub-commands."""

    def run(self) -> list[nodes.Node]:
        import argparse
        import os

        from skbuild_cudaq.cli import _build_parser

        os.environ["COLUMNS"] = "100"  # stable wrapping
        parser = _build_parser()
        out: list[nodes.Node] = [_literal(parser.format_help())]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    section = nodes.section(ids=[f"cli-{name}"])
                    section += nodes.title(text=f"{name}")
                    section += _literal(sub.format_help())
                    out.append(section)
        return out


def _literal(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = "text"
    return block


PYTHON_DOCS = "https://docs.python.org/3/library/"
#: Where the docs describe names the package re-exports (``python-api`` documents them there).
_DOCUMENTED_HOMES = ("skbuild_cudaq.realtime", "skbuild_cudaq")


def _lookup(dotted: str) -> tuple[bool, Any]:
    """``(found, object)`` for a dotted name: the longest importable module prefix, then
    attributes. Imports only modules of this package, setuptools and the standard library."""
    import importlib
    import sys

    parts = dotted.split(".")
    if parts[0] not in {"skbuild_cudaq", "setuptools"} and parts[0] not in sys.stdlib_module_names:
        return False, None
    for end in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        try:
            for attr in parts[end:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False, None
        return True, obj
    return False, None


def _loaded_homes(name: str) -> list[str]:
    """Where a bare ``name`` comes from: ``module.name`` of the first group -- this package's
    modules, then setuptools', then the standard library's (public modules only, for those
    two) -- whose loaded modules have an attribute ``name``, when it is the same object in all
    of them. Empty when no group has it or a group disagrees (``zipfile.Path`` is not
    ``pathlib.Path``)."""
    import sys

    groups: dict[str, list[tuple[str, Any]]] = {"ours": [], "setuptools": [], "stdlib": []}
    for module_name, module in list(sys.modules.items()):
        parts = module_name.split(".")
        if parts[0] == "skbuild_cudaq":
            group = "ours"
        elif any(part.startswith("_") for part in parts):
            continue
        elif parts[0] == "setuptools":
            group = "setuptools"
        elif parts[0] in sys.stdlib_module_names:
            group = "stdlib"
        else:
            continue
        value = getattr(module, name, None)
        if value is not None and not isinstance(value, type(sys)):
            groups[group].append((f"{module_name}.{name}", value))
    for hits in groups.values():
        if hits:
            same = all(value is hits[0][1] for _, value in hits)
            return [hits[0][0]] if same else []
    return []


def _stdlib_page(name: str) -> str | None:
    """``name`` if it is in the standard library (a documented, public part of it)."""
    import sys

    top = name.split(".", 1)[0]
    if top not in sys.stdlib_module_names or top.startswith("_"):
        return None
    return name


def _resolve_python(
    app: Sphinx, env: Any, node: Any, contnode: nodes.Element
) -> nodes.Element | None:
    """``missing-reference`` for the ``py`` domain, so that nitpicky builds pass on real names.

    A reference that names, from where it stands (its ``py:module``/``py:class``), an object
    that exists is resolved: to the page that documents it under its own or a re-exporting
    package's name; to docs.python.org for the standard library (the URL scheme intersphinx
    uses, without fetching its inventory: the docs build offline); else -- a private helper
    type, a type variable or alias in a signature -- it is kept as plain text. A name that
    does not exist stays unresolved, and the build fails on it.
    """
    if node.get("refdomain") != "py":
        return None
    target = str(node.get("reftarget", "")).lstrip("~.")
    if not target or target.split(".", 1)[0] in ("builtins", *dir(builtins)):
        return None  # int, bytes, None, ...: Sphinx's own builtin resolver, which runs later
    module = node.get("py:module") or ""
    klass = node.get("py:class") or ""
    candidates = [target]
    if module:
        candidates += [f"{module}.{klass}.{target}"] if klass else []
        candidates.append(f"{module}.{target}")
    if "." not in target:  # a bare name in a hint autodoc could not evaluate (TYPE_CHECKING)
        candidates += _loaded_homes(target)
    domain = env.get_domain("py")
    for candidate in candidates:
        found, obj = _lookup(candidate)
        if not found:
            continue
        home = getattr(obj, "__module__", None)
        qual = getattr(obj, "__qualname__", None)
        names = [candidate]
        if isinstance(home, str) and isinstance(qual, str):
            names.append(f"{home}.{qual}")
        short = candidate.rsplit(".", 1)[-1]
        names += [f"{pkg}.{short}" for pkg in _DOCUMENTED_HOMES]
        for name in names:
            for role in ("class", "func", "meth", "attr", "data", "obj", "mod", "exc"):
                resolved = domain.resolve_xref(
                    env, node["refdoc"], app.builder, role, name, node, contnode
                )
                if resolved is not None:
                    return resolved
        if _stdlib_page(candidate) is not None:  # as written: pathlib.Path
            public = candidate
        elif home == "builtins":  # a type with no name of its own there (module): types.X
            import types

            public = next((f"types.{n}" for n in dir(types) if getattr(types, n) is obj), "")
        elif isinstance(home, str) and isinstance(qual, str) and _stdlib_page(home):
            # a short name (Path) imported from the standard library; its documented module
            # is the public part of __module__ (pathlib._local -> pathlib)
            module_parts = [p for p in home.split(".") if not p.startswith("_")]
            public = ".".join([*module_parts, qual])
        else:
            public = ""
        if public:
            page = public.rsplit(".", 1)[0]
            ref = nodes.reference(
                "", "", internal=False, refuri=f"{PYTHON_DOCS}{page}.html#{public}"
            )
            ref["reftitle"] = f"(in Python) {public}"
            ref.append(contnode)
            return ref
        return contnode  # exists, documented nowhere (private helper, TypeVar, alias)
    return None


def setup(app: Sphinx) -> dict[str, Any]:
    # The CMake docs' own markup, as generic object types of the std domain.
    app.add_object_type(
        "command", "command", objname="CMake command", indextemplate="pair: %s; CMake command"
    )
    app.add_object_type(
        "variable", "variable", objname="CMake variable", indextemplate="pair: %s; CMake variable"
    )
    app.connect("env-get-outdated", _outdated)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.add_directive("cmake-reference", CMakeReference)
    app.add_directive("python-api", PythonApi)
    app.add_directive("optional-toctree", OptionalTocTree)
    app.add_directive("example-file", ExampleFile)
    app.add_directive("optional-include", OptionalInclude)
    app.add_directive("cli-help", CliHelp)
    app.connect("missing-reference", _resolve_python)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
