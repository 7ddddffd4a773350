"""The setuptools front door under its first name: :mod:`skbuild_cudaq.setuptools`.

Kept importable for projects and entry points that name ``skbuild_cudaq.setuptools_ext``.
"""

from __future__ import annotations

from skbuild_cudaq.setuptools import *  # noqa: F403 (the same names, documented there)
