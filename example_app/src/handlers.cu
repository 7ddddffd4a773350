// SPDX-License-Identifier: Apache-2.0
//
// RPC handlers of example_app, in both handler shapes.
//
// Launch-wide (rpc_increment, echo): they run under whatever shape the dispatch
// kernel gives them -- one thread (single_thread_dispatcher), every thread of a
// block (the built-in unified kernel), every thread of a grid or a cluster -- so
// each one strides its work by the calling group, has one thread write
// *result_len, and returns the same status from every thread.
//
// Thread-shaped (rpc_increment_thread, echo_thread): one thread serves one
// request on its own, so a throughput kernel can serve one request per lane and
// the block/grid/cluster kernels serve them with no barrier.
#include <cudaq/realtime/unified_dispatch_device.cuh>

// Handler-specific status: the result does not fit.
#define EXAMPLE_APP_STATUS_RESULT_TOO_LONG 1

namespace {

// Applies `word_op` to 8-byte words and `byte_op` to the bytes left over,
// strided over the calling group. The host-ring and UDP bridges hand over
// 8-byte-aligned arguments and results; then every 8 bytes cost one load and
// one wide store, which matters because `result` is host memory mapped over
// PCIe, where each store is a transaction of its own. Unaligned buffers (another
// bridge's) go byte by byte.
template <typename WordOp, typename ByteOp>
__device__ __forceinline__ void transform_bytes(const void *args, void *result, uint32_t n,
                                                WordOp word_op, ByteOp byte_op, uint32_t rank,
                                                uint32_t size) {
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  uint32_t done = 0;
  if (((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 7u) == 0) {
    const uint32_t words = n / 8;
    const uint64_t *in_words = reinterpret_cast<const uint64_t *>(in);
    uint64_t *out_words = reinterpret_cast<uint64_t *>(out);
    for (uint32_t i = rank; i < words; i += size)
      out_words[i] = word_op(in_words[i]);
    done = words * 8;
  }
  for (uint32_t i = done + rank; i < n; i += size)
    out[i] = byte_op(in[i]);
}

struct Increment {
  __device__ uint64_t operator()(uint64_t w) const {
    // per byte, modulo 256: __vadd4 adds four bytes lane by lane without carries
    const uint32_t lo = __vadd4(static_cast<uint32_t>(w), 0x01010101u);
    const uint32_t hi = __vadd4(static_cast<uint32_t>(w >> 32), 0x01010101u);
    return (static_cast<uint64_t>(hi) << 32) | lo;
  }
  __device__ uint8_t operator()(uint8_t b) const { return static_cast<uint8_t>(b + 1u); }
};

struct Identity {
  __device__ uint64_t operator()(uint64_t w) const { return w; }
  __device__ uint8_t operator()(uint8_t b) const { return b; }
};

// One handler body for both shapes: `rank`/`size` of the calling group.
template <typename Op>
__device__ __forceinline__ int serve_bytes(const void *args, uint32_t arg_len, void *result,
                                           uint32_t max_result_len, uint32_t *result_len,
                                           uint32_t rank, uint32_t size) {
  if (arg_len > max_result_len) {
    if (rank == 0)
      *result_len = 0;
    return EXAMPLE_APP_STATUS_RESULT_TOO_LONG;
  }
  transform_bytes(args, result, arg_len, Op{}, Op{}, rank, size);
  if (rank == 0)
    *result_len = arg_len;
  return CUDAQ_RPC_STATUS_SUCCESS;
}

} // namespace

// Adds one to each byte of the arguments (launch-wide).
extern "C" __device__ int rpc_increment(const void *args, uint32_t arg_len, void *result,
                                        uint32_t max_result_len, uint32_t *result_len) {
  return serve_bytes<Increment>(args, arg_len, result, max_result_len, result_len,
                                cudaq_handler_rank(), cudaq_handler_size());
}

// Returns the arguments unchanged (launch-wide).
extern "C" __device__ int echo(const void *args, uint32_t arg_len, void *result,
                               uint32_t max_result_len, uint32_t *result_len) {
  return serve_bytes<Identity>(args, arg_len, result, max_result_len, result_len,
                               cudaq_handler_rank(), cudaq_handler_size());
}

// The same two, thread-shaped: the calling thread does all the work.
extern "C" __device__ int rpc_increment_thread(const void *args, uint32_t arg_len, void *result,
                                               uint32_t max_result_len, uint32_t *result_len) {
  return serve_bytes<Increment>(args, arg_len, result, max_result_len, result_len, 0, 1);
}

extern "C" __device__ int echo_thread(const void *args, uint32_t arg_len, void *result,
                                      uint32_t max_result_len, uint32_t *result_len) {
  return serve_bytes<Identity>(args, arg_len, result, max_result_len, result_len, 0, 1);
}

// Device globals holding the handlers' addresses: what get_device_handler() reads
// (and, for the thread-shaped ones, a marker that gives the run time their shape).
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(rpc_increment);
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(echo);
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(rpc_increment_thread);
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(echo_thread);
