"""skbuild-cudaq test package built with setuptools."""

from . import _core

__all__ = ["_core"]
