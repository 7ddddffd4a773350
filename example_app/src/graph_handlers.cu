// SPDX-License-Identifier: Apache-2.0
//
// A graph handler (dispatch mode GRAPH_LAUNCH): `graph_increment` answers like
// rpc_increment (each byte plus one), computed by a CUDA graph of two kernels
// that the built-in dispatch kernel launches from the GPU for each request, or
// a HostDispatcher from the host (example_app.graphs builds the graph;
// skbuild_cudaq.realtime.graph and .host_graphs explain the model):
//   1. graph_increment_stage, any grid: every thread of the grid adds one to
//      its bytes of the request's arguments, into a scratch buffer in device
//      memory;
//   2. graph_increment_publish, one block: copies the scratch buffer into the
//      response slot, and one thread publishes the response once every thread
//      of the block has stored its part (the barrier orders those stores).
// Both find the request through the mailbox they were captured with
// (cudaq_graph_io). Compiled on its own to LTO-IR like the dispatch kernels
// ([tool.cudaq.dispatch-kernels] in pyproject.toml): plain kernels that the run
// time links, looked up with get_device_kernel.
#include <cudaq/realtime/unified_dispatch_device.cuh>

// Handler-specific status: the request does not fit the scratch buffer or the slot.
#define GRAPH_INCREMENT_STATUS_TOO_LONG 1

extern "C" __global__ void graph_increment_stage(void *const *mailbox, uint8_t *scratch,
                                                 uint32_t scratch_bytes) {
  const cudaq_graph_io_t *io = cudaq_graph_io(mailbox);
  const uint32_t n = cudaq_graph_arg_len(io);
  if (n > scratch_bytes)
    return; // the publishing kernel answers it
  const uint8_t *args = static_cast<const uint8_t *>(cudaq_graph_args(io));
  const uint32_t stride = gridDim.x * blockDim.x;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    scratch[i] = static_cast<uint8_t>(args[i] + 1u);
}

extern "C" __global__ void graph_increment_publish(void *const *mailbox, const uint8_t *scratch,
                                                   uint32_t scratch_bytes) {
  cudaq_graph_io_t *io = cudaq_graph_io(mailbox);
  const uint32_t n = cudaq_graph_arg_len(io);
  const bool fits = n <= scratch_bytes && n <= cudaq_graph_max_result(io);
  if (fits) {
    uint8_t *result = static_cast<uint8_t *>(cudaq_graph_result(io));
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
      result[i] = scratch[i];
  }
  __syncthreads(); // every thread's result bytes before the publish
  if (threadIdx.x == 0)
    cudaq_graph_publish(io, fits ? CUDAQ_RPC_STATUS_SUCCESS : GRAPH_INCREMENT_STATUS_TOO_LONG,
                        fits ? n : 0);
}
