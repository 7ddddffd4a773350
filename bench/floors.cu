// SPDX-License-Identifier: Apache-2.0
//
// The floors of bench/dispatch.py and bench/multigpu.py: bare kernels that serve the host
// ring with nothing but an echo (no dispatcher, no function table, no hooks), loaded
// directly. Compiled to a cubin in the same run as the dispatchers they are compared with
// (bench/common.py, build_floors).
//   pingpong_floor: one persistent thread polls the ring and echoes each request
//                   (the one-request-at-a-time floor of every dispatch shape);
//   warp_floor:     32 lanes, each polling and answering its own slots lane, lane + 32, ...
//                   (the throughput floor of the warp-parallel dispatcher).
// Both take (rx slots, tx slots, rx flags, tx flags, num_slots, slot_size, shutdown flag)
// in the ring layout of skbuild_cudaq.realtime.ring.RingLayout.
#include <stdint.h>
namespace {
__device__ __forceinline__ uint32_t ld_acquire_sys(const volatile uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
// Echo one request. Every load of the request is issued before the first use
// (one PCIe round trip for up to 256 bytes, as the bridge's staging copy does),
// then the response header and the result are written and published.
__device__ __forceinline__ void serve(const uint8_t *rx, uint8_t *tx, volatile uint32_t *tx_flag,
                                      uint32_t slot_size, uint32_t seq) {
  constexpr uint32_t kWords = 32;
  const uint64_t *src = reinterpret_cast<const uint64_t *>(rx);
  uint64_t *dst = reinterpret_cast<uint64_t *>(tx);
  const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
  uint64_t v[kWords];
#pragma unroll
  for (uint32_t i = 0; i < kWords; ++i)
    if (i < words)
      v[i] = src[i];
  uint32_t arg_len = static_cast<uint32_t>(v[1]);
  if (arg_len > words * 8 - 24)
    arg_len = 0;
  dst[0] = 0x43555153ull;                              // magic, status 0
  dst[1] = (v[1] & 0xffffffff00000000ull) | arg_len;   // result_len, request_id
  dst[2] = v[2];                                       // ptp timestamp
  const uint32_t arg_words = (arg_len + 7) / 8;
#pragma unroll
  for (uint32_t i = 0; i < kWords - 3; ++i)
    if (i < arg_words)
      dst[3 + i] = v[3 + i];
  st_release_sys(tx_flag, seq);
}
} // namespace

extern "C" __global__ void pingpong_floor(const uint8_t *rx, uint8_t *tx,
                                          volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,
                                          uint32_t num_slots, uint32_t slot_size,
                                          volatile int *shutdown) {
  uint32_t slot = 0, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      const size_t off = static_cast<size_t>(slot) * slot_size;
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      if (++slot == num_slots) {
        slot = 0;
        ++seq;
      }
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      return;
    }
  }
}

extern "C" __global__ void warp_floor(const uint8_t *rx, uint8_t *tx, volatile uint32_t *rx_flags,
                                      volatile uint32_t *tx_flags, uint32_t num_slots,
                                      uint32_t slot_size, volatile int *shutdown) {
  const uint32_t lanes = blockDim.x;
  uint32_t slot = threadIdx.x, seq = 1, polls = 0;
  for (;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      const size_t off = static_cast<size_t>(slot) * slot_size;
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      slot += lanes;
      if (slot >= num_slots) {
        slot -= num_slots;
        ++seq;
      }
    } else if ((++polls & 63u) == 0 && *shutdown != 0) {
      return;
    }
  }
}
