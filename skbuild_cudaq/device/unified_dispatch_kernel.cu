// SPDX-License-Identifier: Apache-2.0
//
// The built-in unified dispatch kernel: one block; thread 0 drives the
// transport, every thread of the block calls each handler. Launch with grid
// (1,1,1) and any block size up to 1024.
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __global__ void cudaq_realtime_unified_dispatch(void *transport_ctx, uint32_t slot_size,
                                                           const cudaq_function_entry_t *table,
                                                           uint32_t table_count,
                                                           volatile int *shutdown_flag,
                                                           unsigned long long *stats) {
  __shared__ void *s_session;
  __shared__ void *s_request;
  __shared__ void *s_response;
  __shared__ const cudaq_function_entry_t *s_entry;
  __shared__ int32_t s_status;
  __shared__ int s_running;
  __shared__ uint32_t s_result_len;

  if (blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0)
    return; // one block serves the ring
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  if (leader)
    s_session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  __syncthreads();
  void *session = s_session;
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (;;) {
    if (leader) {
      void *request = nullptr;
      void *response = nullptr;
      s_running = cudaq_dev_rx_poll(session, &request, &response);
      if (s_running) {
        const cudaq_function_entry_t *entry = nullptr;
        s_status = cudaq_validate_request(request, slot_size, table, table_count, &entry);
        // Counted now, not just before the publish: the publish (a system-scope
        // release) waits for earlier stores to complete, and by then this one
        // has. Still counted before the host can see the response.
        atomicAdd(stats, 1ull);
        s_entry = entry;
        s_request = request;
        s_response = response;
        s_result_len = 0;
      }
    }
    __syncthreads();
    if (!s_running)
      break;
    int32_t status = s_status;
    uint32_t result_len = 0;
    if (status == CUDAQ_RPC_STATUS_SUCCESS) {
      status = s_entry->handler(cudaq_request_args(s_request), cudaq_request_arg_len(s_request),
                                cudaq_response_result(s_response), max_result, &result_len);
      if (result_len != 0)
        s_result_len = result_len; // handlers have one thread write *result_len
    }
    __threadfence_system(); // make every thread's result bytes visible to the host
    __syncthreads();
    if (leader) {
      uint32_t len = s_result_len;
      if (len > max_result)
        len = max_result;
      write_response_header(s_response, s_request, status, len);
      cudaq_dev_tx_publish(session, s_response);
    }
    __syncthreads();
  }
}
