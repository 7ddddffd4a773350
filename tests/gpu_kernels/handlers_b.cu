// Second handler translation unit (a second fatbin container in __nv_relfatbin).
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __device__ int echo(const void *args, uint32_t arg_len, void *result,
                               uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len)
    return 1;
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = cudaq_handler_rank(); i < arg_len; i += cudaq_handler_size())
    out[i] = in[i];
  if (cudaq_handler_rank() == 0)
    *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(echo);
