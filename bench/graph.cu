// The bare graph-launch floors of bench/graph.py.
//
// floor_graph_dispatch: a persistent one-thread kernel, itself the node of a device-launchable
// graph, waits for each request of a host ring, copies it into device memory after an I/O
// context (cudaq_graph_io_t) and launches a graph handler from the GPU (fire-and-forget),
// which answers it through that context, exactly as under the dispatcher. What it leaves out
// is all the dispatcher does besides: no function table, no validation, no wait for the
// graph's previous request to release the context, no hand-off hook, no block. Like the
// dispatcher's graph kernel it relaunches itself (tail launch) every 100 graph launches,
// keeping its ring position in device memory. The graphs it launches are the handler's own
// (the same kernels, grids, scratch and mailbox), so floor and handler differ by the dispatcher
// alone.
//
// floor_host_serve (host code: compiled on its own with -DGRAPH_HOST_FLOOR, no CUDA headers):
// the host launch floor, below.
//
// bench_graph_increment: a one-kernel graph handler (one thread adds one to each byte and
// publishes), the one-kernel case of the floor and of the dispatcher.
#ifndef GRAPH_HOST_FLOOR
#include <cudaq/realtime/unified_dispatch_device.cuh>

struct FloorRing {
  const uint8_t *rx;
  uint8_t *tx;
  const volatile uint32_t *rx_flags;
  volatile uint32_t *tx_flags;
  uint32_t num_slots, slot_size;
};
struct FloorState {
  uint32_t slot, seq; // the next slot polled and its sequence (kept across relaunches)
};

extern "C" __global__ void floor_graph_dispatch(FloorRing ring, FloorState *state,
                                                cudaq_graph_io_t *io, volatile int *shutdown) {
  uint32_t slot = state->slot, seq = state->seq, launches = 0;
  const cudaGraphExec_t exec = reinterpret_cast<cudaGraphExec_t>(io->graph_exec);
  uint64_t *copy = reinterpret_cast<uint64_t *>(reinterpret_cast<uint8_t *>(io) +
                                                CUDAQ_GRAPH_IO_SIZE);
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
    const uint64_t *req = reinterpret_cast<const uint64_t *>(ring.rx + slot * ring.slot_size);
    const uint64_t w0 = req[0], w1 = req[1], w2 = req[2];
    const uint32_t words = (static_cast<uint32_t>(w1) + 7) / 8;
    copy[0] = w0;
    copy[1] = w1;
    copy[2] = w2;
    for (uint32_t i = 0; i < words; ++i)
      copy[3 + i] = req[3 + i];
    io->request = copy;
    io->response = ring.tx + slot * ring.slot_size;
    io->response_flag = ring.tx_flags + slot;
    io->response_flag_value = seq;
    io->slot_size = ring.slot_size;
    io->sequence += 1;
    __threadfence();
    while (cudaGraphLaunch(exec, cudaStreamGraphFireAndForget) != cudaSuccess) {
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

#else // GRAPH_HOST_FLOOR
/* The host launch floor of bench/graph.py: a thread that polls a host ring and, for each
 * request, copies an I/O context (cudaq_graph_io_t) and the request into the graph's record in
 * device memory (cuMemcpyHtoDAsync) and launches the graph handler (cuGraphLaunch), both on one
 * stream; the graph answers in the ring itself (its publish stores the ring's response flag).
 * What a HostDispatcher's graph worker does, without the function table, the validation, the
 * worker bookkeeping and the publish word the serving loop copies into the ring.
 *
 * Links nothing of CUDA: it calls the driver through the addresses bench/graph.py passes
 * (cuGetProcAddress, as the native serving loop does). Each slot has its own pinned image, so
 * a copy still queued never reads an image the next request rewrites (one request at a time
 * per slot: the client waits for each answer). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int (*ctx_set_fn)(void *ctx);
typedef int (*graph_launch_fn)(void *exec, void *stream);
typedef int (*memcpy_fn)(unsigned long long dst, const void *src, size_t bytes, void *stream);

typedef struct { /* cudaq_graph_io_t */
  uint64_t request, response, response_flag;
  uint32_t response_flag_value, slot_size, sequence, released;
  uint64_t graph_exec;
  uint32_t launch_error, launch_failures;
} graph_io_t;

typedef struct {
  ctx_set_fn ctx_set;
  graph_launch_fn graph_launch;
  memcpy_fn memcpy_htod_async;
  void *context, *stream, *exec;
  const uint8_t *rx;          /* the ring's rx slots (host view) */
  const uint32_t *rx_flags;   /* host view */
  uint64_t tx, tx_flags;      /* device views: the graph writes there */
  uint32_t num_slots, slot_size;
  uint64_t record;            /* device memory: the I/O context (64 bytes), then the request */
  uint8_t *images;            /* pinned: one image of the record per slot */
  const int *shutdown;
} floor_host_t;

enum { IO_SIZE = 64, HEADER = 24 };

/* Serves until *shutdown; 0, or the first driver error. */
extern "C" int floor_host_serve(const floor_host_t *f) {
  int rc = f->ctx_set(f->context);
  uint32_t slot = 0, seq = 1, sequence = 0;
  while (rc == 0) {
    for (uint32_t polls = 0; __atomic_load_n(&f->rx_flags[slot], __ATOMIC_ACQUIRE) != seq;)
      if ((++polls & 63) == 0 && __atomic_load_n(f->shutdown, __ATOMIC_RELAXED))
        return 0;
    const uint8_t *req = f->rx + (size_t)slot * f->slot_size;
    uint32_t arg_len;
    memcpy(&arg_len, req + 8, sizeof arg_len);
    if (arg_len > f->slot_size - HEADER)
      arg_len = f->slot_size - HEADER;
    const size_t bytes = ((size_t)HEADER + arg_len + 7u) & ~(size_t)7u;
    uint8_t *image = f->images + (size_t)slot * (IO_SIZE + f->slot_size);
    graph_io_t io;
    memset(&io, 0, sizeof io);
    sequence += 1;
    io.request = f->record + IO_SIZE;
    io.response = f->tx + (uint64_t)slot * f->slot_size;
    io.response_flag = f->tx_flags + 4u * slot;
    io.response_flag_value = seq;
    io.slot_size = f->slot_size;
    io.sequence = sequence;
    io.released = sequence - 1;
    io.graph_exec = (uint64_t)(uintptr_t)f->exec;
    memcpy(image, &io, sizeof io);
    memcpy(image + IO_SIZE, req, bytes);
    rc = f->memcpy_htod_async(f->record, image, IO_SIZE + bytes, f->stream);
    if (rc == 0)
      rc = f->graph_launch(f->exec, f->stream);
    if (++slot == f->num_slots) {
      slot = 0;
      ++seq;
    }
  }
  return rc;
}
#endif // GRAPH_HOST_FLOOR
