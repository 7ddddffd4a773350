// SPDX-License-Identifier: Apache-2.0
//
// Device hooks of the host-ring bridge (also used by the UDP bridge, whose
// host thread moves datagrams into and out of the same ring). Compiled to
// LTO-IR when skbuild-cudaq is built, linked by nvJitLink at run time, and
// inlined into every dispatch kernel that calls the hooks.
#include <cudaq/realtime/host_ring.cuh>
#include <cudaq/realtime/unified_dispatch_device.cuh>

#ifdef CUDAQ_REALTIME_PHASES
// The measurement build's phase records (cudaq/realtime/detail/phases.cuh).
extern "C" {
__device__ cudaq_phase_record_t cudaq_phase_log[CUDAQ_REALTIME_PHASE_RECORDS];
__device__ unsigned int cudaq_phase_next;
}
#define CUDAQ_HOST_RING_PHASE_BEGIN() cudaq_detail_phase_begin()
#else
#define CUDAQ_HOST_RING_PHASE_BEGIN() ((void)0)
#endif

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

// The ring as the hooks use it: written by the host before the kernel starts,
// never changed while it runs.
struct RingView {
  uint32_t num_slots;
  uint32_t slot_size;
  const uint8_t *rx_slots;
  uint8_t *tx_slots;
  const volatile uint32_t *rx_flags;
  volatile uint32_t *tx_flags;
};

// A lane's state as its hooks use it, kept in the block's shared memory: the
// session a hook returns points here. After the system-scope acquire of a poll
// (which empties L1) a load from device memory costs an L2 round trip (~0.15 us
// on an H200, more under load); a load from shared memory does not. Every poll
// reads the ring's view and the lane's position -- for a kernel that looks once
// per round (cudaq_dev_rx_try_poll, the warp-parallel example) on every round's
// critical path -- and publishing reads the pending flag right after the
// handler. So a session belongs to the block that opened it: poll and publish
// it from a thread of that block. (cudaq_host_ring_lane_t in device memory
// keeps the back pointer the host wrote and the values the lane started with.)
struct HotSession {
  RingView view;                      // the ring (copied once, at enter)
  uint8_t *staging;                   // this lane's staging area in device memory
  volatile uint32_t *pending_flag;    // tx flag of the request last polled
  volatile int *shutdown;             // the dispatcher's shutdown flag
  uint32_t pending_seq;               // the value that publishes it
  uint32_t next_slot;                 // next slot this lane polls
  uint32_t next_seq;                  // sequence number expected in that slot
  uint32_t lane_index;                // this lane's index
  uint32_t num_lanes;                 // lanes sharing the ring
  uint32_t reserved;
};
static_assert(sizeof(HotSession) == 88, "88 bytes a lane in shared memory");

__device__ __forceinline__ HotSession *hot_sessions() {
  __shared__ HotSession sessions[CUDAQ_HOST_RING_MAX_LANES];
  return sessions;
}

// The ring's header (magic .. tx_flags) is read once, at enter, with
// ld.global.nc (cudaq_detail_ldnc_*).
__device__ __forceinline__ RingView view_of(const cudaq_host_ring_ctx_t *ring) {
  RingView v;
  v.num_slots = cudaq_detail_ldnc_u32(&ring->num_slots);
  v.slot_size = cudaq_detail_ldnc_u32(&ring->slot_size);
  v.rx_slots = reinterpret_cast<const uint8_t *>(cudaq_detail_ldnc_u64(&ring->rx_slots));
  v.tx_slots = reinterpret_cast<uint8_t *>(cudaq_detail_ldnc_u64(&ring->tx_slots));
  v.rx_flags = reinterpret_cast<const volatile uint32_t *>(cudaq_detail_ldnc_u64(&ring->rx_flags));
  v.tx_flags = reinterpret_cast<volatile uint32_t *>(cudaq_detail_ldnc_u64(&ring->tx_flags));
  return v;
}

} // namespace

