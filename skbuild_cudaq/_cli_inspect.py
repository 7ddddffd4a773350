"""``python -m skbuild_cudaq inspect``: PLACEHOLDER, replaced by the work that owns it."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("inspect", help="(not implemented yet)")
    p.set_defaults(func=lambda args: 2)
