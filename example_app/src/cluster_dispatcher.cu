// SPDX-License-Identifier: Apache-2.0
//
// A thread-block-cluster dispatch kernel (sm_90+): one cluster serves the ring
// and every thread of every block of the cluster calls each launch-wide handler
// (thread 0 of block 0 serves thread-shaped handlers alone, with no barrier). Launch
// with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION and a grid of exactly one cluster
// (launchers.cluster does). Thread 0 of block 0 (the leader) drives the
// transport and writes the request into a mailbox in its shared memory (the
// request itself, when it fits, into a stage there); the other blocks read both
// through distributed shared memory after a cluster barrier, and a second
// barrier collects the blocks before the response is published.
//
// Each barrier is split by role. `cluster.sync()` is every thread arriving with
// release semantics (a GPU-scope fence in every warp) and waiting with acquire;
// only one thread has anything to release:
//  - hand-off: the leader (the mailbox's writer) arrives with release, every
//    other thread relaxed;
//  - collection: after __syncthreads(), thread 0 of each block arrives with
//    release -- cumulative over what its block's barrier ordered before it: the
//    block's result bytes -- every other thread relaxed.
// All wait with acquire. On an H200 this took the launch-wide round trip from
// 6.22 to 5.93 us (bench/phases.py, `cluster_barrier` is the two cluster.sync()).
#include <cooperative_groups.h>
#include <cudaq/realtime/unified_dispatch_device.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "cluster_dispatcher.cu needs thread-block clusters: build it for sm_90 or newer"
#endif

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

// A cluster barrier's two halves (barrier.cluster): arrive with or without
// release semantics, wait with acquire. Not the .aligned forms: threads of one
// warp arrive with different semantics.
__device__ __forceinline__ void cluster_arrive(bool release) {
  if (release)
    asm volatile("barrier.cluster.arrive.release;" : : : "memory");
  else
    asm volatile("barrier.cluster.arrive.relaxed;" : : : "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" : : : "memory");
}
} // namespace

extern "C" __global__ void cluster_dispatcher(void *transport_ctx, uint32_t slot_size,
                                              const cudaq_function_entry_t *table,
                                              uint32_t table_count, volatile int *shutdown_flag,
                                              unsigned long long *stats) {
  __shared__ Mailbox local_box;
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
  const bool leader_block = cluster.block_rank() == 0;
  const bool block_leader = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  const bool leader = leader_block && block_leader;
  // Every block reads the leader block's mailbox (distributed shared memory).
  volatile Mailbox *box = cluster.map_shared_rank(&local_box, 0);
  if (leader)
    box->session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  cluster.sync();
  void *session = box->session;
  if (session == nullptr) {
    cluster.sync(); // block 0's shared memory must outlive the other blocks' reads
    return;
  }
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (;;) {
    if (leader) {
      // Serve alone what needs no other thread (thread-shaped handlers, bad
      // requests); hand a launch-wide request to the whole cluster (or stop).
      void *request = nullptr;
      void *response = nullptr;
      const cudaq_function_entry_t *entry = nullptr;
      box->running = cudaq_serve_until_launch_wide(session, slot_size, table, table_count,
                                                   stats, s_stage, sizeof(s_stage), &request,
                                                   &response, &entry);
      box->entry = entry;
      // A request staged in this block's shared memory: the other blocks read it
      // through its address in the cluster's distributed shared memory.
      box->request = request != nullptr && __isShared(request)
                         ? cluster.map_shared_rank(static_cast<uint8_t *>(request), 0)
                         : request;
      box->response = response;
      box->result_len = 0;
    }
    cluster_arrive(leader); // only the mailbox's writer releases
    cluster_wait();         // acquire: the mailbox is visible
    const int running = box->running;
    if (!running) {
      cluster.sync(); // keep block 0 (and its mailbox) alive until every block has read it
      break;
    }
    const void *request = box->request;
    void *response = box->response;
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_launch_handler(box->entry->handler, request, response, max_result, &result_len);
    if (result_len != 0)
      box->result_len = result_len; // the one thread that wrote it (remote store to block 0)
    // Every thread's result bytes reach the host before the publish with no fence of
    // their own: the block barrier orders them before its thread 0's release, that
    // release before the leader's acquire, and the publish is a release at system
    // scope (PTX releases are cumulative: causality order is transitive across scopes).
    __syncthreads();
    cluster_arrive(block_leader);
    cluster_wait(); // every block is done with the request
    if (leader) {
      write_response_header(response, request, status, box->result_len); // at most max_result
      cudaq_dev_tx_publish(session, response); // counted when seen
    }
  }
}
