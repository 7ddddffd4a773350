"""Run by the skbuild_cudaq CMake package at configure time: writes a handler switch.

Imports ``skbuild_cudaq.build._handler_switch`` from the package this file belongs to
(``sys.path`` gets its parent first), so any Python 3 that can run it works.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from skbuild_cudaq.build._handler_switch import main

    raise SystemExit(main())
