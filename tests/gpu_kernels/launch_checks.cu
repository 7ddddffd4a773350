// Kernels that report how they were launched (compiled for lto_90: clusters).
//   cluster_report: out[2*b] = %cluster_ctarank, out[2*b+1] = %cluster_nctarank
//   grid_sync_report: every block counts itself in, grid.sync(), then reads the
//   count (== gridDim.x only if the grid really synchronised); out[b] = count,
//   valid[b] = grid.is_valid() (true only for a cooperative launch).
#include <cooperative_groups.h>
#include <stdint.h>

namespace cg = cooperative_groups;

extern "C" __global__ void cluster_report(uint32_t *out) {
  uint32_t rank, count;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(count));
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = rank;
    out[2 * blockIdx.x + 1] = count;
  }
}

extern "C" __global__ void grid_sync_report(uint32_t *counter, uint32_t *out, uint32_t *valid) {
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0)
    valid[blockIdx.x] = grid.is_valid() ? 1u : 0u;
  if (!grid.is_valid())
    return;
  if (threadIdx.x == 0)
    atomicAdd(counter, 1u);
  grid.sync();
  if (threadIdx.x == 0)
    out[blockIdx.x] = atomicAdd(counter, 0u);
}
