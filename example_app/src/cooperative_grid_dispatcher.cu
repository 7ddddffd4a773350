// SPDX-License-Identifier: Apache-2.0
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
//    copies the mailbox into its block's shared memory (one round trip to L2
//    for the block, not one per thread) and releases its block with
//    __syncthreads();
//  - after the handler and a __syncthreads(), thread 0 of every other block
//    adds one to one of 32 done counters (block b to counter b % 32, a release
//    at GPU scope; 32 counters on separate lines, so that the additions are
//    not serialized on one address); the leader's warp waits on the 32 at once
//    (an acquire per lane) until they say every block is done, then the leader
//    publishes. The blocks' result bytes reach the host before the publish
//    with no fence of their own: each block's barrier orders them before its
//    release, the leader's warp acquires every release and __syncwarp()
//    orders that before the leader's publish, a release at system scope (PTX
//    releases are cumulative).
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
constexpr unsigned int kDoneCounters = 32; // one a lane of the leader's warp
constexpr unsigned int kDoneStride = 32;   // words: 128 bytes, a line each
__device__ Mailbox g_coop_mailbox;
__device__ unsigned int g_coop_go; // requests handed to the grid (generation)
// blocks other than the leader's done, in total: block b adds to counter b % 32
__device__ unsigned int g_coop_done[kDoneCounters * kDoneStride];

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

extern "C" __global__ void cooperative_grid_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                       const cudaq_function_entry_t *table,
                                                       uint32_t table_count,
                                                       volatile int *shutdown_flag,
                                                       unsigned long long *stats) {
  cg::grid_group grid = cg::this_grid();
  if (!grid.is_valid())
    return; // not launched cooperatively: grid.sync() would be undefined
  __shared__ Mailbox s_box; // this block's copy of the request's mailbox
  volatile Mailbox *box = &g_coop_mailbox; // volatile: never a stale L1 copy
  const unsigned int block_thread =
      threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned int block_threads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned int block = static_cast<unsigned int>(grid.block_rank());
  const unsigned int blocks = static_cast<unsigned int>(grid.num_blocks());
  const bool block_leader = block_thread == 0;
  const bool leader = block == 0 && block_leader;
  // The leader's warp waits on the done counters: lane c on counters c, c + lanes, ...
  const unsigned int lanes = block_threads < 32 ? block_threads : 32;
  const bool leader_warp = block == 0 && block_thread < 32;
  table = cudaq_table_to_shared(table, table_count); // each block's copy; the leader's is used
  if (leader_warp) {
    for (unsigned int c = block_thread; c < kDoneCounters; c += lanes)
      g_coop_done[c * kDoneStride] = 0;
  }
  if (leader) {
    box->session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
    g_coop_go = 0;
  }
  grid.sync(); // once: the session and the counters are visible to every block
  void *session = box->session;
  if (session == nullptr)
    return; // every thread sees the same value: the whole grid returns
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (unsigned int generation = 1;; ++generation) {
    if (leader) {
      // Serve alone what needs no other thread (thread-shaped handlers, bad
      // requests); hand a launch-wide request to the whole grid (or stop).
      void *request = nullptr;
      void *response = nullptr;
      const cudaq_function_entry_t *entry = nullptr;
      const int running = cudaq_serve_until_launch_wide(session, slot_size, table, table_count,
                                                        stats, nullptr, 0, &request, &response,
                                                        &entry);
      box->entry = entry;
      box->request = request;
      box->response = response;
      box->running = running;
      box->result_len = 0;
      st_release_gpu(&g_coop_go, generation); // hand it to every block
      s_box.entry = entry;
      s_box.request = request;
      s_box.response = response;
      s_box.running = running;
    } else if (block_leader) {
      while (ld_acquire_gpu(&g_coop_go) != generation) {
      }
      // After the acquire: the mailbox as the leader wrote it, one load each,
      // all in flight together.
      s_box.entry = box->entry;
      s_box.request = box->request;
      s_box.response = box->response;
      s_box.running = box->running;
    }
    __syncthreads(); // the block sees the mailbox its thread 0 copied
    if (!s_box.running)
      break;
    const void *request = s_box.request;
    void *response = s_box.response;
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_launch_handler(s_box.entry->handler, request, response, max_result, &result_len);
    if (result_len != 0)
      box->result_len = result_len; // the one thread that wrote it
    __syncthreads(); // this block is done with the request
    if (leader_warp) {
      // Every other block done: counter c has had one addition a request from
      // each block b >= 1 with b % 32 == c (the counters only grow).
      for (unsigned int c = block_thread; c < kDoneCounters; c += lanes) {
        const unsigned int per_request = c == 0 ? (blocks - 1) / kDoneCounters
                                         : c < blocks ? (blocks - 1 - c) / kDoneCounters + 1
                                                      : 0;
        while (ld_acquire_gpu(&g_coop_done[c * kDoneStride]) != per_request * generation) {
        }
      }
      __syncwarp((1ull << lanes) - 1); // the leader after every lane's acquire
      if (leader) {
        write_response_header(response, request, status, box->result_len); // at most max_result
        cudaq_dev_tx_publish(session, response); // counted when seen
      }
    } else if (block_leader) {
      red_release_gpu_add(&g_coop_done[(block % kDoneCounters) * kDoneStride], 1);
    }
    // The leader rewrites the mailbox only after every block is done with it.
  }
}
