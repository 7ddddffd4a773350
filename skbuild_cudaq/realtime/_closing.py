"""Lifetimes: what the run time's objects with a ``close()`` share as context managers.

:class:`Closing` gives a class ``__exit__``: ``close()`` without masking the ``with``
block's own exception (:func:`close_on_exit`). Each class keeps its own ``__enter__``
(typed to return itself, or what it opens).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

__all__ = ["Closing", "close_on_exit"]


def close_on_exit(close: Callable[[], object], exc: BaseException | None, what: object) -> None:
    """What ``__exit__`` of a run-time object does: ``close()``, without masking the block's
    exception. After a clean block a failure to close is raised; after an exception in the
    block that exception goes on, and a close that failed too (an ``Exception``) is added to
    it as a note. A ``BaseException`` that is not an ``Exception`` (``SystemExit`` a handler
    raised, ``KeyboardInterrupt``) always goes on: it asks for the program to stop.
    """
    if exc is None:
        close()
        return
    try:
        close()
    except Exception as failure:
        note = f"closing {what!r} after this failed too: {type(failure).__name__}: {failure}"
        add_note = getattr(exc, "add_note", None)  # Python 3.11+
        if add_note is not None:
            add_note(note)
        else:
            from skbuild_cudaq.realtime._logging import get_logger

            get_logger(__name__).warning("%s", note)


class Closing:
    """Mixin: ``with obj:`` ends in ``obj.close()`` (see :func:`close_on_exit`)."""

    def close(self) -> None:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        close_on_exit(self.close, exc, self)
