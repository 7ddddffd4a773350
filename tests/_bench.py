"""A script of ``bench/`` as a module, for tests without a GPU: the benchmarks import nothing
from CUDA at import, and import ``bench/common.py`` by name (``bench/`` goes on ``sys.path``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str, *, needs_numpy: bool = True) -> ModuleType:
    """``bench/<name>.py`` as the module ``_bench_<name>`` (skipped without numpy, which most
    benchmarks import at module level, unless ``needs_numpy`` is false)."""
    if needs_numpy:
        pytest.importorskip("numpy")
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
