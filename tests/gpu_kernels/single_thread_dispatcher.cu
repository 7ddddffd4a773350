// A custom dispatch kernel (compiled on its own to an LTO-IR fatbin and
// .incbin'd): one thread drives the transport through the three hooks, which
// only the run time's bridge defines.
#include "cudaq_test/one_thread_loop.cuh"

extern "C" __global__ void single_thread_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS);
}
