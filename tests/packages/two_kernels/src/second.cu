#include "cudaq_test/one_thread_loop.cuh"
#define SECOND_STATS_INCREMENT 2ull

// One thread drives the transport and runs every handler.
extern "C" __global__ void second_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS, SECOND_STATS_INCREMENT);
}
