// SPDX-License-Identifier: Apache-2.0
// A one-thread dispatch kernel (launch grid 1, block 1), side-compiled by skbuild-cudaq:
// the extension's own device link never sees it.
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __global__ void odl_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  void *session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  void *request = nullptr, *response = nullptr;
  while (session != nullptr && cudaq_dev_rx_poll(session, &request, &response)) {
    const cudaq_function_entry_t *entry = nullptr;
    int32_t status = cudaq_validate_request(request, slot_size, table, table_count, &entry);
    uint32_t result_len = 0;
    if (status == CUDAQ_RPC_STATUS_SUCCESS)
      status = entry->handler(cudaq_request_args(request), cudaq_request_arg_len(request),
                              cudaq_response_result(response),
                              slot_size - CUDAQ_RPC_HEADER_SIZE, &result_len);
    atomicAdd(stats, 1ull);
    write_response_header(response, request, status, result_len);
    cudaq_dev_tx_publish(session, response);
  }
}
