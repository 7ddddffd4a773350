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

int odl_host_alloc(uintptr_t *ptr, size_t bytes) {
  void *p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  *ptr = reinterpret_cast<uintptr_t>(p);
  return static_cast<int>(err);
}

int odl_host_free(uintptr_t ptr) {
  return static_cast<int>(cudaFreeHost(reinterpret_cast<void *>(ptr)));
}

// Stream-ordered work only, on `stream`: device memory from cudaMallocAsync, copies
// to and from the pinned host buffer `host` (n floats, allocated beforehand), the
// extension's own kernel (x[i] *= a), cudaFreeAsync, then a wait for the stream.
int odl_scale_roundtrip(uintptr_t stream, uintptr_t host, int n, float a) {
  cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  float *h = reinterpret_cast<float *>(host);
  float *d = nullptr;
  cudaError_t err = cudaMallocAsync(reinterpret_cast<void **>(&d), n * sizeof(float), s);
  if (err != cudaSuccess)
    return static_cast<int>(err);
  cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s);
  odl_scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(d, a, n);
  cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaFreeAsync(d, s);
  err = cudaStreamSynchronize(s);
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

// Loads the extension's kernels into the current context now. With CUDA's lazy module
// loading (the default), the first launch of a kernel loads it, and loading may wait for
// the whole device -- for a persistent dispatcher, until stop(). cudaFuncGetAttributes
// loads a kernel without launching it; call this before start().
int odl_preload(void) {
  cudaFuncAttributes attr;
  return static_cast<int>(cudaFuncGetAttributes(&attr, odl_scale_kernel));
}

}  // extern "C"
