"""The package's GPU handlers, compiled at build time by numba-cuda (no CUDA toolkit)."""

from skbuild_cudaq.numba import handler, rank, size, status, thread_handler


@handler
def py_increment(args, result):
    """Adds one to each byte (launch-wide: the threads stride over the bytes)."""
    n = min(args.size, result.size)
    for i in range(rank(), n, size()):
        result[i] = args[i] + 1
    return n


@thread_handler
def py_checksum(args, result):
    """The bytes' sum as a little-endian u32 (one thread); status 1 without room for it."""
    if result.size < 4:
        return status(1)
    total = 0
    for i in range(args.size):
        total += args[i]
    for k in range(4):
        result[k] = (total >> (8 * k)) & 0xFF
    return 4
