"""Run by the skbuild_cudaq CMake package at build time: writes device-code records.

Imports ``skbuild_cudaq.build._device_info`` from the package this file belongs to
(``sys.path`` gets its parent first), so any Python 3 that can run it works.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from skbuild_cudaq.build._device_info import main

    raise SystemExit(main())
