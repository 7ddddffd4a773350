// Graph handlers (CUDAQ_DISPATCH_GRAPH_LAUNCH): included by
// <cudaq/realtime/unified_dispatch_device.cuh>, never on its own.
#ifndef CUDAQ_REALTIME_DETAIL_GRAPH_CUH
#define CUDAQ_REALTIME_DETAIL_GRAPH_CUH

// ---------------------------------------------------------------------------
// Graph handlers (CUDAQ_DISPATCH_GRAPH_LAUNCH).
//
// A graph handler is a CUDA graph -- several kernels, the whole GPU -- that the
// built-in dispatch kernel launches from the GPU for each of its requests
// (device graph launch, sm_90+: the graph instantiated with
// CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH; the run time uploads it). The
// launch is fire-and-forget: the dispatch kernel goes on serving the ring, and
// the graph answers the request itself. The host path (HostDispatcher) serves
// the same graph from the host, on a worker stream, with the same I/O context:
// its publish then goes to the worker's publish word, and the host publishes
// the response in the ring once it sees it there. The kernels do not change. Its kernels find the request through a
// *mailbox*: 8 bytes of device memory (skbuild_cudaq.realtime.GraphMailbox)
// whose address the graph's kernels were captured with, and which holds the
// address of the entry's cudaq_graph_io_t (written while no graph of it runs).
// So:
//
//   extern "C" __global__ void decode_step(void *const *mailbox, ...) {
//     const cudaq_graph_io_t *io = cudaq_graph_io(mailbox);
//     const uint8_t *args = (const uint8_t *)cudaq_graph_args(io);
//     uint32_t n = cudaq_graph_arg_len(io);
//     ... (any number of kernels, grids, blocks)
//   }
//   extern "C" __global__ void decode_last(void *const *mailbox, ...) {
//     cudaq_graph_io_t *io = cudaq_graph_io(mailbox);
//     ... write the result to cudaq_graph_result(io) (at most cudaq_graph_max_result(io))
//     __syncthreads();                            // every store of the result first
//     if (threadIdx.x == 0) cudaq_graph_publish(io, status, result_len);
//   }
//
// Rules: exactly one thread publishes each request, once, from the graph's last
// kernel, after every store of the result (a barrier orders its block's; a
// multi-block last kernel must order its other blocks' stores itself, e.g. let a
// final one-block kernel publish); after cudaq_graph_publish nothing reads the
// I/O context (the dispatcher refills it for the graph's next request). The
// request is a copy in device memory: reading it costs no PCIe round trip.
// ---------------------------------------------------------------------------
typedef struct cudaq_graph_io {
  const void *request;              // RPC header + arguments (device memory)
  void *response;                   // where the response header + result go
  volatile uint32_t *response_flag; // publishing stores response_flag_value here
  uint32_t response_flag_value;     //   (release, system scope), after the response
  uint32_t slot_size;               // bytes of a slot: the result holds slot_size - 24
  uint32_t sequence;                // requests handed to this graph so far (this one's number)
  uint32_t released;                // set to `sequence` by cudaq_graph_publish
  // The dispatcher's own (read-only to the graph):
  unsigned long long graph_exec; // the cudaGraphExec_t it launches
  uint32_t launch_error;         // cudaError_t of the last launch that failed (0: none)
  uint32_t launch_failures;      // requests answered CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED
  // The measurement build's (-DCUDAQ_REALTIME_PHASES, detail/phases.cuh): the device
  // address of this request's phase record, which the graph helpers stamp; 0 otherwise.
  unsigned long long phase_record;
} cudaq_graph_io_t;

// Bytes of a graph entry's device record: the I/O context, then the request copy.
#define CUDAQ_GRAPH_IO_SIZE 64u
static_assert(sizeof(cudaq_graph_io_t) <= CUDAQ_GRAPH_IO_SIZE, "mirrored in realtime/graph.py");

