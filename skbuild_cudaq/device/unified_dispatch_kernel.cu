// SPDX-License-Identifier: Apache-2.0
//
// The built-in unified dispatch kernel: one block; thread 0 drives the
// transport. A launch-wide handler (CUDAQ_HANDLER_SHAPE_LAUNCH, the default) is
// called by every thread of the block; a thread-shaped one
// (CUDAQ_HANDLER_SHAPE_THREAD), and every bad request, is served by thread 0
// alone, with no block barrier. Launch with grid (1,1,1) and a block size up
// to the kernel's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK.
//
// Three builds of one body:
//  - cudaq_realtime_unified_dispatch: no __launch_bounds__, so the compiler
//    gives the leader's path the registers it wants (capping them for 1024
//    threads made it spill, +3 us a round trip on an H200); it runs blocks up
//    to its MAX_THREADS_PER_BLOCK (512 on sm_90 as linked today);
//  - cudaq_realtime_unified_dispatch_1024: __launch_bounds__(1024, 1), for the
//    blocks the first cannot run. Dispatcher.start() launches it only then, so
//    blocks the first can run keep its code, instruction for instruction;
//  - cudaq_realtime_unified_dispatch_shared: the first, polling a shared ring
//    (CUDAQ_POLL_SHARED: a host dispatcher serves the HOST_CALL entries of the
//    same ring), launched for DispatcherConfig.shared_ring.
//
// The default forms of the optional hooks and of the handler switch's two entry
// points are in hook_defaults.cu, so that a module without these three kernels
// (the graph module) has them too.
#include <cudaq/realtime/detail/block.cuh>

namespace {

// cudaq_serve_until_launch_wide on a shared ring: polls with CUDAQ_POLL_SHARED
// and leaves the requests of entries flagged CUDAQ_ENTRY_FLAG_PEER to the ring's
// other consumer (neither answered nor counted). Its own copy, so that the
// header's loop -- every other kernel's -- stays as it is.
__device__ __forceinline__ int serve_shared_until_launch_wide(
    void *session, uint32_t slot_size, const cudaq_function_entry_t *table, uint32_t table_count,
    unsigned long long *stats, void *stage, uint32_t stage_bytes, void **request, void **response,
    const cudaq_function_entry_t **entry) {
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  for (;;) {
    if (!cudaq_dev_rx_poll_into(session, request, response, stage, stage_bytes,
                                CUDAQ_POLL_WAIT | CUDAQ_POLL_SHARED))
      return 0;
    const int32_t status =
        cudaq_validate_request_cached(*request, slot_size, table, table_count, &cache);
    if (status == CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION &&
        cudaq_is_peer_request(*request, table, table_count))
      continue; // the other consumer's
    atomicAdd(stats, 1ull);
    if (status == CUDAQ_RPC_STATUS_SUCCESS && cache.shape != CUDAQ_HANDLER_SHAPE_THREAD) {
      *entry = cache.entry;
      return 1;
    }
    cudaq_answer_request(cache.handler, CUDAQ_HANDLER_SHAPE_THREAD, status, *request, *response,
                         max_result);
    cudaq_dev_tx_publish(session, *response);
  }
}

// The body of every build of the built-in kernel (see the top of this file).
// kShared: a shared ring (serve_shared_until_launch_wide).
template <bool kShared>
__device__ __forceinline__ void
unified_dispatch_body(void *transport_ctx, uint32_t slot_size,
                      const cudaq_function_entry_t *table, uint32_t table_count,
                      volatile int *shutdown_flag, unsigned long long *stats) {
  __shared__ cudaq_detail_block_state s;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  void *session =
      cudaq_detail_open_block<false>(s, leader, transport_ctx, shutdown_flag, table, table_count);
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (;;) {
    if (leader) {
      // Serve alone until a request needs the whole block (or shutdown): the
      // other threads wait at the barrier below meanwhile.
      void *request = nullptr;
      void *response = nullptr;
      const cudaq_function_entry_t *entry = nullptr;
      s.running = kShared ? serve_shared_until_launch_wide(
                                session, slot_size, table, table_count, stats, s.stage,
                                sizeof(s.stage), &request, &response, &entry)
                          : cudaq_serve_until_launch_wide(
                                session, slot_size, table, table_count, stats, s.stage,
                                sizeof(s.stage), &request, &response, &entry);
      s.entry = entry; // launch-wide: hand it to the block
      s.request = request;
      s.response = response;
      s.result_len = 0;
    }
    __syncthreads();
    if (!s.running)
      break;
    uint32_t result_len = 0;
    const int32_t status = cudaq_call_launch_handler(s.entry->handler, s.request, s.response,
                                                     max_result, &result_len);
    if (result_len != 0)
      s.result_len = result_len; // handlers have one thread write *result_len
    // Every thread's result bytes reach the host before the publish with no fence of
    // their own: the barrier orders them before the leader's release (system scope),
    // and PTX releases are cumulative (causality order is transitive across scopes).
    __syncthreads();
    if (leader) {
      write_response_header(s.response, s.request, status, s.result_len);
      cudaq_dev_tx_publish(session, s.response);
    }
    __syncthreads();
  }
}
} // namespace

extern "C" __global__ void
cudaq_realtime_unified_dispatch(void *transport_ctx, uint32_t slot_size,
                                const cudaq_function_entry_t *table, uint32_t table_count,
                                volatile int *shutdown_flag, unsigned long long *stats) {
  unified_dispatch_body<false>(transport_ctx, slot_size, table, table_count,
                                         shutdown_flag, stats);
}

// The same kernel for blocks of up to 1024 threads (64 registers a thread).
extern "C" __global__ void __launch_bounds__(1024, 1)
    cudaq_realtime_unified_dispatch_1024(void *transport_ctx, uint32_t slot_size,
                                         const cudaq_function_entry_t *table,
                                         uint32_t table_count, volatile int *shutdown_flag,
                                         unsigned long long *stats) {
  unified_dispatch_body<false>(transport_ctx, slot_size, table, table_count,
                                         shutdown_flag, stats);
}

// The same kernel for a shared ring (DispatcherConfig.shared_ring): a host
// dispatcher consumes the ring too and answers the entries flagged
// CUDAQ_ENTRY_FLAG_PEER (the table's HOST_CALL entries); this kernel passes
// them over. Blocks up to its MAX_THREADS_PER_BLOCK.
extern "C" __global__ void
cudaq_realtime_unified_dispatch_shared(void *transport_ctx, uint32_t slot_size,
                                       const cudaq_function_entry_t *table, uint32_t table_count,
                                       volatile int *shutdown_flag, unsigned long long *stats) {
  unified_dispatch_body<true>(transport_ctx, slot_size, table,
                                                             table_count, shutdown_flag, stats);
}