namespace {

// Opens lane `lane` of `num_lanes`: at the lane's first slot of a fresh ring, or,
// with `resume`, where the last kernel over this context suspended
// (cudaq_dev_suspend_kernel; at the first slot if none did).
__device__ __forceinline__ void *enter_lane(void *transport_ctx, volatile int *shutdown_flag,
                                            uint32_t lane, uint32_t num_lanes, bool resume) {
  cudaq_host_ring_ctx_t *ring = static_cast<cudaq_host_ring_ctx_t *>(transport_ctx);
  if (ring == nullptr || ring->magic != CUDAQ_HOST_RING_CTX_MAGIC || num_lanes == 0 ||
      num_lanes > CUDAQ_HOST_RING_MAX_LANES || lane >= num_lanes ||
      ring->num_slots % num_lanes != 0 || lane >= ring->num_slots)
    return nullptr;
  cudaq_host_ring_lane_t *s = &ring->lanes[lane];
  // The host wrote each lane's back pointer (host_ring_ctx_bytes).
  if (cudaq_detail_ldnc_u64(&s->ring) != reinterpret_cast<uint64_t>(ring))
    return nullptr;
  uint32_t first_slot = lane;
  uint32_t first_seq = 1;
  if (resume) {
    // Plain loads: the kernel that suspended wrote them. The record is consumed.
    const uint32_t resume_seq = s->resume_seq;
    if (resume_seq != 0) {
      first_slot = s->resume_slot;
      first_seq = resume_seq;
      s->resume_seq = 0;
    }
  }
  s->shutdown = shutdown_flag;
  s->next_slot = first_slot;
  s->next_seq = first_seq;
  s->lane = lane;
  s->num_lanes = num_lanes;
  HotSession *h = &hot_sessions()[lane];
  h->view = view_of(ring);
  h->staging = reinterpret_cast<uint8_t *>(ring) + sizeof(cudaq_host_ring_ctx_t) +
               static_cast<size_t>(lane) * h->view.slot_size;
  h->pending_flag = nullptr;
  h->shutdown = shutdown_flag;
  h->pending_seq = 0;
  h->next_slot = first_slot;
  h->next_seq = first_seq;
  h->lane_index = lane;
  h->num_lanes = num_lanes;
  h->reserved = 0;
  return h;
}

} // namespace

extern "C" __device__ void *cudaq_dev_enter_lane(void *transport_ctx, volatile int *shutdown_flag,
                                                 uint32_t lane, uint32_t num_lanes) {
  return enter_lane(transport_ctx, shutdown_flag, lane, num_lanes, false);
}

extern "C" __device__ void *cudaq_dev_resume_kernel(void *transport_ctx,
                                                    volatile int *shutdown_flag) {
  return enter_lane(transport_ctx, shutdown_flag, 0, 1, true);
}

extern "C" __device__ void *cudaq_dev_enter_kernel(void *transport_ctx,
                                                   volatile int *shutdown_flag) {
  return cudaq_dev_enter_lane(transport_ctx, shutdown_flag, 0, 1);
}

