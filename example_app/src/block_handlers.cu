// SPDX-License-Identifier: Apache-2.0
//
// A block-cooperative handler: `block_reverse` answers its arguments reversed
// (result[i] = args[arg_len - 1 - i]), staging tiles of the arguments in shared
// memory behind __syncthreads() barriers.
//
// Correct under every shape a dispatch kernel gives it:
//  - one thread (single-thread kernel): blockDim is 1, the barriers are trivial;
//  - one block (built-in kernel, warp-parallel kernel): the block walks every tile;
//  - a cooperative grid or a cluster: every block calls the handler, but
//    __syncthreads() and shared memory are per block, so a barrier here orders
//    the threads of *this* block only. The work is therefore split into tiles
//    that each belong to exactly one block (tile t -> block t % num_blocks), no
//    block reads what another block staged, and every thread of a block runs
//    the same number of loop trips, so each barrier is reached by the whole
//    block (never from divergent code). Nothing orders blocks against each
//    other inside the handler: the dispatch kernel's grid/cluster barrier after
//    the call does that before the response is published.
// One thread writes *result_len and every thread returns the same status.
#include <cudaq/realtime/unified_dispatch_device.cuh>

namespace {
constexpr uint32_t kTile = 256; // bytes of arguments staged per block per trip
constexpr int kStatusResultTooSmall = 1;
} // namespace

extern "C" __device__ int block_reverse(const void *args, uint32_t arg_len, void *result,
                                        uint32_t max_result_len, uint32_t *result_len) {
  __shared__ uint8_t tile[kTile];
  const uint32_t rank = cudaq_handler_rank();
  if (arg_len > max_result_len) { // same decision in every thread
    if (rank == 0)
      *result_len = 0;
    return kStatusResultTooSmall;
  }
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  const uint32_t block_threads = blockDim.x * blockDim.y * blockDim.z;
  const uint32_t num_blocks = cudaq_handler_size() / block_threads;
  const uint32_t block_rank = rank / block_threads; // linear block index (rank is block-major)
  const uint32_t tid = rank % block_threads;
  const uint32_t num_tiles = (arg_len + kTile - 1) / kTile;
  for (uint32_t t = block_rank; t < num_tiles; t += num_blocks) { // block-uniform trip count
    const uint32_t base = t * kTile;
    const uint32_t n = arg_len - base < kTile ? arg_len - base : kTile;
    for (uint32_t i = tid; i < n; i += block_threads)
      tile[i] = in[base + i];
    __syncthreads();
    // The tile [base, base + n) lands reversed at [arg_len - base - n, arg_len - base):
    // consecutive threads write consecutive result bytes.
    for (uint32_t i = tid; i < n; i += block_threads)
      out[arg_len - base - n + i] = tile[n - 1 - i];
    __syncthreads(); // the tile is reused by this block's next trip
  }
  if (rank == 0)
    *result_len = arg_len;
  return CUDAQ_RPC_STATUS_SUCCESS;
}

CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(block_reverse);
