// SPDX-License-Identifier: Apache-2.0
// The extension's own device code, launched through the CUDA runtime (<<<...>>>), and
// the runtime calls the tests make next to a running dispatcher. Every function returns
// a cudaError_t as int.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void odl_scale_kernel(float *x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= a;
}

extern "C" {

int odl_stream_create(uintptr_t *stream) {
  cudaStream_t s = nullptr;
  const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = reinterpret_cast<uintptr_t>(s);
  return static_cast<int>(err);
}

int odl_stream_destroy(uintptr_t stream) {
  return static_cast<int>(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream)));
}

int odl_stream_synchronize(uintptr_t stream) {
  return static_cast<int>(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
}

// x[i] = (i + 1) * a for i < n, computed on the GPU in memory allocated and freed
// stream-ordered on `stream`; sum of the results in *sum.
int odl_scale_roundtrip(uintptr_t stream, int n, float a, double *sum) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  float *d = nullptr;
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&d), n * sizeof(float), s);
  if (err != cudaSuccess)
    return static_cast<int>(err);
  float *h = nullptr;
  err = cudaMallocHost(reinterpret_cast<void **>(&h), n * sizeof(float));
  if (err != cudaSuccess)
    return static_cast<int>(err);
  for (int i = 0; i < n; ++i)
    h[i] = static_cast<float>(i + 1);
  cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s);
  odl_scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(d, a, n);
  cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaFreeAsync(d, s);
  err = cudaStreamSynchronize(s);
  double total = 0;
  for (int i = 0; i < n; ++i)
    total += h[i];
  *sum = total;
  cudaFreeHost(h);
  return static_cast<int>(err == cudaSuccess ? cudaGetLastError() : err);
}

int odl_malloc(uintptr_t *ptr, size_t bytes) {
  void *p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  *ptr = reinterpret_cast<uintptr_t>(p);
  return static_cast<int>(err);
}

int odl_free(uintptr_t ptr) { return static_cast<int>(cudaFree(reinterpret_cast<void *>(ptr))); }

int odl_device_synchronize(void) { return static_cast<int>(cudaDeviceSynchronize()); }

}  // extern "C"
