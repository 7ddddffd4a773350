"""example_app's GPU handlers written in Python (skbuild_cudaq.numba).

Listed in ``[tool.cudaq.dispatch-kernels]`` beside the ``.cu`` files: the build compiles them
with numba-cuda to LTO-IR (no nvcc needed for them) and embeds them in ``example_app._core``,
exported under the function names like the C++ handlers of ``handlers.cu``:

* ``py_rpc_increment`` -- ``rpc_increment``'s twin, launch-wide: every thread of the
  dispatch kernel's launch calls it and strides over the bytes;
* ``py_rpc_increment_thread`` -- ``rpc_increment_thread``'s twin: one thread serves a request;
* ``py_steane_decode`` -- a lookup-table syndrome decoder for the Steane [[7,1,3]] code: one
  byte per code block in (bits 0-2 the X-check syndrome, bits 3-5 the Z-check syndrome), two
  bytes per block out (the 7-bit masks of the qubits to flip: X then Z corrections).

The same status as the C++ twins: 1 (``status(1)``) when the result does not fit.
"""

from __future__ import annotations

import numpy as np

from skbuild_cudaq.numba import address, handler, rank, size, status, thread_handler

#: Handler-specific status, as handlers.cu's EXAMPLE_APP_STATUS_RESULT_TOO_LONG.
RESULT_TOO_LONG = 1

#: Adding one to each byte of an 8-byte word without carries between bytes (what handlers.cu's
#: __vadd4 pairs do): the low seven bits of each byte plus one, the top bit xor-ed back.
LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
TOP = np.uint64(0x8080808080808080)
ONES = np.uint64(0x0101010101010101)

#: The Steane code's checks are the [7,4] Hamming code's: a single error on qubit q (1..7)
#: gives syndrome q, so syndrome s flips qubit s (bit s - 1 of the mask); 0 flips nothing.
STEANE_CORRECTION = np.array([0] + [1 << (s - 1) for s in range(1, 8)], dtype=np.uint8)


@handler
def py_rpc_increment(args, result):
    """Adds one to each byte of the arguments (launch-wide): 8-byte words where both buffers
    are 8-byte aligned (one load and one store per word: ``result`` may be host memory
    mapped over PCIe, where each store is a transaction), the bytes left over one by one,
    strided over the calling group -- handlers.cu's rpc_increment. The loops stride with a
    ``uint32`` index, as the C++ twin's: ``range(rank(), n, size())`` would count its trips
    with a 64-bit division (a subroutine call) and index with signed 64-bit integers."""
    n = args.size
    if n > result.size:
        return status(RESULT_TOO_LONG)
    done = 0
    if (address(args) | address(result)) & 7 == 0:
        done = n // 8 * 8
        words, out = args[:done].view(np.uint64), result[:done].view(np.uint64)
        i = np.uint32(rank())
        while i < done // 8:
            w = words[i]
            out[i] = ((w & LOW7) + ONES) ^ (w & TOP)
            i = np.uint32(i + size())
    i = np.uint32(done + rank())
    while i < n:
        result[i] = args[i] + 1
        i = np.uint32(i + size())
    return n


@thread_handler
def py_rpc_increment_thread(args, result):
    """Adds one to each byte of the arguments (one thread): handlers.cu's
    rpc_increment_thread, with its ``uint32`` loop index (unsigned: no negative-index
    wraparound on each access, 32-bit index math)."""
    n = args.size
    if n > result.size:
        return status(RESULT_TOO_LONG)
    done = 0
    if (address(args) | address(result)) & 7 == 0:
        done = n // 8 * 8
        words, out = args[:done].view(np.uint64), result[:done].view(np.uint64)
        i = np.uint32(0)
        while i < done // 8:
            w = words[i]
            out[i] = ((w & LOW7) + ONES) ^ (w & TOP)
            i = np.uint32(i + 1)
    i = np.uint32(done)
    while i < n:
        result[i] = args[i] + 1
        i = np.uint32(i + 1)
    return n


@thread_handler
def py_steane_decode(args, result):
    """Syndromes in, corrections out: a table lookup per code block (one thread)."""
    blocks = args.size
    if 2 * blocks > result.size:
        return status(RESULT_TOO_LONG)
    for b in range(blocks):
        syndrome = args[b]
        result[2 * b] = STEANE_CORRECTION[syndrome & 7]
        result[2 * b + 1] = STEANE_CORRECTION[(syndrome >> 3) & 7]
    return 2 * blocks
