// Five exports, as the handler switch sees them:
//  - hs_add_one: thread-shaped, exported with the macro on a line of its own -- in the thread
//    switch (cudaq_dev_call_handler), a direct call;
//  - hs_reverse: thread-shaped, exported through a macro of this file -- the build's scan does
//    not see it, so it is called through the pointer, with the same result;
//  - hs_never: under an #if that is off -- in the switch (the scan reads text), referred to
//    weakly, so the module still links, and exports no such handler;
//  - hs_sum: launch-wide -- in the launch-wide switch (cudaq_dev_call_launch_handler), a
//    direct call;
//  - hs_xor: launch-wide, exported through a macro of this file -- the launch-wide switch's
//    pointer.
#include <cudaq/realtime/unified_dispatch_device.cuh>

#define HS_EXPORT_THREAD(name) CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(name)
#define HS_EXPORT_LAUNCH(name) CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(name)

extern "C" __device__ int hs_add_one(const void *args, uint32_t arg_len, void *result,
                                     uint32_t max_result_len, uint32_t *result_len) {
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = 0; i < n; ++i)
    out[i] = static_cast<uint8_t>(in[i] + 1);
  *result_len = n;
  return CUDAQ_RPC_STATUS_SUCCESS;
}
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(hs_add_one);

extern "C" __device__ int hs_reverse(const void *args, uint32_t arg_len, void *result,
                                     uint32_t max_result_len, uint32_t *result_len) {
  const uint32_t n = arg_len < max_result_len ? arg_len : max_result_len;
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = 0; i < n; ++i)
    out[i] = in[n - 1 - i];
  *result_len = n;
  return CUDAQ_RPC_STATUS_SUCCESS;
}
HS_EXPORT_THREAD(hs_reverse);

#if 0
CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(hs_never);
#endif

// The byte sum of the arguments (4 bytes, little-endian), strided over the calling group.
extern "C" __device__ int hs_sum(const void *args, uint32_t arg_len, void *result,
                                 uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *in = static_cast<const uint8_t *>(args);
  if (cudaq_handler_rank() == 0) {
    uint32_t sum = 0;
    for (uint32_t i = 0; i < arg_len; ++i)
      sum += in[i];
    if (max_result_len < 4)
      return 1;
    uint8_t *out = static_cast<uint8_t *>(result);
    for (uint32_t i = 0; i < 4; ++i)
      out[i] = static_cast<uint8_t>(sum >> (8 * i));
    *result_len = 4;
  }
  return CUDAQ_RPC_STATUS_SUCCESS;
}
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(hs_sum);

// The XOR of the argument bytes (1 byte), strided over the calling group.
extern "C" __device__ int hs_xor(const void *args, uint32_t arg_len, void *result,
                                 uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *in = static_cast<const uint8_t *>(args);
  if (cudaq_handler_rank() == 0) {
    uint8_t x = 0;
    for (uint32_t i = 0; i < arg_len; ++i)
      x ^= in[i];
    if (max_result_len < 1)
      return 1;
    static_cast<uint8_t *>(result)[0] = x;
    *result_len = 1;
  }
  return CUDAQ_RPC_STATUS_SUCCESS;
}
HS_EXPORT_LAUNCH(hs_xor);
