// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/host_ring.cuh -- the host-ring bridge's transport context.
//
// Request and response slots live in pinned host memory mapped into the GPU.
// Request k (counting from 0 since the dispatcher started) goes into slot
// k % num_slots with sequence number k / num_slots + 1. The host writes the
// request bytes, then stores the sequence number into rx_flags[slot]; the
// device waits for that value (acquire, system scope), runs the handler,
// writes the response bytes into the slot's response area, then stores the
// same sequence number into tx_flags[slot] (release, system scope). The host
// reuses a slot only after it has collected that slot's previous response.
//
// The context itself lives in device memory; only the slots, the flags and the
// shutdown flag live in mapped host memory. The context's device allocation is
// followed by a staging area of CUDAQ_HOST_RING_MAX_LANES * slot_size bytes
// (cudaq_host_ring_alloc_bytes): when a lane takes a request, the hook copies
// the slot into that lane's staging area with loads issued back to back (one
// PCIe round trip for the first 256 bytes instead of one per dependent read),
// and *request points there. Handlers thus read their arguments from device
// memory; the response is still written straight into the mapped tx slot. Its layout is mirrored by
// skbuild_cudaq/realtime/ring/device_ctx.py (HOST_RING_CTX_*): keep the two in sync.
#ifndef CUDAQ_REALTIME_HOST_RING_CUH
#define CUDAQ_REALTIME_HOST_RING_CUH

#include <cudaq/realtime/stdint.cuh>

#define CUDAQ_HOST_RING_MAX_LANES 32u
#define CUDAQ_HOST_RING_CTX_MAGIC 0x474e4952u /* 'RING' */

typedef struct cudaq_host_ring_lane {
  void *ring;             // back pointer to the context: written by the host before launch
  volatile int *shutdown; // the dispatcher's shutdown flag
  uint32_t next_slot;     // the slot this lane polls first (the hooks keep the lane's
  uint32_t next_seq;      // position in the opening block's shared memory) and its sequence
  uint32_t resume_slot;   // where the next enter of this lane starts, written by
  uint32_t resume_seq;    // cudaq_dev_suspend_kernel (resume_seq 0: at the ring's start)
  uint32_t lane;          // this lane's index
  uint32_t num_lanes;     // lanes sharing the ring (slots lane, lane+num_lanes, ...)
} cudaq_host_ring_lane_t; // 40 bytes


typedef struct cudaq_host_ring_ctx {
  uint32_t magic;               // CUDAQ_HOST_RING_CTX_MAGIC
  uint32_t num_slots;
  uint32_t slot_size;           // bytes per slot (header + payload), a multiple of 8
  uint32_t reserved;
  uint8_t *rx_slots;            // num_slots * slot_size request bytes (device view)
  uint8_t *tx_slots;            // num_slots * slot_size response bytes (device view)
  volatile uint32_t *rx_flags;  // num_slots request sequence numbers (host writes)
  volatile uint32_t *tx_flags;  // num_slots response sequence numbers (device writes)
  cudaq_host_ring_lane_t lanes[CUDAQ_HOST_RING_MAX_LANES];
} cudaq_host_ring_ctx_t;

static_assert(sizeof(cudaq_host_ring_lane_t) == 40, "lane layout is mirrored in ring/device_ctx.py");
static_assert(sizeof(cudaq_host_ring_ctx_t) == 48 + 40 * CUDAQ_HOST_RING_MAX_LANES,
              "context layout is mirrored in ring/device_ctx.py");
static_assert(sizeof(cudaq_host_ring_ctx_t) % 16 == 0, "the staging area follows the context");

// Bytes of device memory the bridge allocates for the context + staging area.
static inline constexpr unsigned long long cudaq_host_ring_alloc_bytes(uint32_t slot_size) {
  return sizeof(cudaq_host_ring_ctx_t) +
         static_cast<unsigned long long>(CUDAQ_HOST_RING_MAX_LANES) * slot_size;
}

// The host ring's lanes are the contract's lane hooks (unified_dispatch_device.cuh):
// cudaq_dev_enter_lane(ctx, flag, lane, num_lanes) opens a session over the slots
// lane, lane + num_lanes, lane + 2 * num_lanes, ... (num_slots must be a multiple
// of num_lanes; NULL otherwise), and cudaq_dev_rx_try_poll polls it without
// waiting.

#endif // CUDAQ_REALTIME_HOST_RING_CUH
