// One thread drives the transport and runs every handler: no block barriers,
// no shared-memory hand-off. Launch with grid (1,1,1) and block (1,1,1).
// The shared loop comes from include/ (the extension's include_dirs).
#include "cudaq_test/one_thread_loop.cuh"

#include "setuptools_pkg/config.h"

extern "C" __global__ void single_thread_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS);
}
