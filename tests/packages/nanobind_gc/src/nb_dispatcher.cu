#include "cudaq_test/one_thread_loop.cuh"

extern "C" __global__ void nb_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS);
}