// The I/O context of the request the graph serves (read through its mailbox).
// A plain load: the mailbox does not change while a graph that reads it runs.
// (The measurement build: the first call of thread 0 of block 0 of any of the
// graph's kernels stamps the request's `started`.)
static __device__ __forceinline__ cudaq_graph_io_t *cudaq_graph_io(void *const *mailbox) {
#ifdef CUDAQ_REALTIME_PHASES
  const bool first = cudaq_detail_phase_first_thread();
  const unsigned long long entered = first ? cudaq_detail_globaltimer() : 0ull;
  cudaq_graph_io_t *io = static_cast<cudaq_graph_io_t *>(*mailbox);
  if (first)
    cudaq_detail_phase_graph_started(io->phase_record, entered);
  return io;
#else
  return static_cast<cudaq_graph_io_t *>(*mailbox);
#endif
}
// The request's arguments, their length, the result area and its room.
static __device__ __forceinline__ const void *cudaq_graph_args(const cudaq_graph_io_t *io) {
  return static_cast<const uint8_t *>(io->request) + CUDAQ_RPC_HEADER_SIZE;
}
static __device__ __forceinline__ uint32_t cudaq_graph_arg_len(const cudaq_graph_io_t *io) {
  return static_cast<const cudaq_rpc_request_header_t *>(io->request)->arg_len;
}
static __device__ __forceinline__ void *cudaq_graph_result(const cudaq_graph_io_t *io) {
  return static_cast<uint8_t *>(io->response) + CUDAQ_RPC_HEADER_SIZE;
}
static __device__ __forceinline__ uint32_t cudaq_graph_max_result(const cudaq_graph_io_t *io) {
  return io->slot_size - CUDAQ_RPC_HEADER_SIZE;
}

// Answers the graph's request: writes the response header (`status`, `result_len`
// capped at the slot's room, the request id and timestamp echoed) and publishes
// it, then hands the I/O context back to the dispatcher. One thread, once per
// request, after every store of the result (see above).
static __device__ __forceinline__ void cudaq_graph_publish(cudaq_graph_io_t *io, int32_t status,
                                                           uint32_t result_len) {
#ifdef CUDAQ_REALTIME_PHASES
  const unsigned long long done = cudaq_detail_globaltimer();
  const unsigned long long record = io->phase_record; // read before the context is released
#endif
  const void *request = io->request;
  void *response = io->response;
  volatile uint32_t *flag = io->response_flag;
  const uint32_t value = io->response_flag_value;
  const uint32_t sequence = io->sequence;
  const uint32_t room = io->slot_size - CUDAQ_RPC_HEADER_SIZE;
  cudaq_detail_write_header(response, request, status, result_len < room ? result_len : room);
  // The result may come from earlier kernels of the graph: make every store this
  // thread can observe visible to the host before the flag.
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(flag), "r"(value) : "memory");
#ifdef CUDAQ_REALTIME_PHASES
  const unsigned long long published = cudaq_detail_globaltimer();
#endif
  asm volatile("st.release.gpu.global.u32 [%0], %1;" : : "l"(&io->released), "r"(sequence)
               : "memory");
#ifdef CUDAQ_REALTIME_PHASES
  cudaq_detail_phase_graph_published(record, done, published);
#endif
}

// Rank and size of the calling group, for handlers that stride their work.
// A dispatch kernel calls handlers either from one thread of a one-thread
// launch, or from every thread of its launch (a block, a cooperative grid, a
// cluster). Handlers stride by the whole launch: rank is the linear thread
// index over the grid, size the number of threads in the grid.
static __device__ __forceinline__ uint32_t cudaq_handler_size() {
  return blockDim.x * blockDim.y * blockDim.z * gridDim.x * gridDim.y * gridDim.z;
}
static __device__ __forceinline__ uint32_t cudaq_handler_rank() {
  const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const uint32_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return block * (blockDim.x * blockDim.y * blockDim.z) + thread;
}


#endif // CUDAQ_REALTIME_DETAIL_GRAPH_CUH
