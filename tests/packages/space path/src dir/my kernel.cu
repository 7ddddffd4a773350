#include "cudaq_test/one_thread_loop.cuh"
#include "space config.cuh"
static_assert(SPACE_PATH_OK == 1, "header next to the kernel");

extern "C" __global__ void space_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS);
}
