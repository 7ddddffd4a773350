// SPDX-License-Identifier: Apache-2.0
// An RPC handler, compiled with the extension's CUDA rules (LTO-IR and sm_90 SASS).
#include <cudaq/realtime/unified_dispatch_device.cuh>

// Returns the arguments unchanged.
extern "C" __device__ int odl_echo(const void *args, uint32_t arg_len, void *result,
                                   uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len)
    return 1;
  for (uint32_t i = cudaq_handler_rank(); i < arg_len; i += cudaq_handler_size())
    static_cast<uint8_t *>(result)[i] = static_cast<const uint8_t *>(args)[i];
  if (cudaq_handler_rank() == 0)
    *result_len = arg_len;
  return CUDAQ_RPC_STATUS_SUCCESS;
}

CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(odl_echo);
