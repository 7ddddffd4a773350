// SPDX-License-Identifier: Apache-2.0
//
// The built-in graph dispatch kernel, cudaq_realtime_graph_dispatch: the
// built-in unified kernel (one block; thread 0 polls; launch-wide handlers run
// on every thread of the block, thread-shaped ones and bad requests on thread
// 0) that also serves GRAPH_LAUNCH entries: for each of their requests it
// launches the entry's CUDA graph from the GPU, fire-and-forget, and goes on
// serving the ring while the graph answers the request itself (see
// cudaq_graph_io_t in unified_dispatch_device.cuh).
//
// Device graph launch (sm_90+) needs the device runtime (libcudadevrt, linked
// by nvJitLink), so this kernel is not part of the modules every lookup links:
// the run time links it, with the device runtime, into a module of its own
// only for a dispatcher whose table holds GRAPH_LAUNCH entries.
//
// It must run as a node of a device-launchable graph (device graph launch is
// allowed only from a kernel that runs in a graph), and a graph execution may
// launch at most 120 fire-and-forget graphs. So Dispatcher.start() launches it
// as the one node of a graph instantiated for device launch -- twice, two
// graphs on two streams, `role` 0 and 1, which take turns holding the ring: the
// *baton* (a word in device memory) names the one that serves. After
// CUDAQ_GRAPH_LAUNCHES_PER_EXECUTION graph launches the serving kernel records
// its ring position in the transport context (cudaq_dev_suspend_kernel),
// enqueues its own graph as a tail launch (it runs once this execution and
// every graph it launched are complete), hands the baton to the other one and
// returns. The other one, already running and waiting for the baton, resumes
// where it stopped (cudaq_dev_resume_kernel) at once; the tail launch starts a
// new execution that waits for the baton in its turn. So no request waits for
// an execution to end and the next to start (about 5 us, every 100 launches,
// with one kernel).
//
// The measurement build (-DCUDAQ_REALTIME_PHASES, cudaq/realtime/detail/phases.cuh)
// stamps each graph request: its entry found, its I/O context filled, the
// launch (begun, returned, the refused calls before it), the hand-over of the
// baton after a tail launch; the context carries the record's address to the
// graph's kernels, whose helpers stamp the rest.
#include <cudaq/realtime/detail/block.cuh>

#ifndef CUDAQ_GRAPH_LAUNCHES_PER_EXECUTION
// Under the 120 fire-and-forget launches a graph execution may make.
#define CUDAQ_GRAPH_LAUNCHES_PER_EXECUTION 100u
#endif
#ifndef CUDAQ_GRAPH_LAUNCH_DEADLINE_NS
// How long a launch is retried while the previous execution of the same graph
// is still running (a device graph cannot run twice at once: cudaGraphLaunch
// refuses it), before the request is answered CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED.
#define CUDAQ_GRAPH_LAUNCH_DEADLINE_NS 100000000ull
#endif

