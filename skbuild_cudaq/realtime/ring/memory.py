"""Views over one ring allocation (shared by producer and consumer) and the wait backoff."""

from __future__ import annotations

import contextlib
import ctypes
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skbuild_cudaq.realtime.errors import RingError
from skbuild_cudaq.realtime.ring.layout import RingLayout

if TYPE_CHECKING:
    from skbuild_cudaq.realtime.ring._atomics import Words

__all__ = ["Backoff", "RingMemory"]

#: The longest ``idle_sleep`` a native serving thread takes, in seconds.
_MAX_IDLE_SLEEP = 3600.0


def _idle_sleep_ns(idle_sleep: object) -> int:
    """``idle_sleep`` (``HostDispatcher``, ``UdpFeeder``: None, or seconds) as the native
    thread's nanoseconds (0: spin). Refused unless None or a number of seconds > 0 and at
    most ``_MAX_IDLE_SLEEP`` (a bool, a string, nan or inf would fail in the native
    setter, or make a sleeping thread miss requests for ever)."""
    if idle_sleep is None:
        return 0
    if (
        not isinstance(idle_sleep, (int, float))
        or isinstance(idle_sleep, bool)
        or not 0 < idle_sleep <= _MAX_IDLE_SLEEP
    ):
        from skbuild_cudaq.realtime.errors import InvalidArgumentError  # a ValueError too

        msg = (
            f"idle_sleep={idle_sleep!r}: None (spin while serving) or seconds > 0, at most "
            f"{_MAX_IDLE_SLEEP:g}"
        )
        raise InvalidArgumentError(msg)
    return max(1, round(idle_sleep * 1e9))


class Backoff:
    """Spin, then yield, then sleep with growing delays (bounded by ``max_sleep``).

    Spinning gives the lowest latency against a GPU consumer; sleeping releases
    the GIL so that a consumer thread of the same process (the host path) runs.
    """

    __slots__ = ("_n", "_spin", "max_sleep")

    def __init__(self, spin: int, max_sleep: float = 1e-3) -> None:
        self._n = 0
        self._spin = spin
        self.max_sleep = max_sleep

    def reset(self) -> None:
        self._n = 0

    def pause(self) -> None:
        n = self._n = self._n + 1
        if n <= self._spin:
            return
        k = n - self._spin
        if k <= 4:
            time.sleep(0)
            return
        time.sleep(min(self.max_sleep, 5e-6 * (1 << min((k - 4) // 4, 10))))


def _as_bytes_view(buffer: Any, layout: RingLayout) -> memoryview:
    try:
        mv = memoryview(buffer)
    except TypeError as exc:
        msg = f"ring buffer must support the buffer protocol, got {type(buffer).__name__}"
        raise RingError(msg) from exc
    if mv.readonly:
        msg = "ring buffer is read-only"
        raise RingError(msg)
    if not mv.c_contiguous:
        msg = "ring buffer must be C-contiguous"
        raise RingError(msg)
    mv = mv.cast("B")
    if mv.nbytes < layout.total_bytes:
        msg = f"ring buffer has {mv.nbytes} bytes, {layout} needs {layout.total_bytes}"
        raise RingError(msg)
    return mv[: layout.total_bytes]


def _atomic_words(mv: memoryview, offset: int, count: int, width: int) -> Words:
    """The ``count`` words of ``width`` bytes at ``offset`` of ``mv`` as a compiled
    ``_atomics.Words`` (acquire loads, release stores): the only way the Python
    paths touch a flag or the id source (see "Memory order" in the package docstring)."""
    try:
        from skbuild_cudaq.realtime.ring._atomics import Words
    except ImportError as exc:
        msg = (
            "the ring's atomics (skbuild_cudaq.realtime.ring._atomics) are not built: the "
            f"Python paths need them for the ring's flags ({exc}); reinstall skbuild-cudaq "
            "from a wheel, or build it with a C compiler and Python's headers"
        )
        raise RingError(msg) from exc
    # the address only: no export of the buffer outlives this call (mv keeps the memory)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mv)) + offset
    return Words(address, count, width)


class RingMemory:
    """Views over one ring allocation shared by producer and consumer.

    ``rx_flags``, ``tx_flags`` (``u32[num_slots]``) and ``ids`` (one ``u64``) are
    ``_atomics.Words``: acquire ``load``, release ``store``, ``fetch_add``; the
    slots' bytes are plain views (``mv``, :meth:`numpy`), ordered by those atomics.
    """

    def __init__(self, buffer: Any, layout: object) -> None:
        if not isinstance(layout, RingLayout):
            msg = f"layout must be a RingLayout, got {type(layout).__name__}"
            raise TypeError(msg)
        self.layout = layout
        self.buffer = buffer  # keeps the owner alive
        self.mv = _as_bytes_view(buffer, layout)
        n = layout.num_slots
        self.rx_flags = _atomic_words(self.mv, layout.rx_flags_offset, n, 4)
        self.tx_flags = _atomic_words(self.mv, layout.tx_flags_offset, n, 4)
        self.ids = _atomic_words(self.mv, layout.ids_offset, 1, 8)
        self.released = False
        self._np: dict[str, Any] | None = None
        self._on_release: list[Callable[[], Any]] = []

    def numpy(self) -> dict[str, Any]:
        """numpy views of the slots' bytes (created on first use); never of a flag (those
        are ``rx_flags``/``tx_flags``: atomics)."""
        if self._np is None:
            import numpy as np

            lay = self.layout
            n, size = lay.num_slots, lay.slot_size
            whole = np.frombuffer(self.mv, dtype=np.uint8)
            rx = whole[: n * size].reshape(n, size)
            tx = whole[n * size : 2 * n * size].reshape(n, size)
            self._np = {
                "rx": rx,
                "tx": tx,
                "rx32": rx.view("<u4"),
                "tx32": tx.view("<u4"),
                "rx64": rx.view("<u8"),
            }
        return self._np

    def on_release(self, hook: Callable[[], Any]) -> None:
        """Call ``hook`` first when the views are released (a ``weakref.WeakMethod`` is
        resolved, and skipped once its object is gone): a native thread using the ring
        (the UDP feeder) stops before the memory may go."""
        self._on_release.append(hook)

    def clear_flags(self) -> None:
        """Zero every request and response flag (a fresh ring; the id source is kept)."""
        self.rx_flags.clear()
        self.tx_flags.clear()

    def release(self) -> None:
        hooks, self._on_release = self._on_release, []
        for hook in hooks:
            target = hook() if isinstance(hook, weakref.ref) else hook
            if target is not None:
                target()
        self.released = True
        self._np = None
        for words in (self.rx_flags, self.tx_flags, self.ids):
            words.release()
        with contextlib.suppress(BufferError):  # a numpy view still alive: GC finishes it
            self.mv.release()
