"""Native host handlers beside a Python one, in one function table (skbuild-cudaq's host path).

``_handlers`` is a C extension exporting ``rpc_increment``, ``echo`` and ``checksum`` with
``CUDAQ_REALTIME_EXPORT_HOST_FUNCTION``; :func:`reverse` is a Python handler.
"""

from __future__ import annotations

from . import _handlers

NATIVE = ("rpc_increment", "echo", "checksum")


def reverse(args: bytes) -> bytes:
    """A Python host handler: the arguments reversed."""
    return args[::-1]


def table():  # -> skbuild_cudaq.realtime.FunctionTable
    """Every native handler of ``_handlers`` and the Python ``reverse``, in one table."""
    from skbuild_cudaq.realtime import FunctionTable, get_host_handler

    t = FunctionTable()
    for name in NATIVE:
        t.add_host(name, get_host_handler(_handlers, name))
    t.add_host("reverse", reverse)
    return t
