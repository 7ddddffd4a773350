"""The run time's loggers: children of ``skbuild_cudaq``, which has only a NullHandler.

The run-time library never prints. It logs progress (link-cache hits, nvJitLink
runs with their duration) at ``INFO`` and problems it recovers from (a cache
it cannot write) at ``WARNING``; an application routes or silences them with
:mod:`logging` as for any library (``logging.getLogger("skbuild_cudaq")``).
The command-line front doors show them (see ``skbuild_cudaq._log.show_library_log``).
Imported on the link worker thread only, never on the lookup's critical path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["get_logger", "timed"]

_ROOT = "skbuild_cudaq"
logging.getLogger(_ROOT).addHandler(logging.NullHandler())


def get_logger(module: str) -> logging.Logger:
    """The logger of a run-time module (``module`` is its ``__name__``)."""
    return logging.getLogger(module if module.startswith(_ROOT) else f"{_ROOT}.{module}")


@contextmanager
def timed(logger: logging.Logger, what: str) -> Iterator[None]:
    """Log the start and the duration of a long step at ``INFO``."""
    if not logger.isEnabledFor(logging.INFO):
        yield
        return
    start = time.perf_counter()
    logger.info("%s ...", what)
    yield
    logger.info("%s: done in %.3f s", what, time.perf_counter() - start)