namespace {

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_gpu(uint32_t *p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int load_shutdown(volatile int *flag) {
  int v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}

// The I/O context of a GRAPH_LAUNCH entry the device path serves (its handler
// word), or null: not a graph entry, or not served here (answered -2).
__device__ __forceinline__ cudaq_graph_io_t *graph_entry_io(const void *request,
                                                            const cudaq_function_entry_t *table,
                                                            uint32_t table_count) {
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(request);
  const cudaq_function_entry_t *e =
      unified_lookup_entry(table, table_count, static_cast<uint32_t>(h.w0 >> 32));
  if (e == nullptr)
    return nullptr;
  const uint64_t id_mode = cudaq_detail_table_u64(&e->function_id);
  if (static_cast<uint8_t>(id_mode >> 32) != CUDAQ_DISPATCH_GRAPH_LAUNCH)
    return nullptr;
  return reinterpret_cast<cudaq_graph_io_t *>(cudaq_detail_table_u64(&e->handler));
}

// Whether any entry is flagged for a shared ring's other consumer: then this
// kernel polls the ring as a shared one (CUDAQ_POLL_SHARED).
__device__ __forceinline__ bool table_has_peer(const cudaq_function_entry_t *table,
                                               uint32_t table_count) {
  for (uint32_t i = 0; i < table_count; ++i)
    if (static_cast<uint8_t>(cudaq_detail_table_u64(&table[i].function_id) >> 48) &
        CUDAQ_ENTRY_FLAG_PEER)
      return true;
  return false;
}

enum GraphOutcome { kLaunched, kAnswered, kNotHandedOver, kShutdown };

// Hands the polled request to its graph: waits until the graph's previous
// request released the I/O context, fills it (the request copied into device
// memory after the context), launches the graph fire-and-forget (retried while
// the graph's previous execution is still running), or, past the deadline,
// answers the request itself with CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED.
__device__ GraphOutcome hand_to_graph(void *session, cudaq_graph_io_t *io, const void *request,
                                      void *response, uint32_t slot_size,
                                      volatile int *shutdown_flag) {
  const uint32_t sequence = io->sequence + 1;
  for (uint32_t polls = 0; load_acquire_gpu(&io->released) != sequence - 1; ++polls)
    if (polls % 64 == 63 && load_shutdown(shutdown_flag) != 0)
      return kShutdown;
  volatile uint32_t *flag = nullptr;
  uint32_t value = 0;
  if (!cudaq_dev_tx_handoff(session, response, &flag, &value))
    return kNotHandedOver;
  // The request (validated: it fits the slot) into the context's own buffer:
  // the bridge's staging area is reused by the next poll.
  uint64_t *dst = reinterpret_cast<uint64_t *>(reinterpret_cast<uint8_t *>(io) +
                                               CUDAQ_GRAPH_IO_SIZE);
  const cudaq_detail_word_t *src = static_cast<const cudaq_detail_word_t *>(request);
  const uint32_t words = (CUDAQ_RPC_HEADER_SIZE + cudaq_request_arg_len(request) + 7) / 8;
  for (uint32_t i = 0; i < words; ++i)
    dst[i] = src[i];
  io->request = dst;
  io->response = response;
  io->response_flag = flag;
  io->response_flag_value = value;
  io->slot_size = slot_size;
  io->sequence = sequence;
#ifdef CUDAQ_REALTIME_PHASES
  cudaq_phase_record_t *record = cudaq_detail_phase_record();
  io->phase_record = reinterpret_cast<unsigned long long>(record);
#endif
  __threadfence(); // the graph's kernels (other grids of this GPU) see all of it
  CUDAQ_REALTIME_PHASE(8);
  const cudaGraphExec_t exec = reinterpret_cast<cudaGraphExec_t>(io->graph_exec);
  const unsigned long long deadline = globaltimer_ns() + CUDAQ_GRAPH_LAUNCH_DEADLINE_NS;
  cudaError_t err;
#ifdef CUDAQ_REALTIME_PHASES
  unsigned long long retries = 0;
#endif
  do {
#ifdef CUDAQ_REALTIME_PHASES
    const unsigned long long launch_clock = clock64();
    const unsigned long long launch_timer = globaltimer_ns();
#endif
    err = cudaGraphLaunch(exec, cudaStreamGraphFireAndForget);
    if (err == cudaSuccess) {
#ifdef CUDAQ_REALTIME_PHASES
      record->t[11] = clock64();
      record->t[9] = launch_clock;
      record->t[10] = launch_timer;
      record->t[14] = retries;
#endif
      return kLaunched;
    }
#ifdef CUDAQ_REALTIME_PHASES
    ++retries;
#endif
  } while (globaltimer_ns() < deadline && load_shutdown(shutdown_flag) == 0);
  io->launch_error = static_cast<uint32_t>(err);
  io->launch_failures += 1;
  cudaq_detail_write_header(response, dst, CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED, 0);
  store_release_sys(flag, value);
  store_release_gpu(&io->released, sequence);
  return kAnswered;
}

// Waits until the baton names `role` (1) or shutdown (0).
__device__ __forceinline__ int wait_for_turn(const uint32_t *baton, uint32_t role,
                                             volatile int *shutdown_flag) {
  for (uint32_t polls = 0; load_acquire_gpu(baton) != role; ++polls)
    if (polls % 64 == 63 && load_shutdown(shutdown_flag) != 0)
      return 0;
  return 1;
}

} // namespace

// The six parameters of every dispatch kernel, then the baton (device memory,
// zeroed: role 0 serves first) and this kernel's role (0 or 1).
extern "C" __global__ void
cudaq_realtime_graph_dispatch(void *transport_ctx, uint32_t slot_size,
                              const cudaq_function_entry_t *table, uint32_t table_count,
                              volatile int *shutdown_flag, unsigned long long *stats,
                              uint32_t *baton, uint32_t role) {
  __shared__ cudaq_detail_block_state s;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  if (leader)
    s.running = wait_for_turn(baton, role, shutdown_flag);
  __syncthreads();
  if (!s.running)
    return;
  void *session =
      cudaq_detail_open_block<true>(s, leader, transport_ctx, shutdown_flag, table, table_count);
  if (session == nullptr)
    return;
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  const bool shared_ring = table_has_peer(table, table_count);
  uint32_t launches = 0;  // this execution's graph launches (leader)
  bool graphs_on = true;  // false once a relaunch failed: graph requests then fail

  for (;;) {
    if (leader) {
      // Serve alone until a request needs the whole block, shutdown, or the
      // launch budget of this execution is spent.
      int running = 1;
      const cudaq_function_entry_t *entry = nullptr;
      void *request = nullptr;
      void *response = nullptr;
      for (;;) {
        const int got =
            shared_ring
                ? cudaq_dev_rx_poll_into(session, &request, &response, s.stage, sizeof(s.stage),
                                         CUDAQ_POLL_WAIT | CUDAQ_POLL_SHARED)
                : cudaq_dev_rx_poll_into(session, &request, &response, s.stage, sizeof(s.stage),
                                         CUDAQ_POLL_WAIT);
        if (!got) {
          running = 0;
          break;
        }
        const cudaq_function_entry_t *e = nullptr;
        int32_t status = cudaq_validate_request(request, slot_size, table, table_count, &e);
        if (status == CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION) {
          if (shared_ring && cudaq_is_peer_request(request, table, table_count))
            continue; // the shared ring's other consumer answers it
          cudaq_graph_io_t *io = graph_entry_io(request, table, table_count);
          if (io != nullptr) {
            CUDAQ_REALTIME_PHASE(2);
            atomicAdd(stats, 1ull);
            if (!graphs_on) {
              status = CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED;
            } else {
              const GraphOutcome outcome =
                  hand_to_graph(session, io, request, response, slot_size, shutdown_flag);
              if (outcome == kShutdown) {
                running = 0;
                break;
              }
              if (outcome == kLaunched && ++launches == CUDAQ_GRAPH_LAUNCHES_PER_EXECUTION) {
                // The budget of this execution is spent: continue in a new one.
                if (cudaq_dev_suspend_kernel(session) &&
                    cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch) ==
                        cudaSuccess) {
                  store_release_gpu(baton, role ^ 1u); // the other kernel serves on at once
                  CUDAQ_REALTIME_PHASE_TIMER(15);
                  running = 0;
                  break;
                }
                graphs_on = false; // no new execution: later graph requests fail
              }
              if (outcome != kNotHandedOver)
                continue; // the graph (or hand_to_graph) answers it
              // The bridge cannot hand its publish over: not served here.
            }
            cudaq_answer_request(nullptr, CUDAQ_HANDLER_SHAPE_THREAD, status, request, response,
                                 max_result);
            cudaq_dev_tx_publish(session, response);
            continue;
          }
        }
        atomicAdd(stats, 1ull);
        if (status == CUDAQ_RPC_STATUS_SUCCESS && cudaq_entry_shape(e) != CUDAQ_HANDLER_SHAPE_THREAD) {
          entry = e;
          break; // launch-wide: hand it to the block
        }
        const cudaq_device_handler_t handler =
            e != nullptr ? reinterpret_cast<cudaq_device_handler_t>(
                               cudaq_detail_table_u64(&e->handler))
                         : nullptr;
        cudaq_answer_request(handler, CUDAQ_HANDLER_SHAPE_THREAD, status, request, response,
                             max_result);
        cudaq_dev_tx_publish(session, response);
      }
      s.running = running;
      s.entry = entry;
      s.request = request;
      s.response = response;
      s.result_len = 0;
    }
    __syncthreads();
    if (!s.running)
      break;
    uint32_t result_len = 0;
    const int32_t status = cudaq_call_launch_handler(s.entry->handler, s.request, s.response,
                                                     max_result, &result_len);
    if (result_len != 0)
      s.result_len = result_len;
    __syncthreads();
    if (leader) {
      write_response_header(s.response, s.request, status, s.result_len);
      cudaq_dev_tx_publish(session, s.response);
    }
    __syncthreads();
  }
}
