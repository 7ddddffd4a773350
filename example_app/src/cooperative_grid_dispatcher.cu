// SPDX-License-Identifier: Apache-2.0
//
// A cooperative-grid dispatch kernel: every thread of every block calls each
// launch-wide handler (thread 0 of block 0 serves thread-shaped handlers alone,
// with no grid barrier). Launch cooperatively (CU_LAUNCH_ATTRIBUTE_COOPERATIVE) with a grid no
// larger than what can be co-resident (launchers.cooperative_grid sizes it from
// occupancy). Thread 0 of block 0 drives the transport; a grid barrier
// (cooperative_groups grid.sync) hands each request to all blocks and another
// collects them before the response is published.
//
// The hand-off goes through a mailbox in global memory (shared memory is per
// block), so one launch of this kernel per linked module may run at a time.
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
} // namespace

extern "C" __global__ void cooperative_grid_dispatcher(void *transport_ctx, uint32_t slot_size,
                                                       const cudaq_function_entry_t *table,
                                                       uint32_t table_count,
                                                       volatile int *shutdown_flag,
                                                       unsigned long long *stats) {
  cg::grid_group grid = cg::this_grid();
  if (!grid.is_valid())
    return; // not launched cooperatively: grid.sync() would be undefined
  volatile Mailbox *box = &g_coop_mailbox; // volatile: never a stale L1 copy
  const bool leader = grid.thread_rank() == 0;
  table = cudaq_table_to_shared(table, table_count); // each block's copy; the leader's is used
  if (leader)
    box->session = cudaq_dev_enter_kernel(transport_ctx, shutdown_flag);
  grid.sync();
  void *session = box->session;
  if (session == nullptr)
    return; // every thread sees the same value: the whole grid returns
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;

  for (;;) {
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
    }
    grid.sync(); // hand the request to every block
    if (!box->running)
      break;
    const void *request = box->request;
    void *response = box->response;
    uint32_t result_len = 0;
    const int32_t status =
        cudaq_call_handler(box->entry->handler, request, response, max_result, &result_len);
    if (result_len != 0)
      box->result_len = result_len; // the one thread that wrote it
    // Every thread's result bytes reach the host before the publish with no fence of
    // their own: the barrier orders them before the leader's release (system scope),
    // and PTX releases are cumulative (causality order is transitive across scopes).
    grid.sync();            // every block is done with the request
    if (leader) {
      write_response_header(response, request, status, box->result_len); // at most max_result
      cudaq_dev_tx_publish(session, response); // counted when seen
    }
    // The leader rewrites the mailbox only before the next grid.sync(), after
    // every thread has read this request's fields.
  }
}
