// SPDX-License-Identifier: Apache-2.0
//
// The default forms of the optional hooks (cudaq_dev_enter_lane,
// cudaq_dev_rx_try_poll, cudaq_dev_rx_poll_into, cudaq_dev_tx_handoff,
// cudaq_dev_suspend_kernel, cudaq_dev_resume_kernel) for bridges that define only
// the three transport hooks, and of cudaq_dev_call_handler and
// cudaq_dev_call_launch_handler for modules without a handler switch. They are
// `inline` with external linkage: a bridge's (or the module's) own definition
// replaces them at link time (nvJitLink keeps a strong definition over an inline
// one), and without one they are what kernels link against.
//
// A file of their own: every module links it, the graph module (which leaves the
// built-in unified kernels of unified_dispatch_kernel.cu out) too.
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" {
__device__ inline __attribute__((used)) void *
cudaq_dev_enter_lane(void *transport_ctx, volatile int *shutdown_flag, uint32_t lane,
                     uint32_t num_lanes) {
  // No lanes: lane 0 gets the whole transport, the other lanes nothing.
  if (num_lanes == 0 || num_lanes > 32 || lane != 0)
    return nullptr;
  return cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
}

__device__ inline __attribute__((used)) int cudaq_dev_rx_try_poll(void *session, void **request,
                                                                   void **response) {
  // No non-blocking poll in the three-hook contract: wait (0 once shutdown is set).
  return cudaq_dev_rx_poll(session, request, response);
}

__device__ inline __attribute__((used)) int
cudaq_dev_rx_poll_into(void *session, void **request, void **response, void *stage,
                       uint32_t stage_bytes, int wait) {
  const int got = wait ? cudaq_dev_rx_poll(session, request, response)
                       : cudaq_dev_rx_try_poll(session, request, response);
  if (got != 1 || stage == nullptr)
    return got;
  // Copy the request if it fits (its bytes may be anywhere the bridge put them).
  const uint8_t *src = static_cast<const uint8_t *>(*request);
  const uint32_t arg_len = cudaq_request_arg_len(src);
  if (stage_bytes < CUDAQ_RPC_HEADER_SIZE || arg_len > stage_bytes - CUDAQ_RPC_HEADER_SIZE)
    return got;
  uint8_t *dst = static_cast<uint8_t *>(stage);
  const uint32_t n = CUDAQ_RPC_HEADER_SIZE + arg_len;
  for (uint32_t i = 0; i < n; ++i)
    dst[i] = src[i];
  *request = stage;
  return got;
}

__device__ inline __attribute__((used)) int cudaq_dev_tx_handoff(void *session, void *response,
                                                                  volatile uint32_t **flag,
                                                                  uint32_t *value) {
  // No hand-over in the three-hook contract: the dispatch kernel publishes itself.
  (void)session;
  (void)response;
  *flag = nullptr;
  *value = 0;
  return 0;
}

__device__ inline __attribute__((used)) int cudaq_dev_suspend_kernel(void *session) {
  // No resumable position in the three-hook contract.
  (void)session;
  return 0;
}

__device__ inline __attribute__((used)) void *cudaq_dev_resume_kernel(void *transport_ctx,
                                                                      volatile int *shutdown_flag) {
  // Nothing was suspended (cudaq_dev_suspend_kernel says 0): a fresh session.
  return cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
}

__device__ inline __attribute__((used)) int
cudaq_dev_call_handler(cudaq_device_handler_t handler, const void *args, uint32_t arg_len,
                       void *result, uint32_t max_result_len, uint32_t *result_len) {
  // No handler switch in the module: the pointer, with a length of its own.
  return cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, result_len);
}

__device__ inline __attribute__((used)) int
cudaq_dev_call_launch_handler(cudaq_device_handler_t handler, const void *args, uint32_t arg_len,
                              void *result, uint32_t max_result_len, uint32_t *result_len) {
  // No handler switch in the module (or one from a release without this hook):
  // the pointer, with a length of its own.
  return cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, result_len);
}
}
