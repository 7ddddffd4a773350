// Defines a transport hook that the run time's bridge defines too: nvJitLink
// must fail (symbol multiply defined).
#include <cudaq/realtime/unified_dispatch_device.cuh>

extern "C" __device__ int cudaq_dev_rx_poll(void *session, void **request, void **response) {
  (void)session;
  *request = nullptr;
  *response = nullptr;
  return 0;
}

extern "C" __global__ void uses_duplicate(int *out) {
  void *a, *b;
  out[0] = cudaq_dev_rx_poll(nullptr, &a, &b);
}
