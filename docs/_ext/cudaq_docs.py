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

Nothing here imports ``cuda.*``; autodoc imports modules, which never touch CUDA
at import.
"""

from __future__ import annotations

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
            for value_name in getattr(mod, "__all__", []):
                try:
                    value = getattr(mod, value_name)
                except (AttributeError, ImportError):
                    continue  # autodoc reports it
                home = getattr(value, "__module__", None)
                if isinstance(home, str) and home != name:
                    documented.setdefault(home, {}).setdefault(value_name, name)
            skip = documented.get(name, {})
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

        from skbuild_cudaq.__main__ import _build_parser

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
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
