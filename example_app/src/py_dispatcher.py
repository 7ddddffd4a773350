"""``py_single_thread_dispatcher``: single_thread_dispatcher.cu written in Python.

One thread opens the session and loops -- poll, validate and look up, call the handler,
write the response header, publish -- with no block barriers and no shared-memory hand-off
(the request is staged in the block's shared memory, as the C++ kernel does). Launch it with
grid (1,1,1) and block (1,1,1) (``example_app.launchers.py_single_thread``). numba-cuda
compiles it at build time; the hooks and the handler switch are the run time's, linked and
inlined by nvJitLink.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from skbuild_cudaq.numba import dispatch_kernel
from skbuild_cudaq.numba.dispatch import (
    HEADER_SIZE,
    call_handler,
    count_request,
    enter_kernel,
    lookup_cache,
    rx_poll_into,
    table_to_shared,
    tx_publish,
    validate_request,
    write_response_header,
)


@dispatch_kernel
def py_single_thread_dispatcher(  # noqa: PLR0917 - every dispatch kernel's six parameters
    transport_ctx, slot_size, table, table_count, shutdown_flag, stats
):
    max_result = slot_size - HEADER_SIZE
    if cuda.threadIdx.x != 0 or cuda.blockIdx.x != 0:
        return
    # Lookups without a memory round trip: the table (up to 64 entries) in shared memory.
    table = table_to_shared(table, table_count, cuda.shared.array(1024, np.uint8))
    session = enter_kernel(transport_ctx, shutdown_flag)
    if session == 0:
        return
    # Requests that fit land in shared memory: the handler reads its arguments there.
    stage = cuda.shared.array(256, np.uint8)
    # The entry looked up last, in registers: a repeated function costs no lookup.
    cache = lookup_cache()
    while True:
        # Polled at the top of the loop, as the C++ kernel's while (poll): the header is
        # then read from the registers the staging stored, not from memory.
        running, request, response = rx_poll_into(session, stage)
        if not running:
            return
        status, handler, shape = validate_request(request, slot_size, table, table_count, cache)
        count_request(stats)  # before the publish, as the C++ kernel counts
        result_len = np.uint32(0)
        if status == 0:
            status, result_len = call_handler(handler, shape, request, response, max_result)
        write_response_header(response, request, status, result_len)
        tx_publish(session, response)
