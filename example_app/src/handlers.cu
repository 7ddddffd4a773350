// SPDX-License-Identifier: Apache-2.0
//
// RPC handlers of example_app. They run under whatever shape the dispatch kernel
// gives them -- one thread (single_thread_dispatcher), every thread of a block (the
// built-in unified kernel), every thread of a grid or a cluster -- so each one
// strides its work by the calling group, has one thread write *result_len, and
// returns the same status from every thread.
#include <cudaq/realtime/unified_dispatch_device.cuh>

// Handler-specific status: the result does not fit.
#define EXAMPLE_APP_STATUS_RESULT_TOO_LONG 1

// Adds one to each byte of the arguments.
extern "C" __device__ int rpc_increment(const void *args, uint32_t arg_len, void *result,
                                        uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len) {
    if (cudaq_handler_rank() == 0)
      *result_len = 0;
    return EXAMPLE_APP_STATUS_RESULT_TOO_LONG;
  }
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = cudaq_handler_rank(); i < arg_len; i += cudaq_handler_size())
    out[i] = static_cast<uint8_t>(in[i] + 1u);
  if (cudaq_handler_rank() == 0)
    *result_len = arg_len;
  return CUDAQ_RPC_STATUS_SUCCESS;
}

// Returns the arguments unchanged.
extern "C" __device__ int echo(const void *args, uint32_t arg_len, void *result,
                               uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len) {
    if (cudaq_handler_rank() == 0)
      *result_len = 0;
    return EXAMPLE_APP_STATUS_RESULT_TOO_LONG;
  }
  const uint8_t *in = static_cast<const uint8_t *>(args);
  uint8_t *out = static_cast<uint8_t *>(result);
  for (uint32_t i = cudaq_handler_rank(); i < arg_len; i += cudaq_handler_size())
    out[i] = in[i];
  if (cudaq_handler_rank() == 0)
    *result_len = arg_len;
  return CUDAQ_RPC_STATUS_SUCCESS;
}

// Device globals holding the handlers' addresses: what get_device_handler() reads.
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(rpc_increment);
CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(echo);
