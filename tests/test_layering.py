"""The package's shape, pinned: a small run-time API that loads nothing of CUDA at import, and
layers that import only downwards (issue 41).

The import graph is read from the sources (every ``import``, function-level ones included), so
a lazy import cannot hide a dependency; the import checks run in fresh interpreters.
"""

from __future__ import annotations

import ast
import json
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
        "    if info.name.rsplit('.', 1)[1] not in ('_link_child', '__main__'):\n"
        "        importlib.import_module(info.name)"
    )
    loaded = _fresh(_LOADED.format(body=body))
    assert not [m for m in loaded if not m.startswith("skbuild_cudaq.build")], loaded
