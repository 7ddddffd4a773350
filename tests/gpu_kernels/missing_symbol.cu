// Calls a device function nobody defines: nvJitLink must fail (unresolved extern).
#include <stdint.h>

extern "C" __device__ int cudaq_test_missing_function(int);

extern "C" __global__ void calls_missing(int *out) { out[0] = cudaq_test_missing_function(out[0]); }
