"""Sphinx configuration of the skbuild-cudaq docs (MyST Markdown, furo).

Built nitpicky with warnings as errors by tests/test_docs.py:
``python -m sphinx -n -W --keep-going -b html docs <out>``.
"""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))  # the package itself, also when it is not installed

import skbuild_cudaq  # noqa: E402

project = "skbuild-cudaq"
author = "skbuild-cudaq developers"
copyright = f"{date.today().year}, {author}"
release = skbuild_cudaq.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "cudaq_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/.ipynb_checkpoints"]

myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_inline"]
myst_heading_anchors = 3

# autodoc: import modules (never touching CUDA), document what __all__ lists.
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
# Every cross-reference must resolve (tests/test_docs.py builds with -n -W). Standard
# library names link to docs.python.org (cudaq_docs); names of packages the docs do not
# document (cuda.bindings, numpy, setuptools) are written as plain text in docstrings.
nitpicky = True

html_theme = "furo"
html_title = f"skbuild-cudaq {release}"
html_static_path = ["_static"]
html_show_sourcelink = True
pygments_style = "sphinx"
pygments_dark_style = "monokai"
