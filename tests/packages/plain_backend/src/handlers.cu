// A handler side-compiled like a kernel: the extension needs no CUDA language.
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __device__ int echo(const void *args, uint32_t arg_len, void *result,
                               uint32_t max_result_len, uint32_t *result_len) {
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = cudaq_handler_rank(); i < n; i += cudaq_handler_size())
    out[i] = in[i];
  if (cudaq_handler_rank() == 0)
    *result_len = n;
  return CUDAQ_RPC_STATUS_SUCCESS;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(echo);
