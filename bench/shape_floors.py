"""Bare floors of the launch-wide shapes: what a cluster or a cooperative grid costs an echo.

    python bench/shape_floors.py [--out bench/results/shape_floors.json]

Issue #12 asks the cluster and cooperative-grid dispatchers, serving a launch-wide handler,
to come within 1.15x and 1.30x of the one-thread ping-pong floor. This measures what the
hardware gives those shapes with no run time at all: bare kernels (no hooks, no function
table, no validation, no stats) that serve ``bench/dispatch.py``'s ring the way the
examples' kernels do, the request's words echoed by the threads of the whole launch:

- ``cluster_handoff_floor`` (a cluster of ``--cluster`` blocks, sm_90+): thread 0 of block 0
  polls and stages the request in its shared memory, hands it to the cluster with a split
  cluster barrier (one releasing thread), every thread echoes its share of the words from
  there (distributed shared memory), a second split barrier collects the blocks, and the
  leader writes the header and publishes: the example's hand-off, bare;
- ``cluster_push_floor``: the same hand-off with the leader storing the box (slot, length,
  running) into every block's own shared memory before the barrier instead of each block
  reading the leader's after it: what pushing the example's mailbox would buy;
- ``cluster_mbarrier_floor``: the same work with one-way signals instead of the two cluster
  barriers: the leader stores the box into every block's shared memory and arrives on each
  block's mbarrier; each other block arrives on the leader block's mbarrier when it is done
  (sm_90 ``mbarrier.arrive.release.cluster`` / ``try_wait.acquire.cluster``);
- ``coop_handoff_floor`` (a cooperative grid, one block per SM): the leader stages the
  request in device memory and raises a generation counter (a GPU-scope release) that
  thread 0 of each block waits for; every thread echoes its share; each block's thread 0
  adds to one of 32 done counters (a release) that the leader's warp waits for: the
  example's hand-off, bare;
- ``coop_lines_floor``: the same with one go flag a block on a line of its own (the leader's
  warp raises them) instead of one flag polled by every block;
- ``coop_allpoll_floor``: every block's thread 0 polls and loads the request itself, then
  the same done counters.
- ``cluster_stageout_floor`` / ``coop_stageout_floor``: the examples' hand-offs with the
  result staged on chip -- every thread echoes into the leader block's shared memory
  (cluster) or a device-memory buffer (cooperative) instead of the mapped response slot,
  and the leader copies the result out after the collection -- so that the blocks'
  releases order no stores to host memory (a release compiles to ``MEMBAR.ALL.GPU``, which
  waits for the block's outstanding stores, across PCIe for mapped memory); the one
  system-scope release left is the leader's publish, as in the one-thread floor.

- ``multipoll_floor@k`` (one block, k = 1, 2, 4, 8): not a launch-wide shape but the one-thread
  floor's poll sampled k times a round trip: one serving thread and k poller warps, each polling
  the flag with its own ``ld.acquire.sys`` loop started a k-th of its period after the one before;
  the first to see a request hands it to the server through shared memory (a CTA-scope release
  and acquire), which loads, echoes and publishes it as ``pingpong_floor`` does. k = 1 is the
  hand-off alone. Whether sampling the flag more often shortens the wait for the poll that sees a
  request (half a PCIe round trip on average).

(A cluster all-poll floor, every block's thread 0 polling the ring, never answered its first
request in two runs on the H200 of session 10: removed, the cause not found.)

Each is paired round by round with the ping-pong floor on the same ring (the median over
rounds of the p50 ratio; see ``bench/dispatch.py``). If a bare hand-off already costs more
than a goal allows, no dispatcher of that shape can meet it; the all-poll row says what
polling from every block would buy. Needs nvcc and gcc, and skbuild-cudaq's run time.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dispatch as bench  # bench/dispatch.py: load generator, floors, versions

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "shape_floors.json"

SHAPES_CU = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
namespace {
constexpr uint32_t kWords = 32; // up to 256 bytes of request, as the floor
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(uint32_t *p, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_release_gpu_add(uint32_t *p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void cluster_arrive(bool release) {
  if (release)
    asm volatile("barrier.cluster.arrive.release;" : : : "memory");
  else
    asm volatile("barrier.cluster.arrive.relaxed;" : : : "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" : : : "memory");
}
// Loads a request's words (every load before the first use: one PCIe round trip) into
// `to`; returns its argument words.
__device__ __forceinline__ uint32_t load_words(const uint8_t *rx, uint32_t slot_size,
                                               uint64_t *to) {
  const uint64_t *src = reinterpret_cast<const uint64_t *>(rx);
  const uint32_t words = slot_size / 8 < kWords ? slot_size / 8 : kWords;
  uint64_t v[kWords];
#pragma unroll
  for (uint32_t i = 0; i < kWords; ++i)
    v[i] = i < words ? src[i] : 0;
#pragma unroll
  for (uint32_t i = 0; i < kWords; ++i)
    to[i] = v[i];
  uint32_t arg_len = static_cast<uint32_t>(v[1]);
  if (arg_len > words * 8 - 24)
    arg_len = 0;
  return (arg_len + 7) / 8;
}
__device__ __forceinline__ void write_header(uint64_t *dst, const uint64_t *req) {
  const uint64_t w1 = req[1];
  uint32_t arg_len = static_cast<uint32_t>(w1);
  dst[0] = 0x43555153ull; // magic, status 0
  dst[1] = (w1 & 0xffffffff00000000ull) | arg_len;
  dst[2] = req[2];
}
// Copies `words` result words (after the header) from on-chip `from` to the response
// `dst`: every load before the first store.
__device__ __forceinline__ void copy_out(uint64_t *dst, const uint64_t *from, uint32_t words) {
  uint64_t v[kWords - 3];
#pragma unroll
  for (uint32_t i = 0; i < kWords - 3; ++i)
    v[i] = i < words ? from[3 + i] : 0;
#pragma unroll
  for (uint32_t i = 0; i < kWords - 3; ++i)
    if (i < words)
      dst[3 + i] = v[i];
}
// Waits for the request in `slot` (sequence `seq`): 1, or 0 once shutdown is set (looked at
// every 16 polls, as the floor does).
__device__ __forceinline__ int wait_request(volatile uint32_t *rx_flags, uint32_t slot,
                                            uint32_t seq, volatile int *shutdown) {
  for (uint32_t polls = 0;; ++polls) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq)
      return 1;
    if ((polls & 15u) == 15u && *shutdown != 0)
      return 0;
  }
}
__device__ __forceinline__ void advance(uint32_t &slot, uint32_t &seq, uint32_t num_slots) {
  if (++slot == num_slots) {
    slot = 0;
    ++seq;
  }
}
// Every floor's parameters: bench/dispatch.py's Floors launch them all the same way.
#define SHAPE_FLOOR_PARAMS                                                                       \
  const uint8_t *rx, uint8_t *tx, volatile uint32_t *rx_flags, volatile uint32_t *tx_flags,      \
      uint32_t num_slots, uint32_t slot_size, volatile int *shutdown
struct Box {
  uint32_t slot, seq, arg_words;
  int running;
};
// The cluster floors' end of a request: each thread echoes its word (from `from`), a split
// cluster barrier collects the blocks (one releasing thread a block), the leader writes the
// header and publishes.
__device__ __forceinline__ void echo_and_publish(uint64_t *dst, const uint64_t *from,
                                                 const uint64_t *header, uint32_t rank,
                                                 uint32_t arg_words, bool block_leader,
                                                 bool leader, volatile uint32_t *tx_flag,
                                                 uint32_t seq) {
  if (rank < arg_words)
    dst[3 + rank] = from[3 + rank];
  __syncthreads();
  cluster_arrive(block_leader);
  cluster_wait();
  if (leader) {
    write_header(dst, header);
    st_release_sys(tx_flag, seq);
  }
}
} // namespace

// The cluster examples' hand-off, bare (see the module doc). Grid = one cluster.
extern "C" __global__ void cluster_handoff_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ __align__(16) uint64_t stage[kWords];
  __shared__ Box box;
  cg::cluster_group cluster = cg::this_cluster();
  const bool block_leader = threadIdx.x == 0;
  const bool leader = cluster.block_rank() == 0 && block_leader;
  const uint64_t *st = cluster.map_shared_rank(stage, 0);
  volatile Box *b = cluster.map_shared_rank(&box, 0);
  uint32_t slot = 0, seq = 1;
  const uint32_t rank = cluster.block_rank() * blockDim.x + threadIdx.x;
  for (;;) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      if (running)
        b->arg_words = load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, stage);
      b->slot = slot;
      b->running = running;
    }
    cluster_arrive(leader);
    cluster_wait();
    if (!b->running) {
      cluster.sync(); // block 0's shared memory outlives the other blocks' reads
      return;
    }
    const uint32_t my_slot = b->slot;
    uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(my_slot) * slot_size);
    echo_and_publish(dst, st, stage, rank, b->arg_words, block_leader, leader,
                     &tx_flags[my_slot], seq);
    if (leader)
      advance(slot, seq, num_slots);
  }
}

// The same hand-off pushed instead of pulled: the leader stores the box into every block's
// own shared memory (distributed shared memory stores, ordered by its release) before the
// barrier, so that no thread reads another block's memory after it.
extern "C" __global__ void cluster_push_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ __align__(16) uint64_t stage[kWords];
  __shared__ Box box;
  cg::cluster_group cluster = cg::this_cluster();
  const bool block_leader = threadIdx.x == 0;
  const bool leader = cluster.block_rank() == 0 && block_leader;
  const uint32_t blocks = cluster.num_blocks();
  const uint64_t *st = cluster.map_shared_rank(stage, 0);
  uint32_t slot = 0, seq = 1;
  const uint32_t rank = cluster.block_rank() * blockDim.x + threadIdx.x;
  for (;;) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      const uint32_t arg_words =
          running ? load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, stage) : 0;
      for (uint32_t b = 0; b < blocks; ++b) {
        Box *to = cluster.map_shared_rank(&box, b);
        to->slot = slot;
        to->arg_words = arg_words;
        to->running = running;
      }
    }
    cluster_arrive(leader);
    cluster_wait();
    if (!box.running) {
      cluster.sync(); // block 0's shared memory outlives the other blocks' reads
      return;
    }
    const uint32_t my_slot = box.slot;
    uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(my_slot) * slot_size);
    echo_and_publish(dst, st, stage, rank, box.arg_words, block_leader, leader,
                     &tx_flags[my_slot], seq);
    if (leader)
      advance(slot, seq, num_slots);
  }
}

// The example's hand-off with the result staged on chip: every thread echoes its word into
// the leader block's shared memory (distributed shared memory stores) instead of the mapped
// response slot, and the leader copies the result out after the collection barrier. The
// blocks' releases then order only on-chip stores; the one system-scope release is the
// leader's publish, as in the one-thread floor.
extern "C" __global__ void cluster_stageout_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ __align__(16) uint64_t stage[kWords];
  __shared__ __align__(16) uint64_t result[kWords];
  __shared__ Box box;
  cg::cluster_group cluster = cg::this_cluster();
  const bool block_leader = threadIdx.x == 0;
  const bool leader = cluster.block_rank() == 0 && block_leader;
  const uint64_t *st = cluster.map_shared_rank(stage, 0);
  uint64_t *res = cluster.map_shared_rank(result, 0);
  volatile Box *b = cluster.map_shared_rank(&box, 0);
  uint32_t slot = 0, seq = 1;
  const uint32_t rank = cluster.block_rank() * blockDim.x + threadIdx.x;
  for (;;) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      if (running)
        b->arg_words = load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, stage);
      b->slot = slot;
      b->running = running;
    }
    cluster_arrive(leader);
    cluster_wait();
    if (!b->running) {
      cluster.sync(); // block 0's shared memory outlives the other blocks' reads
      return;
    }
    const uint32_t arg_words = b->arg_words;
    if (rank < arg_words)
      res[3 + rank] = st[3 + rank];
    __syncthreads();
    cluster_arrive(block_leader);
    cluster_wait();
    if (leader) {
      uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(slot) * slot_size);
      copy_out(dst, result, arg_words);
      write_header(dst, stage);
      st_release_sys(&tx_flags[slot], seq);
      advance(slot, seq, num_slots);
    }
  }
}

// The cluster hand-off through mbarriers instead of cluster barriers: one-way signals
// (sm_90). The leader stores the box into every block's own shared memory and arrives
// (release, cluster scope) on each block's `go` barrier, which that block's threads wait on
// (acquire); each other block, once its threads are done (__syncthreads), arrives remotely on
// the leader block's `done` barrier, which the leader waits on before it publishes. No
// thread waits for the whole cluster to arrive, as both cluster barriers a request make it.
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t cluster_addr(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" : : "r"(smem_addr(bar)), "r"(count)
               : "memory");
}
// Arrives on the barrier at shared::cluster address `remote` (any block's, this one's too).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" : : "r"(remote)
               : "memory");
}
// Waits until the phase of parity `parity` of this block's barrier `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done = 0;
  while (!done) {
    asm volatile("{\n .reg .pred p;\n"
                 " mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(addr), "r"(parity)
                 : "memory");
  }
}

extern "C" __global__ void cluster_mbarrier_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ __align__(16) uint64_t stage[kWords];
  __shared__ Box box;
  __shared__ uint64_t go;   // one arrival a phase: the leader's
  __shared__ uint64_t done; // block 0's: one arrival a phase from each other block
  cg::cluster_group cluster = cg::this_cluster();
  const uint32_t blocks = cluster.num_blocks();
  const uint32_t me = cluster.block_rank();
  const bool leader = me == 0 && threadIdx.x == 0;
  if (threadIdx.x == 0) {
    mbar_init(&go, 1);
    if (me == 0 && blocks > 1)
      mbar_init(&done, blocks - 1);
    asm volatile("fence.mbarrier_init.release.cluster;" : : : "memory");
  }
  cluster.sync(); // every barrier initialized before anyone arrives on it
  const uint64_t *st = cluster.map_shared_rank(stage, 0);
  const uint32_t done0 = cluster_addr(smem_addr(&done), 0);
  const uint32_t rank = me * blockDim.x + threadIdx.x;
  uint32_t slot = 0, seq = 1, parity = 0;
  for (;;) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      const uint32_t arg_words =
          running ? load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, stage) : 0;
      for (uint32_t b = 0; b < blocks; ++b) {
        Box *to = cluster.map_shared_rank(&box, b);
        to->slot = slot;
        to->arg_words = arg_words;
        to->running = running;
      }
      for (uint32_t b = 0; b < blocks; ++b) // the release orders the stores above
        mbar_arrive_cluster(cluster_addr(smem_addr(&go), b));
    }
    mbar_wait(&go, parity);
    const Box mine = box; // after the acquire (mbar_wait clobbers memory)
    if (!mine.running)
      break;
    uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(mine.slot) * slot_size);
    if (rank < mine.arg_words)
      dst[3 + rank] = st[3 + rank];
    __syncthreads(); // this block's stores (and reads of box and stage) are done
    if (me != 0 && threadIdx.x == 0)
      mbar_arrive_cluster(done0); // release: covers the block's stores (after the barrier)
    if (leader) {
      if (blocks > 1)
        mbar_wait(&done, parity);
      write_header(dst, stage);
      st_release_sys(&tx_flags[mine.slot], seq);
      advance(slot, seq, num_slots);
    }
    parity ^= 1u;
  }
  cluster.sync(); // no block leaves while the leader may still reach into its memory
}

__device__ uint64_t g_shape_stage[kWords];
__device__ Box g_shape_box;
__device__ uint32_t g_shape_go;
__device__ uint32_t g_shape_done[32 * 32]; // block b adds to counter b % 32 (a line each)

// Done counters: thread 0 of each block but the leader's adds 1 to counter b % 32 after its
// block's barrier; lane l of the leader's warp waits until counter l has had every block's
// addition for request `gen` (blocks with b % 32 == l, block 0 excluded).
__device__ __forceinline__ void collect(uint32_t gen) {
  const uint32_t blocks = gridDim.x;
  if (blockIdx.x != 0) {
    if (threadIdx.x == 0)
      red_release_gpu_add(&g_shape_done[(blockIdx.x % 32) * 32], 1);
  } else if (threadIdx.x < 32) {
    const uint32_t l = threadIdx.x;
    uint32_t per = blocks / 32 + (l < blocks % 32 ? 1 : 0);
    if (l == 0)
      per -= 1; // block 0
    const uint32_t want = per * gen;
    while (ld_acquire_gpu(&g_shape_done[l * 32]) < want) {
    }
    __syncwarp();
  }
}

// The cooperative hand-offs' side of request `gen` once the leader has raised `go` for it:
// thread 0 of each block waits for the flag and copies the box into the block's `box`, every
// thread echoes its word, the blocks are collected, and the leader publishes and advances.
// Returns 0 once the box says the kernel stops.
__device__ __forceinline__ int coop_serve(const uint32_t *go, uint32_t gen, Box &box,
                                          uint32_t rank, bool leader, uint8_t *tx,
                                          volatile uint32_t *tx_flags, uint32_t num_slots,
                                          uint32_t slot_size, uint32_t &slot, uint32_t &seq) {
  if (threadIdx.x == 0) {
    while (ld_acquire_gpu(go) < gen) {
    }
    box = *const_cast<const Box *>(&g_shape_box);
  }
  __syncthreads();
  if (!box.running)
    return 0;
  uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(box.slot) * slot_size);
  if (rank < box.arg_words)
    dst[3 + rank] = g_shape_stage[3 + rank];
  __syncthreads();
  collect(gen);
  if (leader) {
    write_header(dst, g_shape_stage);
    st_release_sys(&tx_flags[box.slot], seq);
    advance(slot, seq, num_slots);
  }
  return 1;
}

// The cooperative example's hand-off, bare (see the module doc). Launch cooperatively.
extern "C" __global__ void coop_handoff_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ Box box;
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    g_shape_go = 0;
    for (uint32_t i = 0; i < 32; ++i)
      g_shape_done[i * 32] = 0;
  }
  grid.sync();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  const uint32_t rank = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t slot = 0, seq = 1;
  for (uint32_t gen = 1;; ++gen) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      if (running)
        g_shape_box.arg_words =
            load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, g_shape_stage);
      g_shape_box.slot = slot;
      g_shape_box.running = running;
      st_release_gpu(&g_shape_go, gen);
    }
    if (!coop_serve(&g_shape_go, gen, box, rank, leader, tx, tx_flags, num_slots, slot_size,
                    slot, seq))
      return;
  }
}

__device__ uint64_t g_shape_result[kWords];

// The cooperative example's hand-off with the result staged in device memory: every thread
// echoes its word there instead of the mapped response slot, and the leader copies the
// result out once every block is collected. The blocks' releases order only device-memory
// stores; the one system-scope release is the leader's publish. Launch cooperatively.
extern "C" __global__ void coop_stageout_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ Box box;
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    g_shape_go = 0;
    for (uint32_t i = 0; i < 32; ++i)
      g_shape_done[i * 32] = 0;
  }
  grid.sync();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  const uint32_t rank = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t slot = 0, seq = 1;
  for (uint32_t gen = 1;; ++gen) {
    if (leader) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      if (running)
        g_shape_box.arg_words =
            load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, g_shape_stage);
      g_shape_box.slot = slot;
      g_shape_box.running = running;
      st_release_gpu(&g_shape_go, gen);
    }
    if (threadIdx.x == 0) {
      while (ld_acquire_gpu(&g_shape_go) < gen) {
      }
      box = *const_cast<const Box *>(&g_shape_box);
    }
    __syncthreads();
    if (!box.running)
      return;
    if (rank < box.arg_words)
      g_shape_result[3 + rank] = g_shape_stage[3 + rank];
    __syncthreads();
    collect(gen);
    if (leader) {
      uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(box.slot) * slot_size);
      copy_out(dst, g_shape_result, box.arg_words);
      write_header(dst, g_shape_stage);
      st_release_sys(&tx_flags[box.slot], seq);
      advance(slot, seq, num_slots);
    }
  }
}

__device__ uint32_t g_shape_go_lines[1024 * 32]; // block b waits on its own line, b * 32

// The cooperative hand-off with one go flag a block, each on its own 128-byte line, instead
// of one flag that every block's thread 0 polls (131 pollers of one L2 line): the leader's
// warp raises them (each lane one fence, then relaxed stores of its blocks' flags), thread 0
// of block b waits on line b. Collection as coop_handoff_floor. Cooperative, up to 1024 blocks.
extern "C" __global__ void coop_lines_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ Box box;
  cg::grid_group grid = cg::this_grid();
  const uint32_t blocks = gridDim.x;
  if (blockIdx.x == 0) {
    for (uint32_t i = threadIdx.x; i < blocks; i += blockDim.x)
      g_shape_go_lines[i * 32] = 0;
    if (threadIdx.x < 32)
      g_shape_done[threadIdx.x * 32] = 0;
  }
  grid.sync();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  const uint32_t rank = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t slot = 0, seq = 1;
  for (uint32_t gen = 1;; ++gen) {
    if (blockIdx.x == 0 && threadIdx.x < 32) {
      if (leader) {
        const int running = wait_request(rx_flags, slot, seq, shutdown);
        if (running)
          g_shape_box.arg_words =
              load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, g_shape_stage);
        g_shape_box.slot = slot;
        g_shape_box.running = running;
      }
      __syncwarp(); // the leader's stores, then every lane's release
      asm volatile("fence.acq_rel.gpu;" : : : "memory");
      for (uint32_t b = threadIdx.x; b < blocks; b += 32)
        asm volatile("st.relaxed.gpu.global.u32 [%0], %1;"
                     : : "l"(&g_shape_go_lines[b * 32]), "r"(gen) : "memory");
    }
    if (!coop_serve(&g_shape_go_lines[blockIdx.x * 32], gen, box, rank, leader, tx, tx_flags,
                    num_slots, slot_size, slot, seq))
      return;
  }
}

// Every block polls and loads the request itself, then the done counters. Cooperative.
extern "C" __global__ void coop_allpoll_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ __align__(16) uint64_t stage[kWords];
  __shared__ Box box;
  cg::grid_group grid = cg::this_grid();
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    for (uint32_t i = 0; i < 32; ++i)
      g_shape_done[i * 32] = 0;
  }
  grid.sync();
  const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
  const uint32_t rank = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t slot = 0, seq = 1;
  for (uint32_t gen = 1;; ++gen) {
    if (threadIdx.x == 0) {
      const int running = wait_request(rx_flags, slot, seq, shutdown);
      if (running)
        box.arg_words = load_words(rx + static_cast<size_t>(slot) * slot_size, slot_size, stage);
      box.running = running;
    }
    __syncthreads();
    if (!box.running)
      return;
    uint64_t *dst = reinterpret_cast<uint64_t *>(tx + static_cast<size_t>(slot) * slot_size);
    if (rank < box.arg_words)
      dst[3 + rank] = stage[3 + rank];
    __syncthreads();
    collect(gen);
    if (leader) {
      write_header(dst, stage);
      st_release_sys(&tx_flags[slot], seq);
    }
    advance(slot, seq, num_slots);
  }
}
// One-thread polling, sampled k times a PCIe round trip: the ping-pong floor's server (lane 0
// of warp 0) serves each request as pingpong_floor does, but the flag is polled by k poller
// threads (lane 0 of warps 1..k, k = blockDim.x / 32 - 1), each with its own ld.acquire.sys
// loop (one load in flight: one sample a round trip) started a k-th of a round trip after the
// one before, so that a request's flag is seen within about a k-th of a round trip of landing
// instead of half a round trip on average. The first poller to see request p raises `ready`
// to p + 1 (a CTA-scope release on shared memory); the server waits for it (CTA-scope acquire:
// by causality the poller's system-scope acquire orders the host's request bytes before the
// server's loads), then loads and echoes the request and publishes. k = 1 is the control: the
// hand-off between two threads with no extra samples.
__device__ __forceinline__ uint32_t ld_acquire_cta_shared(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.cta.shared.u32 %0, [%1];"
               : "=r"(v) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_cta_shared_max(uint32_t *p, uint32_t v) {
  asm volatile("red.release.cta.shared.max.u32 [%0], %1;"
               : : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(p))), "r"(v) : "memory");
}
extern "C" __global__ void multipoll_floor(SHAPE_FLOOR_PARAMS) {
  __shared__ uint32_t ready; // requests seen so far
  __shared__ volatile uint32_t stop;
  const uint32_t warp = threadIdx.x / 32;
  const uint32_t pollers = blockDim.x / 32 - 1;
  if (threadIdx.x == 0) {
    ready = 0;
    stop = 0;
  }
  __syncthreads();
  if (threadIdx.x % 32 != 0 || pollers == 0)
    return;
  uint32_t slot = 0, seq = 1;
  if (warp == 0) {
    for (uint32_t p = 0;; ++p) {
      for (uint32_t waits = 0; ld_acquire_cta_shared(&ready) <= p;)
        if ((++waits & 255u) == 0 && stop != 0)
          return;
      const size_t off = static_cast<size_t>(slot) * slot_size;
      serve(rx + off, tx + off, &tx_flags[slot], slot_size, seq);
      advance(slot, seq, num_slots);
    }
  }
  // Poller j: the period of its own loop (8 polls of the first flag, in SM cycles), then a
  // j-th of it times 1/k of spin before its first poll.
  const uint32_t j = warp - 1;
  const long long t0 = clock64();
  uint32_t sink = 0; // each poll waits for the one before (a value unused is no load at all)
  for (int i = 0; i < 8; ++i)
    sink += ld_acquire_sys(&rx_flags[0]) & 1u;
  const long long period = (clock64() - t0) / 8 + (sink > 8u ? 1 : 0);
  const long long start = clock64() + period * j / pollers;
  while (clock64() < start) {
  }
  uint32_t polls = 0;
  for (uint32_t p = 0;;) {
    if (ld_acquire_sys(&rx_flags[slot]) == seq) {
      red_release_cta_shared_max(&ready, p + 1);
      ++p;
      advance(slot, seq, num_slots);
    } else if ((++polls & 15u) == 0 && *shutdown != 0) {
      stop = 1;
      return;
    }
  }
}
"""

