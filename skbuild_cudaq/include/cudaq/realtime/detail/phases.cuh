// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/detail/phases.cuh -- the measurement build of the device run
// time (skbuild-cudaq). Not part of the contract: included by
// unified_dispatch_device.cuh, used by the header's helpers, the graph helpers,
// the host-ring hooks and the graph dispatch kernel. `skbuild-cudaq phases`
// compiles a dispatch kernel (or a graph handler's kernels), its handlers and
// the run time with -DCUDAQ_REALTIME_PHASES and reads the records back.
//
// With CUDAQ_REALTIME_PHASES defined, each request gets a record of 16 words in
// cudaq_phase_log, which the host-ring hooks define. Two clocks: clock64, the
// SM clock, counts cycles of one SM only (each SM has its own counter, started
// at its own time), so it times steps within the polling block; %globaltimer
// (ns) is one clock for the whole GPU, so it times steps that end on another
// SM or in another kernel (a graph handler's), and scales the SM clock. Its
// resolution is the GPU's (on some GPUs it advances in steps of up to a
// microsecond): the means of many requests stay exact, single values do not.
//   word  stamp        clock     path      where
//   t[0]  seen         clock64   both      the poll's acquire saw the request (the hooks)
//   t[1]  staged       clock64   both      the hooks copied it to the stage
//   t[2]  looked up    clock64   both      the entry was found (cudaq_validate_request(_cached);
//                                          the graph dispatch kernel: its graph entry)
//   t[3]  handled      clock64   dispatch  the handler returned (write_response_header or
//                                          cudaq_answer_request begins)
//   t[4]  header       clock64   dispatch  the response header is written
//   t[5]  published    clock64   dispatch  after the publish's release store (the hooks)
//   t[6]  seen         global    both      with t[0]
//   t[7]  published    global    both      with t[5]; a graph's: cudaq_graph_publish after the
//                                          release store of the response flag
//   t[8]  filled       clock64   graph     the I/O context filled (request copied) and fenced
//   t[9]  launch       clock64   graph     the cudaGraphLaunch call that succeeded began
//   t[10] launch       global    graph     with t[9]
//   t[11] launched     clock64   graph     that call returned
//   t[12] started      global    graph     the graph's kernels began: the first
//                                          cudaq_graph_io of thread 0 of block 0 of any of them
//   t[13] done         global    graph     cudaq_graph_publish entered (the graph's work done)
//   t[14] retries      count     graph     cudaGraphLaunch calls refused before that one (the
//                                          graph's previous execution had not ended)
//   t[15] handed over  global    graph     only the launch that spent its execution's budget
//                                          (CUDAQ_GRAPH_LAUNCHES_PER_EXECUTION): after its
//                                          tail launch and the baton's hand-over
// A kernel that does not call a helper leaves its stamp 0. The record index of
// the request in flight lives in the polling block's shared memory, so a stamp
// costs a device-memory store and no load after the poll's acquire; a graph's
// kernels (another module, other SMs) find the record through their I/O
// context (cudaq_graph_io_t::phase_record). The stamps still move a kernel's
// phases by up to ~0.1 us (a graph's: one more load and an atomic on thread 0
// of block 0 of each of its kernels), so compare stamped phases within one
// build, and round trips of the production build.
// Without the macro CUDAQ_REALTIME_PHASE(i) and the graph stamps are nothing:
// no code, no symbol.
#ifndef CUDAQ_REALTIME_DETAIL_PHASES_CUH
#define CUDAQ_REALTIME_DETAIL_PHASES_CUH

#ifdef CUDAQ_REALTIME_PHASES
#define CUDAQ_REALTIME_PHASE_RECORDS 65536u
#define CUDAQ_REALTIME_PHASE_WORDS 16u
typedef struct cudaq_phase_record {
  unsigned long long t[CUDAQ_REALTIME_PHASE_WORDS];
} cudaq_phase_record_t;
extern "C" {
extern __device__ cudaq_phase_record_t cudaq_phase_log[CUDAQ_REALTIME_PHASE_RECORDS];
extern __device__ unsigned int cudaq_phase_next; // requests seen so far
}
// The record of the request in flight: in shared memory (one variable for every
// translation unit: an inline function's static), so that a stamp after the
// poll's acquire costs no device-memory round trip of its own.
__device__ inline unsigned int *cudaq_detail_phase_cur() {
  __shared__ unsigned int cur;
  return &cur;
}
static __device__ __forceinline__ unsigned long long cudaq_detail_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Starts the record of a newly seen request (the hooks call it).
static __device__ __forceinline__ void cudaq_detail_phase_begin() {
  const unsigned long long c = clock64();
  const unsigned int i = cudaq_phase_next++ % CUDAQ_REALTIME_PHASE_RECORDS;
  *cudaq_detail_phase_cur() = i;
  cudaq_phase_log[i].t[0] = c;
  cudaq_phase_log[i].t[6] = cudaq_detail_globaltimer();
}
// The record of the request in flight (polling block only).
static __device__ __forceinline__ cudaq_phase_record_t *cudaq_detail_phase_record() {
  return &cudaq_phase_log[*cudaq_detail_phase_cur()];
}
#define CUDAQ_REALTIME_PHASE(i) (cudaq_detail_phase_record()->t[(i)] = clock64())
#define CUDAQ_REALTIME_PHASE_TIMER(i) (cudaq_detail_phase_record()->t[(i)] = cudaq_detail_globaltimer())
#define CUDAQ_REALTIME_PHASE_END()                                                               \
  do {                                                                                           \
    CUDAQ_REALTIME_PHASE(5);                                                                     \
    CUDAQ_REALTIME_PHASE_TIMER(7);                                                               \
  } while (0)

// A graph's stamps, made by its kernels through the address of the request's
// record (cudaq_graph_io_t::phase_record; 0: not measured, e.g. the host path).
// started: the first caller wins (thread 0 of block 0 of each kernel tries).
static __device__ __forceinline__ void cudaq_detail_phase_graph_started(unsigned long long record,
                                                                        unsigned long long now) {
  if (record != 0)
    atomicCAS(&reinterpret_cast<cudaq_phase_record_t *>(record)->t[12], 0ull, now);
}
static __device__ __forceinline__ bool cudaq_detail_phase_first_thread() {
  return (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0;
}
// done: cudaq_graph_publish entered; published: after its release of the flag.
static __device__ __forceinline__ void cudaq_detail_phase_graph_published(
    unsigned long long record, unsigned long long done, unsigned long long published) {
  if (record != 0) {
    cudaq_phase_record_t *r = reinterpret_cast<cudaq_phase_record_t *>(record);
    r->t[13] = done;
    r->t[7] = published;
  }
}
#else
#define CUDAQ_REALTIME_PHASE(i) ((void)0)
#define CUDAQ_REALTIME_PHASE_TIMER(i) ((void)0)
#define CUDAQ_REALTIME_PHASE_END() ((void)0)
#endif

#endif // CUDAQ_REALTIME_DETAIL_PHASES_CUH
