"""The one module of skbuild-cudaq that prints.

Everything user-facing goes through here so that messages share one prefix and
one stream (stderr), and so that tests can capture them in one place. Library
code raises typed errors; only front doors (PEP 517 hooks, CLI, setuptools
command) turn them into printed messages and exit codes.

The run-time library (:mod:`skbuild_cudaq.realtime`) never prints: it logs
through :mod:`logging` under the ``skbuild_cudaq`` logger (progress at
``INFO``, problems it recovers from at ``WARNING``), which has only a
:class:`logging.NullHandler`, so an application routes or silences it like any
library's. Front doors call :func:`show_library_log` to show those records the
way this module prints (``INFO`` only when verbose).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

__all__ = [
    "LOGGER_NAME",
    "diagnostics",
    "error",
    "info",
    "progress",
    "result",
    "show_library_log",
    "step",
    "verbose",
    "warning",
]

PREFIX = "skbuild-cudaq"
_VERBOSE_ENV = "SKBUILD_CUDAQ_VERBOSE"
#: The logger the run-time library logs under (its modules use child loggers).
LOGGER_NAME = "skbuild_cudaq"


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


def diagnostics(text: str) -> None:
    """A compiler's own diagnostics, verbatim (no prefix), on stderr."""
    _stream().write(text if text.endswith("\n") else text + "\n")
    _stream().flush()


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


class _FrontDoorHandler(logging.Handler):
    """Shows the library's log records as this module prints: one prefix, stderr.

    ``WARNING`` and above always; lower levels only when verbose (decided per
    record, so ``-C cudaq.verbose`` set after the handler was installed counts).
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.levelno >= logging.ERROR:
                error(message)
            elif record.levelno >= logging.WARNING:
                warning(message)
            elif verbose():
                info(message)
        except Exception:  # a handler never raises into the library
            self.handleError(record)


def show_library_log() -> None:
    """Front doors only: show the run-time library's log records on stderr.

    Installs one handler on the ``skbuild_cudaq`` logger (idempotent) and lets
    ``INFO`` records through to it; the handler shows them only when verbose.
    Applications that import the library never call this.
    """
    logger = logging.getLogger(LOGGER_NAME)
    if not any(isinstance(h, _FrontDoorHandler) for h in logger.handlers):
        logger.addHandler(_FrontDoorHandler())
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
