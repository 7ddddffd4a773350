// SPDX-License-Identifier: Apache-2.0
//
// bench/phases.py probe (hand-off variant): example_app's cooperative kernel as
// it was before session 7 -- every thread reads the mailbox in global memory,
// and every block adds to one done counter -- to compare side by side.
//
// A cooperative-grid dispatch kernel: every thread of every block calls each
// launch-wide handler (thread 0 of block 0 serves thread-shaped handlers alone,
// with no grid barrier). Launch cooperatively (CU_LAUNCH_ATTRIBUTE_COOPERATIVE) with a grid no
// larger than what can be co-resident (launchers.cooperative_grid sizes it from
// occupancy). Thread 0 of block 0 (the leader) drives the transport.
//
// A launch-wide request goes to the grid through a mailbox in global memory
// (shared memory is per block), so one launch of this kernel per linked module
// may run at a time. Two grid barriers a request (grid.sync: every block
// arrives, every block waits for all) would cost ~1.5 us each on an H200 with
// a block per SM; the hand-off is one to all and the collection all to one:
//  - the leader fills the mailbox and raises a generation counter (a release
//    at GPU scope); thread 0 of every other block waits for it (an acquire),
//    then releases its block with __syncthreads();
//  - after the handler and a __syncthreads(), thread 0 of every other block adds
//    one to a done counter (a release at GPU scope); the leader waits until the
//    counter says every block is done (an acquire), then publishes. The
//    blocks' result bytes reach the host before the publish with no fence of
//    their own: each block's barrier orders them before its release, the
//    leader's acquire synchronizes with every release, and the publish is a
//    release at system scope (PTX releases are cumulative).
#include <cooperative_groups.h>
#include <cudaq/realtime/unified_dispatch_device.cuh>

namespace cg = cooperative_groups;

namespace {
struct Mailbox {
  void *session;
  const void *request;
  void *response;
  const cudaq_function_entry_t *entry;
  int32_t running;
  uint32_t result_len;
};
__device__ Mailbox g_coop_mailbox;
__device__ unsigned int g_coop_go;   // requests handed to the grid (generation)
__device__ unsigned int g_coop_done; // blocks other than the leader's done, in total

__device__ __forceinline__ unsigned int ld_acquire_gpu(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned int *p, unsigned int v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_gpu_add(unsigned int *p, unsigned int v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
} // namespace

extern "C" __global__ void coop_counter_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                   const cudaq_function_entry_t *table,
                                                   uint32_t table_count,
                                                   volatile int *shutdown_flag,
                                                   unsigned long long *stats) {
  cg::grid_group grid = cg::this_grid();
  if (!grid.is_valid())
    return; // not launched cooperatively: grid.sync() would be undefined
  volatile Mailbox *box = &g_coop_mailbox; // volatile: never a stale L1 copy
  const bool leader = grid.thread_rank() == 0;
  const bool block_leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const unsigned int other_blocks = static_cast<unsigned int>(grid.num_blocks()) - 1;
  table = cudaq_table_to_shared(table, table_count); // each block's copy; the leader's is used
  if (leader) {
    box->session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
    g_coop_go = 0;
    g_coop_done = 0;
  }
  grid.sync(); // once: the session and the counters are visible to every block
  void *session = box->session;
  if (session == nullptr)
    return; // every thread sees the same value: the whole grid returns
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (unsigned int generation = 0;;) {
    if (leader) {
      // Serve alone what needs no other thread (thread-shaped handlers, bad
      // requests); hand a launch-wide request to the whole grid (or stop).
      void *request = nullptr;
      void *response = nullptr;
      const cudaq_function_entry_t *entry = nullptr;
      box->running = cudaq_serve_until_launch_wide(session, slot_size, table, table_count,
                                                   stats, nullptr, 0, &request, &response,
                                                   &entry);
      box->entry = entry;
      box->request = request;
      box->response = response;
      box->result_len = 0;
      st_release_gpu(&g_coop_go, generation + 1); // hand it to every block
    } else if (block_leader) {
      while (ld_acquire_gpu(&g_coop_go) == generation) {
      }
    }
    __syncthreads(); // the block sees what its thread 0 acquired
    ++generation;
    if (!box->running)
      break;
    const void *request = box->request;
    void *response = box->response;
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_handler(box->entry->handler, request, response, max_result, &result_len);
    if (result_len != 0)
      box->result_len = result_len; // the one thread that wrote it
    __syncthreads(); // this block is done with the request
    if (leader) {
      // every other block done (the counter only grows: other_blocks a request)
      while (ld_acquire_gpu(&g_coop_done) != other_blocks * generation) {
      }
      write_response_header(response, request, status, box->result_len); // at most max_result
      cudaq_dev_tx_publish(session, response); // counted when seen
    } else if (block_leader) {
      red_release_gpu_add(&g_coop_done, 1);
    }
    // The leader rewrites the mailbox only after every block is done with it.
  }
}
