// Compiles only with the target's C++ standard, include directory and definition.
#include "cudaq_test/one_thread_loop.cuh"
#include <cxx20_defs/config.h>

static_assert(__cplusplus >= 202002L, "the target's CXX_STANDARD 20 must reach the kernel");
#if !defined(CXX20_DEFS_MAGIC) || CXX20_DEFS_MAGIC != 1234
#error "the target's compile definition CXX20_DEFS_MAGIC must reach the kernel"
#endif
static_assert(CXX20_DEFS_HEADER_SEEN == 1);

consteval uint32_t increments() { return 1u; } // C++20 only

extern "C" __global__ void cxx20_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS, increments());
}
