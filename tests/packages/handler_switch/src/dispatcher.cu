// A one-thread dispatch kernel that calls handlers the way the run time's own kernels do:
// cudaq_call_handler for a thread-shaped handler, cudaq_call_launch_handler for a launch-wide
// one (this launch is one thread), i.e. through the module's handler switch of each shape.
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __global__ void hs_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  void *request = nullptr;
  void *response = nullptr;
  while (cudaq_dev_rx_poll(session, &request, &response)) {
    int32_t status = cudaq_validate_request_cached(request, slot_size, table, table_count, &cache);
    atomicAdd(stats, 1ull);
    uint32_t result_len = 0;
    if (status == CUDAQ_RPC_STATUS_SUCCESS && cache.shape == CUDAQ_HANDLER_SHAPE_THREAD)
      status = cudaq_call_handler(cache.handler, request, response, max_result, &result_len);
    else if (status == CUDAQ_RPC_STATUS_SUCCESS)
      status = cudaq_call_launch_handler(cache.handler, request, response, max_result, &result_len);
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}
