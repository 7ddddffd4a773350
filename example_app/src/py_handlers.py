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

from skbuild_cudaq.numba import address, handler, rank, size, status, thread_handler, words

#: Handler-specific status, as handlers.cu's EXAMPLE_APP_STATUS_RESULT_TOO_LONG.
RESULT_TOO_LONG = 1

#: Adding one to each byte of a 4-byte half of a word without carries between bytes (what
#: handlers.cu's __vadd4 does, and its Increment to each half): the low seven bits of each
#: byte plus one, the top bit xor-ed back.
LOW7 = np.uint32(0x7F7F7F7F)
TOP = np.uint32(0x80808080)
ONES = np.uint32(0x01010101)
HALF = np.uint64(32)

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
    n = np.uint32(args.size)
    if n > result.size:
        return status(RESULT_TOO_LONG)
    done = np.uint32(0)
    if (address(args) | address(result)) & 7 == 0:
        src, dst = words(args), words(result)
        count = np.uint32(src.size)
        i = np.uint32(rank())
        while i < count:
            w = src[i]
            lo, hi = np.uint32(w), np.uint32(w >> HALF)
            lo = np.uint32(((lo & LOW7) + ONES) ^ (lo & TOP))
            hi = np.uint32(((hi & LOW7) + ONES) ^ (hi & TOP))
            dst[i] = (np.uint64(hi) << HALF) | np.uint64(lo)
            i = np.uint32(i + size())
        done = np.uint32(count * 8)
    i = np.uint32(done + rank())
    while i < n:
        result[i] = args[i] + 1
        i = np.uint32(i + size())
    return n


@thread_handler
def py_rpc_increment_thread(args, result):
    """Adds one to each byte of the arguments (one thread): handlers.cu's
    rpc_increment_thread, line for line -- ``uint32`` lengths and index (unsigned: no
    negative-index wraparound on each access, 32-bit index math), the words through
    :func:`~skbuild_cudaq.numba.words` (no bounds or shape checks) and each word's two
    halves added to as its ``__vadd4`` pair does. It compiles to the C++ twin's code
    (``tests/test_numba_sass.py`` compares the two in the linked dispatch kernel)."""
    n = np.uint32(args.size)
    if n > result.size:
        return status(RESULT_TOO_LONG)
    done = np.uint32(0)
    if (address(args) | address(result)) & 7 == 0:
        src, dst = words(args), words(result)
        count = np.uint32(src.size)
        i = np.uint32(0)
        while i < count:
            w = src[i]
            lo, hi = np.uint32(w), np.uint32(w >> HALF)
            lo = np.uint32(((lo & LOW7) + ONES) ^ (lo & TOP))
            hi = np.uint32(((hi & LOW7) + ONES) ^ (hi & TOP))
            dst[i] = (np.uint64(hi) << HALF) | np.uint64(lo)
            i = np.uint32(i + 1)
        done = np.uint32(count * 8)
    i = done
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
