// SPDX-License-Identifier: Apache-2.0
//
// bench/phases.py probe (hand-off variant): example_app's cluster kernel with
// the launch-wide handler called by name -- `echo`, a direct call LTO inlines --
// instead of through the function table's pointer (launch-wide handlers are not
// in the module's handler switch). Everything else is the example's. It serves
// `echo` only (phases.py measures launch-wide rows with it): what a direct call
// of a launch-wide handler would save this kernel, side by side with the example.
#include <cooperative_groups.h>
#include <cudaq/realtime/unified_dispatch_device.cuh>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "cluster_direct.cu needs thread-block clusters: build it for sm_90 or newer"
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

extern "C" __device__ int echo(const void *, uint32_t, void *, uint32_t, uint32_t *);

extern "C" __global__ void cluster_direct_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                     const cudaq_function_entry_t *table,
                                                     uint32_t table_count,
                                                     volatile int *shutdown_flag,
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
    uint32_t len = 0;
    const int32_t status = echo(cudaq_request_args(request), cudaq_request_arg_len(request),
                                cudaq_response_result(response), max_result, &len);
    result_len = len < max_result ? len : max_result;
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