#: kernel -> shape ("cluster" or "coop"), in the order measured: the examples' hand-offs
#: first (what the goals are judged by), the all-poll designs last.
KERNELS = {
    "cluster_handoff_floor": "cluster",
    "coop_handoff_floor": "coop",
    "cluster_mbarrier_floor": "cluster",
    "coop_lines_floor": "coop",
    "cluster_push_floor": "cluster",
    "cluster_stageout_floor": "cluster",
    "coop_stageout_floor": "coop",
    "coop_allpoll_floor": "coop",
    "multipoll_floor@1": "poll1",
    "multipoll_floor@2": "poll2",
    "multipoll_floor@4": "poll4",
    "multipoll_floor@8": "poll8",
}


def symbol(label: str) -> str:
    """The kernel a label launches: ``name@k`` is ``name`` with its k-poller configuration."""
    return label.split("@", 1)[0]


class KernelHung(RuntimeError):
    """A floor kernel did not exit after its shutdown flag: it still runs, so nothing else can
    be launched on its stream nor its library unloaded."""


def source() -> str:
    """bench/dispatch.py's floors (the ping-pong floor, ``ld_acquire_sys``, ...) and these."""
    return bench.FLOOR_CU + SHAPES_CU


def build(workdir: Path, arch: str) -> tuple[Path, bytes]:
    """The load generator and the cubin of every floor (``arch``: 90 or newer)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("the benchmark needs gcc and nvcc on PATH")
    so = bench.build_loadgen(workdir)
    src = workdir / "shape_floors.cu"
    src.write_text(source())
    cubin = workdir / "shape_floors.cubin"
    subprocess.run(
        [nvcc, "-cubin", f"-arch=sm_{arch}", "-O3", "-std=c++17", "-o", str(cubin), str(src)],
        check=True,
    )
    return so, cubin.read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=3000, help="round trips a round")
    parser.add_argument("--cluster", type=int, default=4, help="blocks a cluster (the example's)")
    parser.add_argument("--block", type=int, default=128, help="threads a block (the examples')")
    parser.add_argument(
        "--kernels",
        default=",".join(KERNELS),
        help="comma-separated floors to measure, in this order (default: all)",
    )
    opts = parser.parse_args(argv)
    if opts.rounds < 1 or opts.samples < 1 or not 1 <= opts.cluster <= 8:
        parser.error("--rounds and --samples must be at least 1, --cluster 1..8")
    chosen = [k for k in opts.kernels.split(",") if k]
    unknown = [k for k in chosen if k not in KERNELS]
    if unknown or not chosen:
        parser.error(f"--kernels: unknown {unknown}; known: {', '.join(KERNELS)}")

    from skbuild_cudaq.realtime import HostRingBridge, LaunchConfig, Library, launch_kernel

    drv = bench._drv()
    dev = bench.primary_context_current(drv, 0)
    _, major, minor = bench.device_identity(drv, dev)
    if major < 9:
        raise SystemExit(
            f"thread-block clusters need sm_90 or newer; this GPU is sm_{major}{minor}"
        )
    sms = int(
        bench.ok(
            drv.cuDeviceGetAttribute(
                drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev
            ),
            "cuDeviceGetAttribute",
        )
    )
    results: dict[str, Any] = {
        **bench.result_header("shape_floors", 0, drv, dev),
        "config": {
            "rounds": opts.rounds,
            "samples": opts.samples,
            "gap_ns": bench.GAP_NS,
            "cluster_blocks": opts.cluster,
            "coop_blocks": sms,
            "block": opts.block,
            "num_slots": bench.NUM_SLOTS,
            "slot_size": bench.SLOT_SIZE,
            "arg_len": bench.ARG_LEN,
        },
        "kernels": {},
        "errors": {},
    }
    configs = {
        "cluster": LaunchConfig(
            grid=(opts.cluster, 1, 1), block=(opts.block, 1, 1), cluster=(opts.cluster, 1, 1)
        ),
        "coop": LaunchConfig(grid=(sms, 1, 1), block=(opts.block, 1, 1), cooperative=True),
        # one server warp and k poller warps (multipoll_floor)
        **{
            f"poll{k}": LaunchConfig(grid=(1, 1, 1), block=(32 * (1 + k), 1, 1))
            for k in (1, 2, 4, 8)
        },
    }
    with tempfile.TemporaryDirectory(prefix="cudaq-shapes-") as tmp:
        so, cubin = build(Path(tmp), f"{major}{minor}")
        gen = bench.LoadGen(so)
        bridge = HostRingBridge(bench.NUM_SLOTS, bench.SLOT_SIZE).open()
        ring = bridge.host_address
        library = Library.from_cubin(cubin)
        floors = bench.Floors(Path(tmp) / "shape_floors.cubin", bridge)
        stream = floors.stream
        fid = bench.fnv1a("echo")

        @contextmanager
        def running(name: str) -> Iterator[None]:
            """``name`` launched with its shape's configuration on the floors' ring."""
            bridge.reset()
            ctypes.c_int32.from_address(floors.flag).value = 0
            base = bridge.device_ring
            slots = bench.NUM_SLOTS * bench.SLOT_SIZE
            args = (
                ctypes.c_void_p(base),
                ctypes.c_void_p(base + slots),
                ctypes.c_void_p(base + 2 * slots),
                ctypes.c_void_p(base + 2 * slots + 4 * bench.NUM_SLOTS),
                ctypes.c_uint32(bench.NUM_SLOTS),
                ctypes.c_uint32(bench.SLOT_SIZE),
                ctypes.c_void_p(floors.flag_dev),
            )
            launch_kernel(library.get_kernel(symbol(name)), configs[KERNELS[name]], stream, *args)
            failure: BaseException | None = None
            try:
                yield
            except BaseException as exc:
                failure = exc
                raise
            finally:
                ctypes.c_int32.from_address(floors.flag).value = 1
                try:
                    bench.wait_idle(stream)
                except RuntimeError as exc:
                    # The first failure (a load generator time-out, a wrong answer) is the
                    # news; that the kernel then did not exit follows from it.
                    cause = f" after: {type(failure).__name__}: {failure}" if failure else ""
                    raise KernelHung(f"{exc}{cause}") from failure

        def p50s() -> tuple[float, float]:
            return gen.p50s(ring, fid, opts.samples)

        def serve(label: str, start: Callable[[], Any]) -> None:
            rows = []
            for _ in range(opts.rounds):
                with floors.running("pingpong_floor", 1):
                    f_b2b, f_gap = p50s()
                with start():
                    b2b, gap = p50s()
                rows.append(
                    {"floor_p50": f_b2b, "p50": b2b, "floor_gap_p50": f_gap, "gap_p50": gap}
                )
            ratio = float(np.median([r["p50"] / r["floor_p50"] for r in rows]))
            ratio_gap = float(np.median([r["gap_p50"] / r["floor_gap_p50"] for r in rows]))
            results["kernels"][label] = {
                "shape": KERNELS[label],
                "p50_over_floor": ratio,
                "p50_over_floor_random_arrival": ratio_gap,
                "rounds": rows,
            }
            print(
                f"{label:>24}: {ratio:.3f}x the floor (random arrival {ratio_gap:.3f}x)",
                file=sys.stderr,
            )

        for i, name in enumerate(chosen):
            try:
                serve(name, lambda name=name: running(name))  # type: ignore[misc]
            except KernelHung as exc:
                # The kernel still runs: a later launch on its stream would queue behind it
                # and unloading its library would wait for it. Keep what was measured, say
                # which floors were not, and leave without tearing anything down.
                results["errors"][name] = f"{type(exc).__name__}: {exc}"
                for later in chosen[i + 1 :]:
                    results["errors"][later] = f"not measured: {name} did not exit"
                print(f"{name}: {exc}", file=sys.stderr)
                bench.write_results(opts.out, results)
                sys.stderr.flush()
                os._exit(1)
            except Exception as exc:  # keep measuring the others; report it
                results["errors"][name] = f"{type(exc).__name__}: {exc}"
                print(f"{name}: {exc}", file=sys.stderr)
            bench.write_results(opts.out, results)  # what is measured so far, kept
        library.close()
        floors.close()
        bridge.close()
    bench.ok(drv.cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease")
    bench.write_results(opts.out, results)
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
