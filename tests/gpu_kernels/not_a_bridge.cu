// An LTO-IR fatbin that is not a bridge: no transport hooks, only an unrelated
// device function (linking it as a bridge must fail on the missing hooks).
#include <stdint.h>

extern "C" __device__ uint32_t cudaq_test_not_a_hook(uint32_t x) { return x * 3u + 1u; }
