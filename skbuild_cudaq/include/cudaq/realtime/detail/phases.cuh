// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/detail/phases.cuh -- the measurement build of the device run
// time (skbuild-cudaq). Not part of the contract: included by
// unified_dispatch_device.cuh, used by the header's helpers and the host-ring
// hooks. `skbuild-cudaq phases` compiles a dispatch kernel, its handlers and the
// run time with -DCUDAQ_REALTIME_PHASES and reads the records back.
//
// With CUDAQ_REALTIME_PHASES defined, each request's phases are stamped with
// the SM clock (clock64) into cudaq_phase_log, which the host-ring hooks define:
//   t[0] seen        the poll's acquire saw the request (the hooks)
//   t[1] staged      the hooks copied it to the stage (the hooks)
//   t[2] looked up   cudaq_validate_request(_cached) found the entry
//   t[3] handled     the handler returned (write_response_header or
//                    cudaq_answer_request begins)
//   t[4] header      the response header is written
//   t[5] published   after the publish's release store (the hooks)
//   t[6], t[7]       %globaltimer (ns) at t[0] and t[5], to scale the clock
// A kernel that does not call a helper leaves its stamp 0. The record index of
// the request in flight lives in the polling block's shared memory, so a stamp
// costs a device-memory store and no load after the poll's acquire; the stamps
// still move a kernel's phases by up to ~0.1 us, so compare stamped phases
// within one build, and round trips of the production build.
// Without the macro CUDAQ_REALTIME_PHASE(i) is nothing: no code, no symbol.
#ifndef CUDAQ_REALTIME_DETAIL_PHASES_CUH
#define CUDAQ_REALTIME_DETAIL_PHASES_CUH

#ifdef CUDAQ_REALTIME_PHASES
#define CUDAQ_REALTIME_PHASE_RECORDS 65536u
typedef struct cudaq_phase_record {
  unsigned long long t[8];
} cudaq_phase_record_t;
extern "C" {
extern __device__ cudaq_phase_record_t cudaq_phase_log[CUDAQ_REALTIME_PHASE_RECORDS];
extern __device__ unsigned int cudaq_phase_next; // requests seen so far
}
// The record of the request in flight: in shared memory (one variable for every
// translation unit: an inline function's static), so that a stamp after the
// poll's acquire costs no device-memory round trip of its own.
__device__ inline unsigned int *cudaq_detail_phase_cur() {
  __shared__ unsigned int cur;
  return &cur;
}
static __device__ __forceinline__ unsigned long long cudaq_detail_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Starts the record of a newly seen request (the hooks call it).
static __device__ __forceinline__ void cudaq_detail_phase_begin() {
  const unsigned long long c = clock64();
  const unsigned int i = cudaq_phase_next++ % CUDAQ_REALTIME_PHASE_RECORDS;
  *cudaq_detail_phase_cur() = i;
  cudaq_phase_log[i].t[0] = c;
  cudaq_phase_log[i].t[6] = cudaq_detail_globaltimer();
}
#define CUDAQ_REALTIME_PHASE(i)                                                                  \
  (cudaq_phase_log[*cudaq_detail_phase_cur()].t[(i)] = clock64())
#define CUDAQ_REALTIME_PHASE_END()                                                               \
  do {                                                                                           \
    CUDAQ_REALTIME_PHASE(5);                                                                     \
    cudaq_phase_log[*cudaq_detail_phase_cur()].t[7] = cudaq_detail_globaltimer();                \
  } while (0)
#else
#define CUDAQ_REALTIME_PHASE(i) ((void)0)
#define CUDAQ_REALTIME_PHASE_END() ((void)0)
#endif

#endif // CUDAQ_REALTIME_DETAIL_PHASES_CUH
