"""The one module of skbuild-cudaq that prints.

Everything user-facing goes through here so that messages share one prefix and
one stream (stderr), and so that tests can capture them in one place. Library
code raises typed errors; only front doors (PEP 517 hooks, CLI, setuptools
command) turn them into printed messages and exit codes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = ["error", "info", "progress", "result", "step", "verbose", "warning"]

PREFIX = "skbuild-cudaq"
_VERBOSE_ENV = "SKBUILD_CUDAQ_VERBOSE"


def _stream() -> TextIO:
    return sys.stderr


def verbose() -> bool:
    """Whether detailed progress messages are wanted (``SKBUILD_CUDAQ_VERBOSE=1``)."""
    return os.environ.get(_VERBOSE_ENV, "").lower() not in {"", "0", "false", "no", "off"}


def info(message: str) -> None:
    """An informational line, always shown."""
    print(f"{PREFIX}: {message}", file=_stream(), flush=True)


def progress(message: str) -> None:
    """A progress line, shown only when verbose."""
    if verbose():
        info(message)


def warning(message: str) -> None:
    print(f"{PREFIX}: warning: {message}", file=_stream(), flush=True)


def error(message: str) -> None:
    """An error message. Multi-line messages keep their layout."""
    print(f"{PREFIX}: error: {message}", file=_stream(), flush=True)


def result(text: str) -> None:
    """Program output (what a CLI command produces) on stdout."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


@contextmanager
def step(what: str) -> Iterator[None]:
    """Log the start and the duration of a long step (when verbose)."""
    start = time.perf_counter()
    progress(f"{what} ...")
    yield
    progress(f"{what}: done in {time.perf_counter() - start:.3f} s")
