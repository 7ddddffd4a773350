"""What a client's ``timeout`` means, in one place (:class:`RingClient`, :class:`UdpClient`).

Every waiting method of both clients (``call``, ``wait``, ``collect``, ``submit``,
``submit_many``, ``drain``, ``call_batch``) takes ``timeout``, in seconds, with the meaning the
standard library gives it (``queue.Queue.get``, ``threading.Event.wait``,
``concurrent.futures.Future.result``, ``subprocess.run``) and the link's own
``LinkOptions.timeout`` has:

- left out: the client's :attr:`timeout` (set by its constructor, ``timeout=10.0`` by default;
  assignable);
- ``None`` (or ``math.inf``): no limit, wait for as long as it takes;
- a number ``>= 0``: at most that many seconds; ``0`` does not wait (the answer if it is there,
  else :class:`TimeoutError`).

A ``bool``, a string or any other non-number is a :class:`TypeError`; a negative number or NaN
an :class:`~skbuild_cudaq.realtime.errors.InvalidArgumentError` (a ``ValueError``), raised
before anything is written: the compiled round trip of ``RingClient.call`` and the Python one
check it alike.
"""

from __future__ import annotations

import enum
import math
import numbers
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal, TypeVar

from skbuild_cudaq.realtime.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_TIMEOUT",
    "UNSET",
    "ClientTimeout",
    "Timeout",
    "check_timeout",
    "collect_each",
    "deadline",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

#: A client's :attr:`timeout` unless its constructor is given another one (seconds).
DEFAULT_TIMEOUT: Final = 10.0


class _Unset(enum.Enum):
    """The default of a waiting method's ``timeout``: its owner's own (a client's
    :attr:`timeout`, a dispatcher's ``DispatcherConfig.stop_timeout``)."""

    TIMEOUT = "the owner's timeout"

    def __repr__(self) -> str:
        return "<default timeout>"


#: A waiting method's ``timeout`` left out: the client's :attr:`timeout` (for
#: ``Dispatcher.stop``, its config's ``stop_timeout``).
UNSET: Final = _Unset.TIMEOUT

#: What a waiting method's ``timeout`` accepts (see the module docstring).
Timeout = float | None | Literal[_Unset.TIMEOUT]


def check_timeout(timeout: object) -> float | None:
    """``timeout`` as seconds, or None for no limit (``math.inf`` too); raises on anything
    else (see the module docstring). Not for :data:`UNSET`: the caller resolves it."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        msg = f"timeout={timeout!r}: a number of seconds >= 0, or None for no limit"
        raise TypeError(msg)
    seconds = float(timeout)
    if not seconds >= 0:  # negative, or NaN
        msg = f"timeout={timeout!r}: a number of seconds >= 0, or None for no limit"
        raise InvalidArgumentError(msg)
    return None if math.isinf(seconds) else seconds


def deadline(seconds: float | None, now: float) -> float:
    """The ``time.monotonic()`` value ``seconds`` after ``now`` (``inf`` for no limit)."""
    return math.inf if seconds is None else now + seconds


def collect_each(
    wait: Callable[[_T, float | None], _R], tickets: Sequence[_T], seconds: float | None
) -> list[_R]:
    """``wait(ticket, timeout)`` for each ticket in order, ``seconds`` bounding them all
    (None: no limit): a client's ``collect``."""
    if seconds is None:
        return [wait(t, None) for t in tickets]
    end = time.monotonic() + seconds
    return [wait(t, max(0.0, end - time.monotonic())) for t in tickets]


class ClientTimeout:
    """A client's :attr:`timeout` (shared by :class:`RingClient` and :class:`UdpClient`)."""

    _timeout: float | None

    @property
    def timeout(self) -> float | None:
        """Seconds a waiting method waits when its own ``timeout`` is left out; None: no
        limit. Assignable; the constructor's ``timeout`` sets it (10 s by default)."""
        return self._timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._timeout = check_timeout(value)

    def _seconds(self, timeout: Timeout) -> float | None:
        """A waiting method's ``timeout`` as seconds, or None for no limit (checked)."""
        return self._timeout if timeout is UNSET else check_timeout(timeout)
