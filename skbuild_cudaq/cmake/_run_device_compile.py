"""Run by the skbuild_cudaq CMake package at build time: one side-compiled source's steps.

Imports ``skbuild_cudaq.build._device_compile`` from the package this file belongs to
(``sys.path`` gets its parent first), so any Python 3 that can run it works.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from skbuild_cudaq.build._device_compile import main

    raise SystemExit(main())
