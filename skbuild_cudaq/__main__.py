"""``python -m skbuild_cudaq`` and the ``skbuild-cudaq`` script: :func:`skbuild_cudaq.cli.main`."""

from __future__ import annotations

import sys

from skbuild_cudaq.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
