// A bridge of one's own, as a third party would write it: a one-request
// mailbox (the device half; the host half is tests/gpu_kernels/mailbox.py).
//
// Host memory (pinned, mapped): request[slot_size], response[slot_size],
// u32 posted, u32 answered. The host writes a request, then increments
// `posted`; the kernel waits until `posted` passes the count it has taken,
// answers into `response`, then stores that count into `answered`. The
// context lives in device memory; its layout is mirrored by mailbox.py.
#include <cudaq/realtime/unified_dispatch_device.cuh>

namespace {

constexpr uint32_t kMailboxMagic = 0x584f424du; // 'MBOX'

struct mailbox_ctx {
  uint32_t magic;
  uint32_t slot_size;
  uint8_t *request;            // device view of the request area
  uint8_t *response;           // device view of the response area
  volatile uint32_t *posted;   // written by the host
  volatile uint32_t *answered; // written by the kernel
  volatile int *shutdown;      // the dispatcher's flag (set on entry)
  uint32_t taken;              // requests taken so far
  uint32_t reserved;
};
static_assert(sizeof(mailbox_ctx) == 56, "mirrored by tests/gpu_kernels/mailbox.py");

__device__ __forceinline__ uint32_t load_acquire_sys(const volatile uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release_sys(volatile uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}

} // namespace

extern "C" __device__ void *cudaq_dev_enter_kernel(void *transport_ctx,
                                                   volatile int *shutdown_flag) {
  mailbox_ctx *m = static_cast<mailbox_ctx *>(transport_ctx);
  if (m == nullptr || m->magic != kMailboxMagic)
    return nullptr;
  m->shutdown = shutdown_flag;
  m->taken = *m->answered; // resume after what was answered before
  return m;
}

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  mailbox_ctx *m = static_cast<mailbox_ctx *>(session);
  for (uint32_t polls = 0;; ++polls) {
    if (load_acquire_sys(m->posted) != m->taken)
      break;
    if ((polls & 15u) == 15u && *m->shutdown != 0)
      return 0;
  }
  m->taken += 1;
  *request = m->request;
  *response = m->response;
  return 1;
}

extern "C" __device__ void cudaq_dev_tx_publish(void *session, void *response) {
  mailbox_ctx *m = static_cast<mailbox_ctx *>(session);
  (void)response;
  store_release_sys(m->answered, m->taken);
}
