// One thread drives the transport and runs every handler: no block barriers,
// no shared-memory hand-off. Launch with grid (1,1,1) and block (1,1,1).
// (A launch-wide handler is called by the one thread of the launch: rank 0 of 1.)
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __global__ void single_thread_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                    const cudaq_function_entry_t *table,
                                                    uint32_t table_count,
                                                    volatile int *shutdown_flag,
                                                    unsigned long long *stats) {
  // First, before anything else: computed later, it moved nvcc's schedule of the
  // request's loads in the poll (bench/phases.py, single_thread_late_max).
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  table = cudaq_table_to_shared(table, table_count); // lookups without a memory round trip
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (session == nullptr)
    return;
  // Requests that fit land in shared memory: the handler reads its arguments
  // there instead of from device memory (a round trip after the poll).
  __shared__ __align__(16) uint8_t stage[256];
  // The last entry looked up, in registers: a repeated function costs no lookup.
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  void *request = nullptr;
  void *response = nullptr;
  while (cudaq_dev_rx_poll_into(session, &request, &response, stage, sizeof(stage), 1)) {
    int32_t status = cudaq_validate_request_cached(request, slot_size, table, table_count, &cache);
    // Count the request now rather than just before publishing: the publish (a
    // system-scope release) waits for earlier stores to complete, and by then
    // this one has. Still counted before the host can see the response.
    atomicAdd(stats, 1ull);
    uint32_t result_len = 0;
    // A direct, inlined call for the module's handlers, each through the switch
    // of its shape (the thread-shaped with the request in shared memory and the
    // response in global memory known to the compiler: see cudaq_call_handler).
    if (status == CUDAQ_RPC_STATUS_SUCCESS)
      status = cache.shape == CUDAQ_HANDLER_SHAPE_THREAD
                   ? cudaq_call_handler(cache.handler, request, response, max_result, &result_len)
                   : cudaq_call_launch_handler(cache.handler, request, response, max_result,
                                               &result_len);
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}
