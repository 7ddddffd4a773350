"""The host path: the realtime ring and wire format served by CPU threads.

- :mod:`.dispatcher`: :class:`~.dispatcher.HostDispatcher`, a native serving loop over a ring
  (HOST_CALL handlers: Python callables and native host handlers; GRAPH_LAUNCH entries through
  :mod:`.graphs`' worker streams);
- :mod:`.handlers`: native host handlers (``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION``) found with
  :func:`~.handlers.get_host_handler`;
- :mod:`.udp`: the UDP feeder in front of a ring and the UDP client;
- :mod:`._shm`: named shared-memory rings (the test server's), checked on attach, swept;
- ``_native``: the compiled core all of them drive (sources in ``native/``).

Nothing here is imported by the device path; the package imports only the ring, the wire
format and the run time's ground (errors, driver helper, timeouts).
"""

from __future__ import annotations

import importlib
from typing import Any

#: compiled submodules: a missing one is said in one line (see _compiled)
_COMPILED = ("_native",)


def _compiled(name: str) -> Any:
    """The compiled submodule ``name``; missing, a NotBuiltError saying why, in one line
    (``from . import _native`` asks this module's ``__getattr__`` first)."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{name}":
            raise
        from skbuild_cudaq._paths import source_tree_hint
        from skbuild_cudaq.realtime.errors import NotBuiltError

        msg = source_tree_hint() or (
            f"skbuild-cudaq's compiled host path ({__name__}.{name}) is missing: this "
            "installation was built without it; reinstall skbuild-cudaq (it needs a C "
            "compiler and Python's headers to build)"
        )
        raise NotBuiltError(msg) from None


def __getattr__(name: str) -> Any:
    if name in _COMPILED:
        return _compiled(name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
