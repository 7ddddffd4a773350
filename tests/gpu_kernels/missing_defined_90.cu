// Defines what missing_symbol.cu calls, built for sm_90 only (lto_90): linked with it for
// sm_90 it resolves; for sm_80 this container is left out and the symbol stays unresolved.
extern "C" __device__ int cudaq_test_missing_function(int x) { return x + 1; }
