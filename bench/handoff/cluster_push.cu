// SPDX-License-Identifier: Apache-2.0
//
// bench/phases.py probe (hand-off variant): the cluster kernel with no cluster
// barrier per request (tried for example_app in session 7: slower than the
// example's two cluster.sync() on an H200, kept to compare side by side).
//
// A thread-block-cluster dispatch kernel (sm_90+): one cluster serves the ring
// and every thread of every block of the cluster calls each launch-wide handler
// (thread 0 of block 0 serves thread-shaped handlers alone, with no barrier). Launch
// with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION and a grid of exactly one cluster
// (launchers.cluster does). Thread 0 of block 0 (the leader) drives the
// transport; a request that fits is staged in its shared memory.
//
// A launch-wide request goes out one to all and comes back all to one, through
// distributed shared memory, with no cluster barrier on the way (a
// `cluster.sync()` is every block arriving and every block waiting for all,
// twice a request):
//  - the leader writes the request's mailbox into each block's own shared
//    memory (remote stores), then raises each block's generation counter there
//    (one fence at cluster scope, then relaxed stores: a release); thread 0 of
//    the block waits on its local counter (an acquire: a shared-memory load, no
//    round trip to another SM) and releases its block with __syncthreads(). The block then reads
//    everything from its own shared memory; only a staged request's bytes are
//    read from the leader's (the handler's arguments).
//  - after the handler and a __syncthreads(), thread 0 of every other block
//    adds one to a done counter in the leader's shared memory (a release at
//    cluster scope); the leader waits on it locally (an acquire), writes the
//    header and publishes. The blocks' result bytes reach the host before the
//    publish with no fence of their own: each block's barrier orders them
//    before its release, the leader's acquire synchronizes with every release,
//    and the publish is a release at system scope (PTX releases are
//    cumulative).
#include <cooperative_groups.h>
#include <cudaq/realtime/unified_dispatch_device.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "cluster_dispatcher.cu needs thread-block clusters: build it for sm_90 or newer"
#endif

namespace cg = cooperative_groups;

namespace {
// Each block's copy, written by the leader before it raises `go`.
struct Mailbox {
  const void *request; // the request as this block can address it
  void *response;
  const cudaq_function_entry_t *entry;
  int32_t running; // 0: stop
};

// Generic addresses: a block's own shared memory, or another block's (its
// address from cluster.map_shared_rank, distributed shared memory).
__device__ __forceinline__ unsigned int ld_acquire_cluster(const unsigned int *p) {
  unsigned int v;
  asm volatile("ld.acquire.cluster.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// A fence then relaxed stores: one release for every block's counter (a
// release store each would fence once a block).
__device__ __forceinline__ void fence_acq_rel_cluster() {
  asm volatile("fence.acq_rel.cluster;" : : : "memory");
}
__device__ __forceinline__ void st_relaxed_cluster(unsigned int *p, unsigned int v) {
  asm volatile("st.relaxed.cluster.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_cluster_add(unsigned int *p, unsigned int v) {
  asm volatile("red.release.cluster.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
} // namespace

extern "C" __global__ void cluster_push_dispatcher(void *transport_ctx, uint32_t slot_size,
                                              const cudaq_function_entry_t *table,
                                              uint32_t table_count, volatile int *shutdown_flag,
                                              unsigned long long *stats) {
  __shared__ Mailbox s_box;
  __shared__ unsigned int s_go;   // requests this block was handed (generation)
  __shared__ unsigned int s_done; // leader's block: the other blocks done, in total
  __shared__ uint32_t s_result_len; // leader's block: what the handler wrote
  __shared__ void *s_session;       // leader's block: what cudaq_dev_enter_kernel gave
  // The leader's requests land here when they fit (cudaq_dev_rx_poll_into): a
  // thread-shaped handler reads its arguments from the leader's own shared
  // memory, the other blocks read a launch-wide request's from distributed
  // shared memory; neither is a device-memory round trip.
  __shared__ __align__(16) uint8_t s_stage[256];
  cg::cluster_group cluster = cg::this_cluster();
  // Handlers stride over the whole grid: it must be this one cluster.
  const uint32_t grid_blocks = gridDim.x * gridDim.y * gridDim.z;
  if (cluster.num_blocks() != grid_blocks)
    return; // uniform over the grid: every block returns, nothing is served
  table = cudaq_table_to_shared(table, table_count); // each block's copy; the leader's is used
  const uint32_t blocks = cluster.num_blocks();
  const uint32_t rank = cluster.block_rank();
  const bool block_leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const bool leader = rank == 0 && block_leader;
  if (block_leader) {
    s_go = 0;
    s_done = 0;
  }
  if (leader)
    s_session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  cluster.sync(); // the counters are set in every block; the session is known
  void *const session = *cluster.map_shared_rank(&s_session, 0);
  if (session == nullptr) {
    cluster.sync(); // block 0's shared memory must outlive the other blocks' reads
    return;
  }
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  unsigned int *const leader_done = cluster.map_shared_rank(&s_done, 0);
  uint32_t *const leader_result_len = cluster.map_shared_rank(&s_result_len, 0);

  for (unsigned int generation = 1;; ++generation) {
    if (leader) {
      // Serve alone what needs no other thread (thread-shaped handlers, bad
      // requests); hand a launch-wide request to the whole cluster (or stop).
      void *request = nullptr;
      void *response = nullptr;
      const cudaq_function_entry_t *entry = nullptr;
      const int running = cudaq_serve_until_launch_wide(session, slot_size, table, table_count,
                                                        stats, s_stage, sizeof(s_stage),
                                                        &request, &response, &entry);
      s_result_len = 0;
      // Every other block gets its mailbox, then its go. A request staged in
      // this block's shared memory is read there through its address in the
      // cluster's distributed shared memory; the entry is the same offset in
      // every block's copy of the table.
      const bool staged = request != nullptr && __isShared(request);
      const void *shared_request =
          staged ? cluster.map_shared_rank(static_cast<uint8_t *>(request), 0) : request;
      for (uint32_t r = 1; r < blocks; ++r) {
        Mailbox *box = cluster.map_shared_rank(&s_box, r);
        box->request = shared_request;
        box->response = response;
        box->entry = entry;
        box->running = running;
      }
      fence_acq_rel_cluster(); // with the stores below: a release of every mailbox
      for (uint32_t r = 1; r < blocks; ++r)
        st_relaxed_cluster(cluster.map_shared_rank(&s_go, r), generation);
      s_box.request = request;
      s_box.response = response;
      s_box.entry = entry;
      s_box.running = running;
    } else if (block_leader) {
      while (ld_acquire_cluster(&s_go) != generation) {
      }
    }
    __syncthreads(); // the block sees the mailbox its thread 0 acquired
    if (!s_box.running)
      break;
    const void *request = s_box.request;
    void *response = s_box.response;
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_handler(s_box.entry->handler, request, response, max_result, &result_len);
    if (result_len != 0)
      *leader_result_len = result_len; // the one thread that wrote it (to block 0)
    __syncthreads(); // this block is done with the request (and its mailbox)
    if (leader) {
      // every other block done (the counter only grows: blocks - 1 a request)
      while (ld_acquire_cluster(&s_done) != (blocks - 1) * generation) {
      }
      write_response_header(response, request, status, s_result_len); // at most max_result
      cudaq_dev_tx_publish(session, response); // counted when seen
    } else if (block_leader) {
      red_release_cluster_add(leader_done, 1);
    }
    // The leader rewrites a block's mailbox only after every block is done with it.
  }
  // Nobody exits while another block may still read or write its shared memory.
  cluster.sync();
}