namespace {

// A lane's position, read once per poll (before waiting), from shared memory.
struct LaneState {
  uint32_t slot;
  uint32_t seq;
  uint32_t lane;
  uint32_t num_lanes;
};

__device__ __forceinline__ LaneState state_of(const HotSession *h) {
  return LaneState{h->next_slot, h->next_seq, h->lane_index, h->num_lanes};
}

// Copies the request in a slot to the lane's staging area in device memory, or
// to the caller's own buffer `own` (cudaq_dev_rx_poll_into: typically shared
// memory, where the handler's reads of its arguments cost no device-memory
// round trip) when the request fits its `own_bytes`. Two halves:
//  - load_request issues the loads of the header and the first arguments (up
//    to 256 bytes) back to back: one PCIe round trip, not one per word. Must
//    follow the acquire load of the slot's flag in program order. Plain loads:
//    a strong one (relaxed.sys, volatile) of host memory is a round trip of its
//    own behind the one before (four of them made the single-thread kernel
//    1.95x the floor on an H200, session 14); their order is ptxas's.
//  - store_request stores them (a longer request's tail is loaded and stored
//    once the header said how long it is, always into the device staging
//    area) and returns where the request went. The first batch is stored last
//    and its first four words unconditionally (a slot holds at least 32
//    bytes), so that the dispatch kernel's reads of the header right after the
//    poll can be served from registers instead of memory.
// claim() does its bookkeeping between the two, while the loads are in flight.
// A predicate a word, left to ptxas to schedule, measured faster than fewer
// instructions: the batch loaded and stored in whole groups under one predicate
// each (30 fewer instructions before the last load) made the one-thread round
// trip 0.05-0.18 us slower on an H200,
// and a short request's own path storing only its words (47 fewer instructions
// after the data arrive) made the built-in and cluster kernels 0.015-0.02x
// faster but the single-thread kernel 0.02x slower (bench/README.md says where
// these experiments are kept).
constexpr uint32_t kStageWords = 32; // 256 bytes in the first batch
constexpr uint32_t kTailWords = 8;   // then 64 bytes per batch (fewer registers)

struct LoadedRequest {
  const cudaq_detail_word_t *src;
  uint32_t slot_size;
  uint32_t first; // words loaded into v
  uint64_t v[kStageWords];
};

__device__ __forceinline__ void load_request(LoadedRequest &r, const uint8_t *slot,
                                             uint32_t slot_size) {
  r.src = reinterpret_cast<const cudaq_detail_word_t *>(slot);
  r.slot_size = slot_size;
  const uint32_t slot_words = slot_size / 8;
  r.first = slot_words < kStageWords ? slot_words : kStageWords;
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i)
    r.v[i] = r.src[i];
  // A word past the slot is 0, not left as it was: a word a predicated load
  // may leave unwritten is live around the dispatch kernel's loop, and in a
  // kernel that needs its registers for other things (the built-in, the
  // cluster) those words were spilled and refilled every round trip.
#pragma unroll
  for (uint32_t i = 4; i < kStageWords; ++i)
    r.v[i] = i < r.first ? r.src[i] : 0;
}

__device__ __forceinline__ uint8_t *store_request(const LoadedRequest &r, uint8_t *staging,
                                                  void *own, uint32_t own_bytes) {
  const uint32_t max_args = r.slot_size - CUDAQ_RPC_HEADER_SIZE;
  uint32_t arg_len = static_cast<uint32_t>(r.v[1]); // header bytes 8..11
  if (arg_len > max_args)
    arg_len = max_args; // the dispatcher answers CUDAQ_RPC_STATUS_ARGS_TOO_LONG
  const uint32_t need = (CUDAQ_RPC_HEADER_SIZE + arg_len + 7) / 8;
  // The caller's buffer takes a request that fits it and the first batch.
  // (The first four words are always stored: 32 bytes.)
  const uint32_t own_need = need < 4 ? 4 : need;
  const bool mine = own != nullptr && need <= r.first && own_need * 8 <= own_bytes;
  uint8_t *dst_bytes = mine ? static_cast<uint8_t *>(own) : staging;
  cudaq_detail_word_t *dst = reinterpret_cast<cudaq_detail_word_t *>(dst_bytes);
  for (uint32_t base = r.first; base < need; base += kTailWords) {
    uint64_t t[kTailWords];
#pragma unroll
    for (uint32_t i = 0; i < kTailWords; ++i)
      if (base + i < need)
        t[i] = r.src[base + i];
#pragma unroll
    for (uint32_t i = 0; i < kTailWords; ++i)
      if (base + i < need)
        dst[base + i] = t[i];
  }
  const uint32_t stored = mine ? need : r.first;
#pragma unroll
  for (uint32_t i = 4; i < kStageWords; ++i)
    if (i < stored)
      dst[i] = r.v[i];
#pragma unroll
  for (uint32_t i = 0; i < 4; ++i)
    dst[i] = r.v[i];
  return dst_bytes;
}

