// The basic one-thread loop the test kernels share (tests/gpu_kernels, tests/packages): one
// thread opens the transport session and, until shutdown, polls a request, looks its handler
// up, calls it through the table's pointer, writes the response header and publishes the
// response, counting each request in *stats (by `increment`) before it publishes. The
// product's example kernels (example_app/src/*.cu) spell their loops out, as the docs show them.
//
// A test package carries it as a symbolic link (src/cudaq_test/one_thread_loop.cuh, or
// include/ where an sdist must carry it), which the tests' copies of the package resolve;
// tests/gpu_kernels finds it through -I tests/include. Include it as
// "cudaq_test/one_thread_loop.cuh".
#pragma once

#include <cudaq/realtime/unified_dispatch_device.cuh>

// A dispatch kernel's own arguments (CUDAQ_DISPATCH_KERNEL_PARAMS), passed on.
#define CUDAQ_TEST_KERNEL_ARGS transport_ctx, slot_size, table, table_count, shutdown_flag, stats

static __device__ __forceinline__ void
cudaq_test_serve_one_thread(void *transport_ctx, uint32_t slot_size,
                            const cudaq_function_entry_t *table, uint32_t table_count,
                            volatile int *shutdown_flag, unsigned long long *stats,
                            unsigned long long increment = 1ull) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  void *request = nullptr;
  void *response = nullptr;
  while (cudaq_dev_rx_poll(session, &request, &response)) {
    const cudaq_function_entry_t *entry = nullptr;
    int32_t status = cudaq_validate_request(request, slot_size, table, table_count, &entry);
    uint32_t result_len = 0;
    if (status == CUDAQ_RPC_STATUS_SUCCESS) {
      status = entry->handler(cudaq_request_args(request), cudaq_request_arg_len(request),
                              cudaq_response_result(response), max_result, &result_len);
      if (result_len > max_result)
        result_len = max_result;
    }
    atomicAdd(stats, increment); // before the publish: counted once the host sees the answer
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}
