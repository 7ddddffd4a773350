"""``tomllib`` (Python >= 3.11) or its backport ``tomli``: what every module reading TOML uses."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, load, loads
else:  # pragma: no cover - Python 3.10
    from tomli import TOMLDecodeError, load, loads  # type: ignore[import-not-found, unused-ignore]

__all__ = ["TOMLDecodeError", "load", "loads"]
