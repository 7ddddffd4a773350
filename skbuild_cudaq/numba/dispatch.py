"""Writing a dispatch kernel in Python: the transport hooks and the framing helpers.

A dispatch kernel decorated with :func:`skbuild_cudaq.numba.dispatch_kernel` takes the six
parameters every dispatch kernel takes (``transport_ctx, slot_size, table, table_count,
shutdown_flag, stats``) and drives the transport with these functions, which numba-cuda
compiles to calls of the run time's ``extern "C"`` device functions (the bridge's hooks and
the module's handler switch, resolved and inlined by nvJitLink) or to the wire format's
loads and stores. Addresses (a session, a request, a response, a handler) are integers::

    import numpy
    from numba import cuda
    from skbuild_cudaq.numba import dispatch_kernel
    from skbuild_cudaq.numba.dispatch import (HEADER_SIZE, call_handler, count_request,
        enter_kernel, lookup_cache, rx_poll, table_to_shared, tx_publish, validate_request,
        write_response_header)

    @dispatch_kernel
    def py_single_thread_dispatcher(transport_ctx, slot_size, table, table_count,
                                    shutdown_flag, stats):
        max_result = slot_size - HEADER_SIZE
        if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
            return
        table = table_to_shared(table, table_count, cuda.shared.array(1024, numpy.uint8))
        session = enter_kernel(transport_ctx, shutdown_flag)
        if session == 0:
            return
        cache = lookup_cache()
        while True:
            running, request, response = rx_poll(session)  # polled at the top of the loop
            if not running:
                return
            status, handler, shape = validate_request(request, slot_size, table,
                                                      table_count, cache)
            count_request(stats)
            result_len = 0
            if status == 0:
                status, result_len = call_handler(handler, shape, request, response, max_result)
            write_response_header(response, request, status, result_len)
            tx_publish(session, response)

On the CPU these functions only say that they run on the GPU.
"""

from __future__ import annotations

from typing import Any, NoReturn

__all__ = [
    "HEADER_SIZE",
    "call_handler",
    "count_request",
    "enter_kernel",
    "lookup_cache",
    "rx_poll",
    "rx_poll_into",
    "table_to_shared",
    "tx_publish",
    "validate_request",
    "write_response_header",
]

#: Bytes of a request or response header (CUDAQ_RPC_HEADER_SIZE).
HEADER_SIZE = 24


def _device_only(name: str) -> NoReturn:
    msg = f"skbuild_cudaq.numba.dispatch.{name} runs on the GPU, in a dispatch kernel"
    raise RuntimeError(msg)


def enter_kernel(transport_ctx: Any, shutdown_flag: Any) -> int:
    """``cudaq_dev_enter_kernel``: opens the kernel's transport session; 0: no transport
    (the kernel must return)."""
    _device_only("enter_kernel")


def rx_poll(session: int) -> tuple[int, int, int]:
    """``cudaq_dev_rx_poll``: waits for the next request; ``(1, request, response)``, or
    ``(0, 0, 0)`` once shutdown is set."""
    _device_only("rx_poll")


def rx_poll_into(session: int, stage: Any) -> tuple[int, int, int]:
    """``cudaq_dev_rx_poll_into`` (waiting): as :func:`rx_poll`, with a request that fits
    ``stage`` (a ``uint8`` array of the block's shared memory, e.g.
    ``cuda.shared.array(256, numpy.uint8)``) copied there first, so that the handler reads
    its arguments without a memory round trip."""
    _device_only("rx_poll_into")


def table_to_shared(table: Any, table_count: int, shared: Any) -> int:
    """``cudaq_table_to_shared``: copies the function table into ``shared`` (a ``uint8``
    array of the block's shared memory, e.g. ``cuda.shared.array(1024, numpy.uint8)``: 64
    entries) when it fits and returns its address there, else the table's own address; the
    calling thread's later lookups then cost no device-memory round trip. One thread calls
    it (it does not synchronize the block)."""
    _device_only("table_to_shared")


def tx_publish(session: int, response: int) -> None:
    """``cudaq_dev_tx_publish``: publishes the response of the request last polled."""
    _device_only("tx_publish")


def validate_request(
    request: int, slot_size: int, table: Any, table_count: int, cache: Any = None
) -> Any:
    """Checks a request and finds its entry (``cudaq_validate_request``): ``(status,
    handler, shape)``; status 0 with the DEVICE_CALL entry's handler address and shape, else
    -1 (bad magic), -2 (no DEVICE_CALL entry for the function id) or -3 (arguments longer
    than the slot). With ``cache`` (:func:`lookup_cache`, made once before the kernel's loop:
    ``cudaq_validate_request_cached``), a request for the function looked up last is valid
    without a lookup in the table."""
    _device_only("validate_request")


def lookup_cache() -> Any:
    """``cudaq_lookup_cache_empty``: the kernel's memory of the entry it looked up last, for
    :func:`validate_request` (kept in registers across the kernel's loop)."""
    _device_only("lookup_cache")


def call_handler(handler: int, shape: int, request: int, response: int, max_result: int) -> Any:
    """Calls a handler of ``shape`` with the request's arguments and the response's result
    area through the module's handler switch (``cudaq_call_handler`` or
    ``cudaq_call_launch_handler``): ``(status, result_len)``, ``result_len`` at most
    ``max_result``. A thread-shaped handler's request in shared memory (:func:`rx_poll_into`)
    with its response in global memory is served with both address spaces known to the
    compiler, any other through the handler's address."""
    _device_only("call_handler")


def write_response_header(response: int, request: int, status: int, result_len: int) -> None:
    """Writes the response header: magic, ``status``, ``result_len``, the request id and
    timestamp echoed."""
    _device_only("write_response_header")


def count_request(stats: Any) -> None:
    """Adds one to the dispatcher's processed-requests counter (an atomic add)."""
    _device_only("count_request")