// Takes the request that has arrived in the lane's next slot: issues the loads
// of its bytes first, then (while they cross PCIe) records it as pending and
// advances, then stages it and fills *request / *response.
__device__ __forceinline__ void claim(HotSession *h, const RingView &v, const LaneState &st,
                                      void **request, void **response, void *own,
                                      uint32_t own_bytes) {
  const size_t offset = static_cast<size_t>(st.slot) * v.slot_size;
  LoadedRequest loaded;
  load_request(loaded, v.rx_slots + offset, v.slot_size);
  uint8_t *staging = h->staging;
  uint32_t next = st.slot + st.num_lanes;
  h->pending_flag = v.tx_flags + st.slot; // shared memory: publishing reads no device memory
  h->pending_seq = st.seq;
  if (next >= v.num_slots) {
    next -= v.num_slots;
    h->next_seq = st.seq + 1;
  }
  h->next_slot = next;
  // The acquire emptied L1. Unless the caller gave a buffer of its own, ask,
  // without waiting, for the staging area's first two lines (the handler reads
  // its arguments there). No memory clobber: it orders nothing, and between
  // the staging stores and the dispatch kernel's reads of the header nothing
  // may stand that the compiler must assume touches memory, or it could not
  // serve those reads from registers.
  if (own == nullptr) {
    asm volatile("prefetch.global.L1 [%0];" : : "l"(staging));
    asm volatile("prefetch.global.L1 [%0];" : : "l"(staging + 128));
  }
  *request = store_request(loaded, staging, own, own_bytes);
  CUDAQ_REALTIME_PHASE(1);
  *response = v.tx_slots + offset;
}

// Waits (or, with wait == 0, looks once) for the lane's next request.
__device__ __forceinline__ int poll(void *session, void **request, void **response, void *own,
                                    uint32_t own_bytes, bool wait) {
  HotSession *h = static_cast<HotSession *>(session);
  const RingView v = h->view;
  const LaneState st = state_of(h);
  const volatile uint32_t *flag = &v.rx_flags[st.slot];
  if (!wait) {
    if (load_acquire_sys(flag) != st.seq)
      return 0;
  } else {
    volatile int *shutdown = h->shutdown;
    // Each load of mapped host memory is a PCIe round trip: look at the
    // shutdown flag only every kShutdownEvery polls so that an arriving request
    // is seen after one flag load, not after a flag load plus a shutdown load.
    constexpr uint32_t kShutdownEvery = 16;
    for (uint32_t polls = 0;; ++polls) {
      if (load_acquire_sys(flag) == st.seq)
        break;
      if (polls % kShutdownEvery == kShutdownEvery - 1 && load_shutdown(shutdown) != 0)
        return 0;
    }
  }
  CUDAQ_HOST_RING_PHASE_BEGIN();
  claim(h, v, st, request, response, own, own_bytes);
  return 1;
}

// A shared ring (CUDAQ_POLL_SHARED: a host dispatcher consumes the same ring).
// The other consumer may answer a request before this lane looked at it, and
// the producer may then reuse its slot; so, unlike poll():
//  - a slot whose request flag is *ahead* of the sequence the lane expects held
//    a request the other consumer answered: the lane moves past it;
//  - after staging a request, the lane checks that its response flag is not set
//    already: a request answered meanwhile is the other consumer's (nobody else
//    answers this lane's requests, and the producer reuses a slot only once it
//    is answered), and its bytes may have changed under the copy: dropped. The
//    fence orders the copy's loads before the flag's: a load that saw the
//    producer's next request saw a store made after the answer, so the flag
//    load sees the answer. This costs one more PCIe round trip a request.
// Its own function, so that poll() -- every other kernel's -- stays as it was.
// Inlined like poll(): as a __noinline__ function, nvJitLink 13.0 (not 13.5)
// crashed (SIGSEGV) linking the run time into tests/gpu_kernels' test binary.
__device__ __forceinline__ void skip_slot(HotSession *h, const RingView &v, const LaneState &st) {
  uint32_t next = st.slot + st.num_lanes;
  if (next >= v.num_slots) {
    next -= v.num_slots;
    h->next_seq = st.seq + 1;
  }
  h->next_slot = next;
}

