// Handlers: ordinary CUDA sources of the extension, compiled by nvcc with
// -rdc=true to LTO-IR; exported by address for the function table.
#include <cudaq/realtime/unified_dispatch_device.cuh>

#include "setuptools_pkg/config.h"

// Adds SETUPTOOLS_PKG_INCREMENT (1) to each byte, mod 256. Correct under any
// launch shape: strides by the calling group, one thread writes *result_len.
__device__ int rpc_increment(const void *args, uint32_t arg_len, void *result,
                             uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  for (uint32_t i = cudaq_handler_rank(); i < n; i += cudaq_handler_size())
    out[i] = static_cast<uint8_t>(in[i] + SETUPTOOLS_PKG_INCREMENT);
  if (cudaq_handler_rank() == 0)
    *result_len = n;
  return CUDAQ_RPC_STATUS_SUCCESS;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(rpc_increment);
