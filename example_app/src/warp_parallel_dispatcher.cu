// SPDX-License-Identifier: Apache-2.0
//
// A warp-parallel dispatch kernel: one warp, whose 32 lanes each open their own
// session with the contract's lane hook cudaq_dev_enter_lane(ctx, flag, lane, 32)
// and poll it without waiting (cudaq_dev_rx_try_poll), so 32 reads of request
// flags are in flight instead of one: throughput. With the host-ring bridge
// lane i serves the slots i, i + 32, ... (num_slots must be a multiple of 32);
// a bridge without lanes gives lane 0 the whole transport and the kernel then
// serves with lane 0 alone. Launch with grid (1,1,1), block (32,1,1) and, to
// receive requests in shared memory, 32 * slot_size bytes of dynamic shared
// memory (launchers.warp_parallel).
//
// Each round every lane polls its next slot and validates an arrived request.
// Then:
//  - a thread-shaped handler (CUDAQ_HANDLER_SHAPE_THREAD) runs on its own lane,
//    every such lane at once: one request per lane;
//  - a launch-wide handler (the default shape) runs on the whole warp, one ready
//    request after another, so it sees the same shape as under the built-in
//    kernel (one block of 32 threads, rank = lane) and may stride, use
//    __syncthreads() and shared memory.
// Requests land in the lane's part of shared memory (cudaq_dev_rx_poll_into)
// when it is there, so handlers read their arguments from shared memory, not
// from the bridge's L2-resident staging area.
// A thread-shaped (or bad) request's response header is written right after
// its handler (cudaq_answer_request), a launch-wide one's after the warp's
// loop; finally each lane publishes its own slot.
#include <cudaq/realtime/unified_dispatch_device.cuh>

namespace {
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kLanes = 32;
constexpr uint32_t kShutdownEvery = 64; // idle rounds between loads of the shutdown flag

__device__ __forceinline__ uint32_t dynamic_smem_size() {
  uint32_t v;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(v));
  return v;
}

} // namespace

extern "C" __global__ void warp_parallel_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                    const cudaq_function_entry_t *table,
                                                    uint32_t table_count,
                                                    volatile int *shutdown_flag,
                                                    unsigned long long *stats) {
  extern __shared__ __align__(16) uint8_t stage[];
  if (gridDim.x * gridDim.y * gridDim.z != 1 || blockDim.x != kLanes || blockDim.y != 1 ||
      blockDim.z != 1)
    return; // exactly one warp (uniform: the whole launch returns)
  const uint32_t lane = threadIdx.x;
  table = cudaq_table_to_shared(table, table_count);
  void *session = cudaq_dev_enter_lane(transport_ctx, shutdown_flag, lane, kLanes);
  if (__shfl_sync(kFull, reinterpret_cast<unsigned long long>(session), 0) == 0)
    return; // no transport for lane 0 (host ring: num_slots not a multiple of 32)
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  const bool staged = dynamic_smem_size() >= kLanes * slot_size;
  uint8_t *my_stage = stage + static_cast<size_t>(lane) * slot_size;

  // Each lane's last entry looked up, in registers: a repeated function costs no lookup.
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  uint32_t idle = 0;
  for (;;) {
    void *request = nullptr;
    void *response = nullptr;
    // A request that fits lands in this lane's part of shared memory.
    const int ready = session != nullptr
                          ? cudaq_dev_rx_poll_into(session, &request, &response,
                                                   staged ? my_stage : nullptr, slot_size, 0)
                          : 0;
    const unsigned mask = __ballot_sync(kFull, ready);
    if (mask == 0) {
      if (++idle % kShutdownEvery == 0) {
        int stop = 0;
        if (lane == 0)
          stop = *shutdown_flag;
        if (__shfl_sync(kFull, stop, 0) != 0)
          break; // no request was waiting in any lane's slot
      }
      continue;
    }
    idle = 0;

    // Per lane, in parallel: validate the request (its header is in registers
    // after the hook staged it) and answer it here if its handler is
    // thread-shaped or it is bad -- the response header written straight after
    // the handler (cudaq_answer_request); launch-wide ones are served below by
    // the whole warp.
    int32_t status = CUDAQ_RPC_STATUS_SUCCESS;
    uint32_t my_len = 0;
    bool whole_warp = false; // a launch-wide handler: served below by the warp
    if (ready) {
      status = cudaq_validate_request_cached(request, slot_size, table, table_count, &cache);
      whole_warp = status == CUDAQ_RPC_STATUS_SUCCESS && cache.shape != CUDAQ_HANDLER_SHAPE_THREAD;
      if (!whole_warp)
        cudaq_answer_request(cache.handler, CUDAQ_HANDLER_SHAPE_THREAD, status, request, response,
                             max_result);
      // Counted before this lane's publish (a system-scope release, which
      // orders this write too): a response the host sees is counted.
      atomicAdd(stats, 1ull);
    }
    const unsigned launch_wide = __ballot_sync(kFull, whole_warp);

    // The whole warp runs each launch-wide request's handler in turn.
    for (unsigned todo = launch_wide; todo != 0; todo &= todo - 1) {
      const int r = __ffs(todo) - 1;
      const cudaq_device_handler_t h = reinterpret_cast<cudaq_device_handler_t>(
          __shfl_sync(kFull, reinterpret_cast<unsigned long long>(cache.handler), r));
      const void *req = reinterpret_cast<const void *>(
          __shfl_sync(kFull, reinterpret_cast<unsigned long long>(request), r));
      void *resp = reinterpret_cast<void *>(
          __shfl_sync(kFull, reinterpret_cast<unsigned long long>(response), r));
      uint32_t len = 0;
      const int32_t hs = cudaq_call_launch_handler(h, req, resp, max_result, &len);
      __syncwarp();
      len = __reduce_max_sync(kFull, len); // the one thread that wrote *result_len
      if (lane == static_cast<uint32_t>(r)) {
        status = hs;
        my_len = len;
      }
    }
    if (launch_wide != 0) {
      // Other lanes wrote parts of these results: __syncwarp orders every lane's
      // bytes before each lane's publish, a release at system scope (PTX releases
      // are cumulative). (A thread-shaped result is one lane's own writes.)
      __syncwarp();
    }
    if (ready) {
      if (whole_warp)
        write_response_header(response, request, status, my_len);
      cudaq_dev_tx_publish(session, response);
    }
  }
}
