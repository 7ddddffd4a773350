// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/detail/block.cuh -- what the built-in one-block dispatch
// kernels (cudaq_realtime_unified_dispatch, cudaq_realtime_graph_dispatch)
// share: the block's state in shared memory and the kernel's opening. Not part
// of the contract; included by the device run time's sources only.
#ifndef CUDAQ_REALTIME_DETAIL_BLOCK_CUH
#define CUDAQ_REALTIME_DETAIL_BLOCK_CUH

#include <cudaq/realtime/unified_dispatch_device.cuh>

// What the leader (thread 0 of block 0) hands the block at each barrier.
struct __align__(16) cudaq_detail_block_state {
  // The leader's requests land here (cudaq_dev_rx_poll_into) when they fit:
  // handlers read their arguments from shared memory.
  uint8_t stage[256];
  void *session;
  void *request;
  void *response;
  const cudaq_function_entry_t *entry;
  int running;
  uint32_t result_len;
};

// The opening of a one-block kernel: blocks other than the first return at
// once (one block serves the ring); the block copies the function table to
// shared memory (``table`` then points there); the leader (``leader``: thread
// 0) opens the transport session -- a fresh one (cudaq_dev_enter_kernel) or,
// kResume, where a suspended execution stopped (cudaq_dev_resume_kernel) -- and
// the block waits for it. Returns the session every thread shares; NULL: no
// transport (or not the first block), the kernel must return. Every thread of
// the kernel calls it.
template <bool kResume>
static __device__ __forceinline__ void *
cudaq_detail_open_block(cudaq_detail_block_state &s, bool leader, void *transport_ctx,
                        volatile int *shutdown_flag, const cudaq_function_entry_t *&table,
                        uint32_t table_count) {
  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
    return nullptr;
  table = cudaq_table_to_shared(table, table_count); // every thread: it synchronizes
  if (leader)
    s.session = kResume ? cudaq_dev_resume_kernel(transport_ctx, shutdown_flag)
                        : cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  __syncthreads();
  return s.session;
}

#endif // CUDAQ_REALTIME_DETAIL_BLOCK_CUH
