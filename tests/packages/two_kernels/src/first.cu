#include "cudaq_test/one_thread_loop.cuh"
#include "first_config.cuh"

// One thread drives the transport and runs every handler.
extern "C" __global__ void first_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS, FIRST_STATS_INCREMENT);
}
