// SPDX-License-Identifier: Apache-2.0
//
// Device hooks of the host-ring bridge (also used by the UDP bridge, whose
// host thread moves datagrams into and out of the same ring). Compiled to
// LTO-IR when skbuild-cudaq is built, linked by nvJitLink at run time, and
// inlined into every dispatch kernel that calls the hooks.
#include <cudaq/realtime/host_ring.cuh>
#include <cudaq/realtime/unified_dispatch_device.cuh>

namespace {

__device__ __forceinline__ uint32_t load_acquire_sys(const volatile uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int load_shutdown(volatile int *flag) {
  int v;
  asm volatile("ld.relaxed.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
  return v;
}

} // namespace

extern "C" __device__ void *cudaq_host_ring_enter_lane(void *transport_ctx,
                                                       volatile int *shutdown_flag,
                                                       uint32_t lane, uint32_t num_lanes) {
  cudaq_host_ring_ctx_t *ring = static_cast<cudaq_host_ring_ctx_t *>(transport_ctx);
  if (ring == nullptr || ring->magic != CUDAQ_HOST_RING_CTX_MAGIC || num_lanes == 0 ||
      num_lanes > CUDAQ_HOST_RING_MAX_LANES || lane >= num_lanes ||
      ring->num_slots % num_lanes != 0 || lane >= ring->num_slots)
    return nullptr;
  cudaq_host_ring_lane_t *s = &ring->lanes[lane];
  s->ring = ring;
  s->shutdown = shutdown_flag;
  s->next_slot = lane;
  s->next_seq = 1;
  s->pending_slot = 0xffffffffu;
  s->pending_seq = 0;
  s->lane = lane;
  s->num_lanes = num_lanes;
  return s;
}

extern "C" __device__ void *cudaq_dev_enter_kernel(void *transport_ctx,
                                                   volatile int *shutdown_flag) {
  return cudaq_host_ring_enter_lane(transport_ctx, shutdown_flag, 0, 1);
}

namespace {

// Copies `words` 8-byte words from mapped host memory to device memory, issuing
// up to kStageWords loads before the first store so that they travel over PCIe
// together (a plain loop would wait one round trip per word).
constexpr uint32_t kStageWords = 32; // 256 bytes per batch

__device__ __forceinline__ void stage_words(uint64_t *dst, const uint64_t *src, uint32_t begin,
                                            uint32_t words) {
  for (uint32_t base = begin; base < words; base += kStageWords) {
    uint64_t v[kStageWords];
#pragma unroll
    for (uint32_t i = 0; i < kStageWords; ++i)
      if (base + i < words)
        v[i] = src[base + i];
#pragma unroll
    for (uint32_t i = 0; i < kStageWords; ++i)
      if (base + i < words)
        dst[base + i] = v[i];
  }
}

// Copies the request in a slot to the lane's staging area: the header and the
// first arguments in one batch (speculatively, up to 256 bytes), the rest of a
// long request after the header said how long it is. Must follow the acquire
// load of the slot's flag in program order.
__device__ __forceinline__ void stage_request(uint8_t *staging, const uint8_t *slot,
                                              uint32_t slot_size) {
  uint64_t *dst = reinterpret_cast<uint64_t *>(staging);
  const uint64_t *src = reinterpret_cast<const uint64_t *>(slot);
  const uint32_t slot_words = slot_size / 8;
  const uint32_t first = slot_words < kStageWords ? slot_words : kStageWords;
  stage_words(dst, src, 0, first);
  const uint32_t max_args = slot_size - CUDAQ_RPC_HEADER_SIZE;
  uint32_t arg_len = reinterpret_cast<const cudaq_rpc_request_header_t *>(staging)->arg_len;
  if (arg_len > max_args)
    arg_len = max_args; // the dispatcher answers CUDAQ_RPC_STATUS_ARGS_TOO_LONG
  const uint32_t need = (CUDAQ_RPC_HEADER_SIZE + arg_len + 7) / 8;
  if (need > first)
    stage_words(dst, src, first, need);
}

// Takes the request (sequence `seq`) that has arrived in the session's next
// slot: fills *request / *response, records it as pending, advances.
__device__ __forceinline__ void claim(cudaq_host_ring_lane_t *s, cudaq_host_ring_ctx_t *ring,
                                      uint32_t slot, uint32_t seq, void **request,
                                      void **response) {
  const size_t offset = static_cast<size_t>(slot) * ring->slot_size;
  uint8_t *staging = reinterpret_cast<uint8_t *>(ring) + sizeof(cudaq_host_ring_ctx_t) +
                     static_cast<size_t>(s->lane) * ring->slot_size;
  stage_request(staging, ring->rx_slots + offset, ring->slot_size);
  *request = staging;
  *response = ring->tx_slots + offset;
  s->pending_slot = slot;
  s->pending_seq = seq;
  uint32_t next = slot + s->num_lanes;
  if (next >= ring->num_slots) {
    next -= ring->num_slots;
    s->next_seq = seq + 1;
  }
  s->next_slot = next;
}

} // namespace

extern "C" __device__ int cudaq_host_ring_try_poll(void *session, void **request,
                                                   void **response) {
  cudaq_host_ring_lane_t *s = static_cast<cudaq_host_ring_lane_t *>(session);
  cudaq_host_ring_ctx_t *ring = static_cast<cudaq_host_ring_ctx_t *>(s->ring);
  const uint32_t slot = s->next_slot;
  const uint32_t seq = s->next_seq;
  if (load_acquire_sys(&ring->rx_flags[slot]) != seq)
    return 0;
  claim(s, ring, slot, seq, request, response);
  return 1;
}

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  cudaq_host_ring_lane_t *s = static_cast<cudaq_host_ring_lane_t *>(session);
  cudaq_host_ring_ctx_t *ring = static_cast<cudaq_host_ring_ctx_t *>(s->ring);
  const uint32_t slot = s->next_slot;
  const uint32_t seq = s->next_seq;
  const volatile uint32_t *flag = &ring->rx_flags[slot];
  volatile int *shutdown = s->shutdown;
  // Each load of mapped host memory is a PCIe round trip: look at the shutdown
  // flag only every kShutdownEvery polls so that an arriving request is seen
  // after one flag load, not after a flag load plus a shutdown load.
  constexpr uint32_t kShutdownEvery = 16;
  for (uint32_t polls = 0;; ++polls) {
    if (load_acquire_sys(flag) == seq)
      break;
    if (polls % kShutdownEvery == kShutdownEvery - 1 && load_shutdown(shutdown) != 0)
      return 0;
  }
  claim(s, ring, slot, seq, request, response);
  return 1;
}

extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response) {
  cudaq_host_ring_lane_t *s = static_cast<cudaq_host_ring_lane_t *>(session);
  cudaq_host_ring_ctx_t *ring = static_cast<cudaq_host_ring_ctx_t *>(s->ring);
  (void)response; // the slot is the one last polled (in-order, once per request)
  store_release_sys(&ring->tx_flags[s->pending_slot], s->pending_seq);
}
