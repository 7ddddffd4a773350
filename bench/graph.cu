// The bare graph-launch floor of bench/graph.py: a persistent one-thread kernel, itself a node
// of a device-launchable graph, waits for each request of a host ring and launches a one-kernel
// graph from the GPU (fire-and-forget) that answers it (echo). No function table, no I/O
// context, no request copy: what any device-graph handler costs at least. Like the dispatcher's
// graph kernel it relaunches itself (tail launch) every 100 graph launches, keeping its ring
// position in device memory. Also a one-kernel graph handler for the dispatcher
// (bench_graph_increment: what the dispatcher adds to the floor, without example_app's second).
#include <cudaq/realtime/unified_dispatch_device.cuh>

struct FloorRing {
  const uint8_t *rx;
  uint8_t *tx;
  const volatile uint32_t *rx_flags;
  volatile uint32_t *tx_flags;
  uint32_t num_slots, slot_size;
};
struct FloorState {
  uint32_t slot, seq, io_slot, io_seq; // next slot polled (kept across relaunches), the answer's
};

extern "C" __global__ void floor_answer(FloorRing ring, const FloorState *state) {
  const uint32_t slot = state->io_slot;
  const uint64_t *req = reinterpret_cast<const uint64_t *>(ring.rx + slot * ring.slot_size);
  uint64_t *resp = reinterpret_cast<uint64_t *>(ring.tx + slot * ring.slot_size);
  const uint64_t w1 = req[1], w2 = req[2];
  const uint32_t len = static_cast<uint32_t>(w1);
  for (uint32_t i = 0; i < (len + 7) / 8; ++i)
    resp[3 + i] = req[3 + i];
  resp[0] = 0x43555153ull; // magic 'CUQS', status 0
  resp[1] = (w1 & 0xFFFFFFFF00000000ull) | len; // result_len, request id echoed
  resp[2] = w2; // timestamp echoed
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(ring.tx_flags + slot), "r"(state->io_seq)
               : "memory");
}

extern "C" __global__ void floor_dispatch(FloorRing ring, FloorState *state,
                                          volatile int *shutdown, unsigned long long answer) {
  uint32_t slot = state->slot, seq = state->seq, launches = 0;
  for (;;) {
    uint32_t seen;
    for (uint32_t polls = 0;; ++polls) {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(ring.rx_flags + slot)
                   : "memory");
      if (seen == seq)
        break;
      if (polls % 64 == 63 && *shutdown)
        return;
    }
    state->io_slot = slot;
    state->io_seq = seq;
    __threadfence();
    while (cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(answer), cudaStreamGraphFireAndForget) !=
           cudaSuccess) {
    }
    if (++slot == ring.num_slots) {
      slot = 0;
      ++seq;
    }
    if (++launches == 100) {
      state->slot = slot;
      state->seq = seq;
      __threadfence();
      cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
      return;
    }
  }
}

// A one-kernel graph handler: one thread adds one to each byte and publishes.
extern "C" __global__ void bench_graph_increment(void *const *mailbox) {
  cudaq_graph_io_t *io = cudaq_graph_io(mailbox);
  const uint32_t n = cudaq_graph_arg_len(io);
  const uint8_t *args = static_cast<const uint8_t *>(cudaq_graph_args(io));
  uint8_t *result = static_cast<uint8_t *>(cudaq_graph_result(io));
  for (uint32_t i = 0; i < n; ++i)
    result[i] = static_cast<uint8_t>(args[i] + 1u);
  cudaq_graph_publish(io, CUDAQ_RPC_STATUS_SUCCESS, n);
}
