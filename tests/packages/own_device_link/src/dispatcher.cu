// SPDX-License-Identifier: Apache-2.0
// A one-thread dispatch kernel (launch grid 1, block 1), side-compiled by skbuild-cudaq:
// the extension's own device link never sees it.
#include "cudaq_test/one_thread_loop.cuh"

extern "C" __global__ void odl_dispatcher(CUDAQ_DISPATCH_KERNEL_PARAMS) {
  cudaq_test_serve_one_thread(CUDAQ_TEST_KERNEL_ARGS);
}
