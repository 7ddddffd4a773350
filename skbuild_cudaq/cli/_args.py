"""Argument types the commands share (``argparse`` ``type=`` callables)."""

from __future__ import annotations

import argparse

__all__ = ["dims", "positive"]


def dims(text: str) -> tuple[int, int, int]:
    """``X[,Y,Z]`` of positive integers (a grid, block or cluster); Y and Z default to 1."""
    parts = text.split(",")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(v < 1 for v in values):
        msg = f"expected X[,Y,Z] with positive integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    values += [1] * (3 - len(values))
    return values[0], values[1], values[2]


def positive(text: str) -> int:
    """A positive integer."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"expected a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value