__device__ __forceinline__ bool answered_by_peer(const RingView &v, const LaneState &st) {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  uint32_t answered;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];"
               : "=r"(answered)
               : "l"(v.tx_flags + st.slot)
               : "memory");
  return answered == st.seq;
}

__device__ __forceinline__ int poll_shared(void *session, void **request, void **response, void *own,
                                        uint32_t own_bytes, bool wait) {
  HotSession *h = static_cast<HotSession *>(session);
  const RingView v = h->view;
  volatile int *shutdown = h->shutdown;
  constexpr uint32_t kShutdownEvery = 16;
  uint32_t polls = 0;
  for (;;) {
    const LaneState st = state_of(h);
    const uint32_t seen = load_acquire_sys(&v.rx_flags[st.slot]);
    if (seen != st.seq) {
      if (static_cast<int32_t>(seen - st.seq) > 0) {
        skip_slot(h, v, st); // answered by the other consumer (and reused): not ours
        continue;
      }
      if (!wait)
        return 0;
      if (++polls % kShutdownEvery == 0 && load_shutdown(shutdown) != 0)
        return 0;
      continue;
    }
    CUDAQ_HOST_RING_PHASE_BEGIN();
    claim(h, v, st, request, response, own, own_bytes);
    if (!answered_by_peer(v, st))
      return 1;
    if (!wait)
      return 0;
  }
}

} // namespace

extern "C" __device__ int cudaq_dev_rx_try_poll(void *session, void **request,
                                                void **response) {
  return poll(session, request, response, nullptr, 0, false);
}

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  return poll(session, request, response, nullptr, 0, true);
}

extern "C" __device__ int cudaq_dev_rx_poll_into(void *session, void **request, void **response,
                                                 void *stage, uint32_t stage_bytes, int wait) {
  // `wait` is a constant at every call site the run time knows: after inlining,
  // only one of the two remains.
  if (wait & CUDAQ_POLL_SHARED)
    return poll_shared(session, request, response, stage, stage_bytes,
                       (wait & CUDAQ_POLL_WAIT) != 0);
  return poll(session, request, response, stage, stage_bytes, wait != 0);
}

extern "C" __device__ int cudaq_dev_tx_handoff(void *session, void *response,
                                               volatile uint32_t **flag, uint32_t *value) {
  const HotSession *h = static_cast<const HotSession *>(session);
  (void)response; // the slot is the one last polled
  *flag = h->pending_flag;
  *value = h->pending_seq;
  return 1;
}

extern "C" __device__ int cudaq_dev_suspend_kernel(void *session) {
  const HotSession *h = static_cast<const HotSession *>(session);
  // The lane's record in device memory: the context sits right before the
  // staging areas, lane by lane (cudaq_dev_enter_lane).
  cudaq_host_ring_ctx_t *ring = reinterpret_cast<cudaq_host_ring_ctx_t *>(
      h->staging - static_cast<size_t>(h->lane_index) * h->view.slot_size -
      sizeof(cudaq_host_ring_ctx_t));
  cudaq_host_ring_lane_t *s = &ring->lanes[h->lane_index];
  s->resume_slot = h->next_slot;
  s->resume_seq = h->next_seq; // 0 only 2**32 trips around the ring later
  __threadfence();
  return 1;
}

extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response) {
  const HotSession *h = static_cast<const HotSession *>(session);
  (void)response; // the slot is the one last polled (in-order, once per request)
  store_release_sys(h->pending_flag, h->pending_seq);
  CUDAQ_REALTIME_PHASE_END();
}
