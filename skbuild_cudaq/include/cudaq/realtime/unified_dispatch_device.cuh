// SPDX-License-Identifier: Apache-2.0
//
// cudaq/realtime/unified_dispatch_device.cuh -- the device-side contract of a
// CUDA-Q realtime dispatch kernel (skbuild-cudaq).
//
// A dispatch kernel (the built-in unified kernel or one the application brings)
// drives the transport through three hooks that only the run-time bridge
// defines. The kernel is compiled on its own to LTO-IR with these hooks left
// undefined; nvJitLink resolves (and inlines) them at run time when it links
// the kernel together with the bridge, the built-in kernel and the handlers.
//
// Wire format (packed, little-endian, interoperable with CUDA-Q realtime):
//   request  (24 bytes): u32 magic 'CUQR', u32 function_id, u32 arg_len,
//                        u32 request_id, u64 ptp_timestamp, then arguments
//   response (24 bytes): u32 magic 'CUQS', i32 status, u32 result_len,
//                        u32 request_id (echo), u64 ptp_timestamp (echo),
//                        then the result
#ifndef CUDAQ_REALTIME_UNIFIED_DISPATCH_DEVICE_CUH
#define CUDAQ_REALTIME_UNIFIED_DISPATCH_DEVICE_CUH

#include <cudaq/realtime/stdint.cuh>

#ifndef __CUDACC__
#error "cudaq/realtime/unified_dispatch_device.cuh is a CUDA header: compile with nvcc"
#endif

// ---------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------
#define CUDAQ_RPC_MAGIC_REQUEST 0x43555152u  /* 'CUQR' */
#define CUDAQ_RPC_MAGIC_RESPONSE 0x43555153u /* 'CUQS' */
#define CUDAQ_RPC_HEADER_SIZE 24u

// Response status values.
#define CUDAQ_RPC_STATUS_SUCCESS 0
#define CUDAQ_RPC_STATUS_BAD_MAGIC (-1)
#define CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION (-2)
#define CUDAQ_RPC_STATUS_ARGS_TOO_LONG (-3)
// A graph handler that could not be launched (the device runtime refused the
// launch past a deadline; on the host path, the driver refused it or the graph
// failed on the GPU): answered by the dispatcher itself. Positive, in the range
// the run time reserves (0x7FFFFF00 and up; see realtime/host/dispatcher.py).
#define CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED 0x7FFFFF04

typedef struct __attribute__((packed, aligned(8))) cudaq_rpc_request_header {
  uint32_t magic;
  uint32_t function_id;
  uint32_t arg_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rpc_request_header_t;

typedef struct __attribute__((packed, aligned(8))) cudaq_rpc_response_header {
  uint32_t magic;
  int32_t status;
  uint32_t result_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rpc_response_header_t;

static_assert(sizeof(cudaq_rpc_request_header_t) == CUDAQ_RPC_HEADER_SIZE,
              "request header is 24 bytes");
static_assert(sizeof(cudaq_rpc_response_header_t) == CUDAQ_RPC_HEADER_SIZE,
              "response header is 24 bytes");

// 32-bit FNV-1a of a handler's name: the function_id of the wire format.
#define CUDAQ_FNV1A_32_BASIS 2166136261u
#define CUDAQ_FNV1A_32_PRIME 16777619u

__host__ __device__ constexpr uint32_t cudaq_fnv1a_32(const char *name,
                                                     uint32_t hash = CUDAQ_FNV1A_32_BASIS) {
  return (*name == '\0')
             ? hash
             : cudaq_fnv1a_32(name + 1, (hash ^ static_cast<uint32_t>(
                                                    static_cast<unsigned char>(*name))) *
                                            CUDAQ_FNV1A_32_PRIME);
}

static_assert(cudaq_fnv1a_32("rpc_increment") == 0x191b6322u, "FNV-1a golden value");

// ---------------------------------------------------------------------------
// Function table
// ---------------------------------------------------------------------------
typedef int (*cudaq_device_handler_t)(const void *args, uint32_t arg_len, void *result,
                                      uint32_t max_result_len, uint32_t *result_len);

// Dispatch modes, numbered as CUDA-Q realtime numbers them. One table may hold
// all three: each path serves its own and answers the others
// CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION (see cudaq_validate_request).
#define CUDAQ_DISPATCH_DEVICE_CALL 0  /* a device function the dispatch kernel calls */
#define CUDAQ_DISPATCH_GRAPH_LAUNCH 1 /* a CUDA graph: the built-in kernel (sm_90+) or the host path launches it */
#define CUDAQ_DISPATCH_HOST_CALL 2    /* a handler the host path (a CPU thread) calls */

// Flags of a table entry (byte 14, reserved[1]):
//  - CUDAQ_ENTRY_FLAG_PEER: on a shared ring, another consumer of the ring (a host
//    dispatcher) answers this entry's requests; a dispatch kernel that polls with
//    CUDAQ_POLL_SHARED leaves them in the ring (cudaq_is_peer_request). The run
//    time sets it on HOST_CALL entries when DispatcherConfig.shared_ring is on.
#define CUDAQ_ENTRY_FLAG_PEER 0x01u

// The shape a handler is written for (byte 13 of its table entry, reserved[0]):
//  - CUDAQ_HANDLER_SHAPE_LAUNCH (0, the default and what every handler exported
//    with CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION is): every thread of the dispatch
//    kernel's launch calls it for the same request; it strides its work with
//    cudaq_handler_rank()/cudaq_handler_size(), has one thread write
//    *result_len and returns the same status from every thread. It may use
//    barriers and shared memory of its block.
//  - CUDAQ_HANDLER_SHAPE_THREAD (1, CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION): one
//    thread serves one request on its own: it does all the work, writes
//    *result_len itself and uses no barrier, no shared memory and no warp
//    collective (other threads of its warp may be serving other requests, or
//    none). A kernel may call it from any single thread (rank 0 of a group of 1).
#define CUDAQ_HANDLER_SHAPE_LAUNCH 0
#define CUDAQ_HANDLER_SHAPE_THREAD 1

typedef struct cudaq_function_entry {
  // DEVICE_CALL: the handler's device address. GRAPH_LAUNCH: the device address of
  // the entry's cudaq_graph_io_t (which holds the graph), or 0 where the device path
  // does not serve it. HOST_CALL: 0.
  cudaq_device_handler_t handler;
  uint32_t function_id; // cudaq_fnv1a_32(name)
  uint8_t dispatch_mode; // CUDAQ_DISPATCH_DEVICE_CALL, _GRAPH_LAUNCH or _HOST_CALL
  // [0]: the handler's shape, CUDAQ_HANDLER_SHAPE_LAUNCH (0) or _THREAD (1), read with
  // cudaq_entry_shape; [1]: CUDAQ_ENTRY_FLAG_*; [2]: 0. All 0 is a launch-wide handler
  // with no flags: what an entry written to CUDA-Q realtime's layout means here.
  uint8_t reserved[3];
} cudaq_function_entry_t;

static_assert(sizeof(cudaq_function_entry_t) == 16, "function table entries are 16 bytes");

// ---------------------------------------------------------------------------
// Transport hooks: defined by the run-time bridge, linked by nvJitLink.
// ---------------------------------------------------------------------------
extern "C" {
// Opens this kernel's transport session; NULL means no transport: the kernel
// must return. A session belongs to the block that opened it: poll and publish
// it from a thread of that block (a bridge may keep it in the block's shared
// memory -- the host ring does -- where reading it after a poll's acquire costs
// no memory round trip).
__device__ void *cudaq_dev_enter_kernel(void *transport_ctx, volatile int *shutdown_flag);
// Waits for the next request. Returns 1 with *request (RPC header + args) and
// *response (where the response header + result go), or 0 once shutdown is set.
// Both are 8-byte aligned; *response is in global memory (device memory or
// mapped host memory), where the host can read it.
__device__ int cudaq_dev_rx_poll(void *session, void **request, void **response);
// Publishes the response of the request last polled; exactly once per polled
// request.
__device__ void cudaq_dev_tx_publish(void *session, void *response);

// Lanes: for kernels that serve several requests at once, one per thread.
// Opens lane `lane` of `num_lanes` (1..32) over the transport; every lane
// calls it. Returns NULL for a lane the bridge does not serve: a kernel serves
// with the lanes that got a session, and must return if lane 0 got none. A
// bridge with lanes (the host ring: slots lane, lane + num_lanes, ...) gives
// every lane its own session; the run time's default form, for bridges that
// define only the three hooks above, gives lane 0 the whole transport
// (cudaq_dev_enter_kernel) and NULL to the other lanes.
__device__ void *cudaq_dev_enter_lane(void *transport_ctx, volatile int *shutdown_flag,
                                      uint32_t lane, uint32_t num_lanes);
// Non-blocking poll of a lane's session: returns 1 with *request/*response
// (publish it exactly once with cudaq_dev_tx_publish) if a request has arrived,
// else 0 without waiting. It does not look at the shutdown flag: the caller
// decides when to stop. The default form (bridges without lanes) waits like
// cudaq_dev_rx_poll and returns 0 once shutdown is set.
__device__ int cudaq_dev_rx_try_poll(void *session, void **request, void **response);

// `wait` of cudaq_dev_rx_poll_into: CUDAQ_POLL_WAIT waits (else it looks once);
// CUDAQ_POLL_SHARED polls a ring that another consumer shares (a host dispatcher
// answering the table's HOST_CALL entries, DispatcherConfig.shared_ring): a
// request that consumer answered first is passed over, never staged. Only
// bridges that support it may be asked (the host ring does; the run time's
// default form ignores the bit).
#define CUDAQ_POLL_WAIT 1
#define CUDAQ_POLL_SHARED 2

// Polls like cudaq_dev_rx_poll (wait != 0) or cudaq_dev_rx_try_poll (wait == 0),
// and when the request (header + arguments) fits `stage_bytes` (at least 32),
// copies it into `stage` -- a buffer of the caller's, 8-byte aligned, typically
// its part of shared memory -- and points *request there: the handler's reads
// of its arguments then cost no device-memory round trip (on an H200 ~0.3 us
// a request). Otherwise *request is where the bridge staged it. The buffer is
// the caller's until it publishes this request. Bridges may define it (the
// host ring does); the run time's default form polls, then copies.
__device__ int cudaq_dev_rx_poll_into(void *session, void **request, void **response,
                                      void *stage, uint32_t stage_bytes, int wait);

// Optional: hands the publish of the request last polled to another kernel (a graph
// handler). Returns 1 with *flag and *value such that, once the response bytes are
// written, a system-scope release store of *value to *flag publishes it; the caller
// then never calls cudaq_dev_tx_publish for that request. Returns 0 where the bridge
// cannot hand its publish over (the run time's default form): the caller publishes
// as usual. The host ring hands over its slot's response flag and sequence number.
__device__ int cudaq_dev_tx_handoff(void *session, void *response, volatile uint32_t **flag,
                                    uint32_t *value);

// Optional: records the position of this kernel's session in the transport
// context, so that the next cudaq_dev_resume_kernel over the same context (a
// relaunch of the kernel) resumes there instead of at a fresh ring. Call it as
// the session's last use, after its last publish. Returns 1 if recorded, 0 where
// the bridge cannot resume (the run time's default form). The built-in graph
// dispatch kernel relaunches itself through it (see cudaq_graph_io_t).
__device__ int cudaq_dev_suspend_kernel(void *session);
// Optional: cudaq_dev_enter_kernel, opening the session where the last kernel
// over this context suspended (at a fresh ring if none did, or the record was
// consumed). The run time's default form is cudaq_dev_enter_kernel.
__device__ void *cudaq_dev_resume_kernel(void *transport_ctx, volatile int *shutdown_flag);

// Calling a handler: the call a dispatch kernel makes where one thread serves
// a request (cudaq_call_handler and cudaq_answer_request below). Defined at
// link time, by one of:
//  - the module's handler switch, which skbuild-cudaq's build generates for each
//    target from the thread-shaped handlers its device sources export: a direct
//    call per such handler, chosen by comparing addresses, which LTO inlines
//    into the dispatch kernel, and the pointer for any other address;
//  - the run time's default form (modules without a switch): the pointer.
// The result is the same either way; only the cost of the call differs (an
// indirect call spills the caller's registers to local memory and reloads
// what the handler may have changed: 0.07-0.19 us a request for a small handler
// on an H200; bench/README.md says where the measurements are).
__device__ int cudaq_dev_call_handler(cudaq_device_handler_t handler, const void *args,
                                      uint32_t arg_len, void *result, uint32_t max_result_len,
                                      uint32_t *result_len);
// The same for launch-wide handlers: the call a dispatch kernel makes where
// every thread of its launch serves one request (cudaq_call_launch_handler
// below). The module's handler switch defines it with a direct call per
// launch-wide handler its device sources export; the default form is the
// pointer. A second hook rather than one switch over every export: each call
// site then inlines only the handlers it can call, so the leader's path of a
// launch-wide kernel keeps its registers (one switch over both shapes made the
// cluster kernel's launch-wide round trip slower on an H200, 1.16x -> 1.42x of
// the floor), and the launch-wide call of the cluster example got 0.16-0.22 us
// faster.
__device__ int cudaq_dev_call_launch_handler(cudaq_device_handler_t handler, const void *args,
                                             uint32_t arg_len, void *result,
                                             uint32_t max_result_len, uint32_t *result_len);
}

// Calls `handler` with a result length of the call's own: a handler that is not
// inlined gets the address of this variable, not of the caller's, so that the
// caller's length (and every other call's) stays in a register. A length whose
// address reaches a call lives in local memory: a store and a dependent load on
// every round trip, whichever handler ran. The handler switch makes each of its
// calls through this, and so does cudaq_call_handler's pointer call.
static __device__ __forceinline__ int32_t cudaq_detail_call_direct(cudaq_device_handler_t handler,
                                                                   const void *args,
                                                                   uint32_t arg_len, void *result,
                                                                   uint32_t max_result_len,
                                                                   uint32_t *result_len) {
  uint32_t len = *result_len;
  const int32_t status = handler(args, arg_len, result, max_result_len, &len);
  *result_len = len;
  return status;
}

// The measurement build (-DCUDAQ_REALTIME_PHASES: each request's phases stamped
// for `skbuild-cudaq phases`); without the macro its stamps are nothing.
#include <cudaq/realtime/detail/phases.cuh>

// ---------------------------------------------------------------------------
// Helpers shared by every dispatch kernel (inline: no symbol of their own).
// ---------------------------------------------------------------------------

// Internal: reads a kernel's function table through the read-only data path
// (ld.global.nc). The table does not change while a dispatch kernel runs, and
// the compiler may keep such loads in registers or hoist them. (Only for
// device memory: a table copied to shared memory is read with plain loads.)
static __device__ __forceinline__ uint32_t cudaq_detail_ldnc_u32(const uint32_t *p) {
  uint32_t v;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
static __device__ __forceinline__ uint64_t cudaq_detail_ldnc_u64(const void *p) {
  uint64_t v;
  asm("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

// Internal: the request header as three 8-byte words. Bridges stage requests
// with 8-byte stores; reading the header with the same width and a may_alias
// type lets the compiler serve these reads from the values it just stored
// (after inlining) instead of a round trip to memory, and keeps the reads
// ordered after those stores whatever types the bridge used.
typedef uint64_t __attribute__((__may_alias__)) cudaq_detail_word_t;
typedef struct cudaq_detail_request_words {
  uint64_t w0; // magic | function_id << 32
  uint64_t w1; // arg_len | request_id << 32
  uint64_t w2; // ptp_timestamp
} cudaq_detail_request_words_t;

static __device__ __forceinline__ cudaq_detail_request_words_t
cudaq_detail_request_header(const void *request) {
  const cudaq_detail_word_t *w = static_cast<const cudaq_detail_word_t *>(request);
  cudaq_detail_request_words_t h;
  h.w0 = w[0];
  h.w1 = w[1];
  h.w2 = w[2];
  return h;
}

// Internal: reads a table word, from a table in shared memory (after
// cudaq_table_to_shared) or in device memory: a plain generic load (no address
// space test on the critical path).
static __device__ __forceinline__ uint32_t cudaq_detail_table_u32(const uint32_t *p) {
  return *p;
}
static __device__ __forceinline__ uint64_t cudaq_detail_table_u64(const void *p) {
  return *static_cast<const uint64_t *>(p);
}

// Copies a kernel's function table into the block's shared memory, where a
// lookup costs no device-memory round trip (after the system-scope acquire of
// a poll, which empties L1, a lookup in device memory costs one: ~0.2-0.3 us
// on an H200). Returns the table to look up in: the copy, or `table` itself
// when it has more than CUDAQ_SHARED_TABLE_ENTRIES entries. Call it from every
// thread of the block, before the kernel's loop (it ends with __syncthreads()).
// The table does not change while a dispatch kernel runs.
#ifndef CUDAQ_SHARED_TABLE_ENTRIES
#define CUDAQ_SHARED_TABLE_ENTRIES 32u
#endif
static __device__ __forceinline__ const cudaq_function_entry_t *
cudaq_table_to_shared(const cudaq_function_entry_t *table, uint32_t count) {
  __shared__ __align__(16) cudaq_function_entry_t cudaq_shared_table[CUDAQ_SHARED_TABLE_ENTRIES];
  if (count > CUDAQ_SHARED_TABLE_ENTRIES)
    return table;
  const uint32_t tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const uint32_t threads = blockDim.x * blockDim.y * blockDim.z;
  for (uint32_t i = tid; i < 2 * count; i += threads) {
    const uint64_t word = cudaq_detail_ldnc_u64(reinterpret_cast<const uint64_t *>(table) + i);
    reinterpret_cast<uint64_t *>(cudaq_shared_table)[i] = word;
  }
  __syncthreads();
  return cudaq_shared_table;
}

// Linear search of the function table. Returns NULL for an unknown id.
static __device__ __forceinline__ const cudaq_function_entry_t *
unified_lookup_entry(const cudaq_function_entry_t *table, uint32_t count, uint32_t function_id) {
  for (uint32_t i = 0; i < count; ++i) {
    if (cudaq_detail_table_u32(&table[i].function_id) == function_id)
      return &table[i];
  }
  return nullptr;
}

// Writes the 24-byte response header for a request whose header words are `h`
// (or for `request`, below) into `response`.
static __device__ __forceinline__ void
cudaq_detail_write_header_words(void *response, const cudaq_detail_request_words_t &h,
                                int32_t status, uint32_t result_len) {
  cudaq_rpc_response_header_t *resp = static_cast<cudaq_rpc_response_header_t *>(response);
  resp->magic = CUDAQ_RPC_MAGIC_RESPONSE;
  resp->status = status;
  resp->result_len = result_len;
  resp->request_id = static_cast<uint32_t>(h.w1 >> 32);
  resp->ptp_timestamp = h.w2;
}
static __device__ __forceinline__ void cudaq_detail_write_header(void *response,
                                                                 const void *request,
                                                                 int32_t status,
                                                                 uint32_t result_len) {
  cudaq_detail_write_header_words(response, cudaq_detail_request_header(request), status,
                                  result_len);
}

static __device__ __forceinline__ void write_response_header(void *response, const void *request,
                                                             int32_t status, uint32_t result_len) {
  CUDAQ_REALTIME_PHASE(3);
  // Both are 8-byte aligned (the contract of cudaq_dev_rx_poll).
  const void *req = __builtin_assume_aligned(request, 8);
  void *resp = __builtin_assume_aligned(response, 8);
  if (__isShared(req) && __isGlobal(resp)) { // as in cudaq_call_handler
    __builtin_assume(__isShared(req));
    __builtin_assume(__isGlobal(resp));
    cudaq_detail_write_header(resp, req, status, result_len);
  } else {
    cudaq_detail_write_header(resp, req, status, result_len);
  }
  CUDAQ_REALTIME_PHASE(4);
}

// Checks a polled request before its handler runs. Returns CUDAQ_RPC_STATUS_SUCCESS
// and the entry to call, or the error status to answer with (bad magic,
// unknown function id, arguments longer than the slot).
static __device__ __forceinline__ int32_t
cudaq_validate_request(const void *request, uint32_t slot_size,
                       const cudaq_function_entry_t *table, uint32_t table_count,
                       const cudaq_function_entry_t **entry) {
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(request);
  *entry = nullptr;
  if (static_cast<uint32_t>(h.w0) != CUDAQ_RPC_MAGIC_REQUEST)
    return CUDAQ_RPC_STATUS_BAD_MAGIC;
  if (static_cast<uint32_t>(h.w1) > slot_size - CUDAQ_RPC_HEADER_SIZE)
    return CUDAQ_RPC_STATUS_ARGS_TOO_LONG;
  const cudaq_function_entry_t *e =
      unified_lookup_entry(table, table_count, static_cast<uint32_t>(h.w0 >> 32));
  if (e == nullptr)
    return CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
  // handler (bytes 0..7) and function_id | dispatch_mode << 32 (bytes 8..15)
  const uint64_t handler = cudaq_detail_table_u64(&e->handler);
  const uint64_t id_mode = cudaq_detail_table_u64(&e->function_id);
  if (static_cast<uint8_t>(id_mode >> 32) != CUDAQ_DISPATCH_DEVICE_CALL || handler == 0)
    return CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION;
  *entry = e;
  CUDAQ_REALTIME_PHASE(2);
  return CUDAQ_RPC_STATUS_SUCCESS;
}

// The shape of a validated entry (CUDAQ_HANDLER_SHAPE_*). Reads the same
// 8 bytes as cudaq_validate_request, so after it the compiler reuses that load.
static __device__ __forceinline__ uint32_t cudaq_entry_shape(const cudaq_function_entry_t *e) {
  return static_cast<uint8_t>(cudaq_detail_table_u64(&e->function_id) >> 40);
}

// On a shared ring: whether a request that cudaq_validate_request answered
// CUDAQ_RPC_STATUS_UNKNOWN_FUNCTION is one the ring's other consumer answers
// (its entry is flagged CUDAQ_ENTRY_FLAG_PEER): then the kernel leaves it in the
// ring -- neither answers nor publishes nor counts it. (Magic and length were
// checked: a request that fails them is this kernel's to answer.)
static __device__ __forceinline__ bool cudaq_is_peer_request(const void *request,
                                                             const cudaq_function_entry_t *table,
                                                             uint32_t table_count) {
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(request);
  const cudaq_function_entry_t *e =
      unified_lookup_entry(table, table_count, static_cast<uint32_t>(h.w0 >> 32));
  return e != nullptr &&
         (static_cast<uint8_t>(cudaq_detail_table_u64(&e->function_id) >> 48) &
          CUDAQ_ENTRY_FLAG_PEER) != 0;
}

// A dispatch kernel's memory of the entry it looked up last, kept in registers
// across requests: a request for the same function as the one before it (the
// common case of a realtime loop) is validated without a lookup in the table.
// The table does not change while a dispatch kernel runs, so the memory stays
// true. Start with cudaq_lookup_cache_empty().
typedef struct cudaq_lookup_cache {
  cudaq_device_handler_t handler;      // the entry's handler; nullptr: empty
  const cudaq_function_entry_t *entry; // the entry
  uint32_t function_id;                // its function id
  uint32_t shape;                      // its CUDAQ_HANDLER_SHAPE_*
} cudaq_lookup_cache_t;

static __device__ __forceinline__ cudaq_lookup_cache_t cudaq_lookup_cache_empty() {
  cudaq_lookup_cache_t c;
  c.handler = nullptr;
  c.entry = nullptr;
  c.function_id = 0;
  c.shape = CUDAQ_HANDLER_SHAPE_LAUNCH;
  return c;
}

// cudaq_validate_request with a lookup cache: returns CUDAQ_RPC_STATUS_SUCCESS
// with the request's entry in *cache (handler, entry, shape), or the error
// status to answer with (then *cache is unchanged).
static __device__ __forceinline__ int32_t
cudaq_validate_request_cached(const void *request, uint32_t slot_size,
                              const cudaq_function_entry_t *table, uint32_t table_count,
                              cudaq_lookup_cache_t *cache) {
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(request);
  if (cache->handler != nullptr && static_cast<uint32_t>(h.w0) == CUDAQ_RPC_MAGIC_REQUEST &&
      static_cast<uint32_t>(h.w1) <= slot_size - CUDAQ_RPC_HEADER_SIZE &&
      static_cast<uint32_t>(h.w0 >> 32) == cache->function_id) {
    CUDAQ_REALTIME_PHASE(2);
    return CUDAQ_RPC_STATUS_SUCCESS;
  }
  const cudaq_function_entry_t *e = nullptr;
  const int32_t status = cudaq_validate_request(request, slot_size, table, table_count, &e);
  if (status == CUDAQ_RPC_STATUS_SUCCESS) {
    cache->handler = reinterpret_cast<cudaq_device_handler_t>(cudaq_detail_table_u64(&e->handler));
    cache->entry = e;
    cache->function_id = static_cast<uint32_t>(h.w0 >> 32);
    cache->shape = cudaq_entry_shape(e);
  }
  return status;
}

// Internal: cudaq_call_handler's body with the two calls as parameters, each
// taking (args, arg_len, result, max_result_len, result_len): `known` where the
// request is in shared memory and the response in global memory (both spaces
// known to the compiler inside it), `other` for any other request.
template <typename Known, typename Other>
static __device__ __forceinline__ int32_t
cudaq_detail_call_tested(Known known, Other other, const void *request, void *response,
                         uint32_t max_result_len, uint32_t *result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  const uint32_t arg_len = static_cast<uint32_t>(cudaq_detail_request_header(req).w1);
  uint32_t len = 0;
  int32_t status;
  if (__isShared(req) && __isGlobal(resp)) {
    __builtin_assume(__isShared(req));
    __builtin_assume(__isGlobal(resp));
    status = known(req + CUDAQ_RPC_HEADER_SIZE, arg_len, resp + CUDAQ_RPC_HEADER_SIZE,
                   max_result_len, &len);
  } else {
    status = other(req + CUDAQ_RPC_HEADER_SIZE, arg_len, resp + CUDAQ_RPC_HEADER_SIZE,
                   max_result_len, &len);
  }
  *result_len = len < max_result_len ? len : max_result_len;
  return status;
}

// Calls `handler` for `request` with its arguments and result area; *result_len
// gets what the handler wrote there (0 if this thread wrote nothing: a
// launch-wide handler has one thread write it), at most max_result_len.
//
// A request in shared memory (one that cudaq_dev_rx_poll_into staged in the
// kernel's buffer) with its response in global memory (device or mapped host
// memory: every bridge's) goes through cudaq_dev_call_handler -- the module's
// handler switch, whose direct calls LTO inlines -- with both address spaces,
// and the 8-byte alignment of both (the contract of cudaq_dev_rx_poll), known
// to the compiler: an inlined handler then reads its arguments with wide
// shared-memory loads issued ahead of its global stores of the result, as the
// same code would compile in a kernel of its own. Any other request goes through
// the pointer. The test costs a few integer instructions. (Calling the handler
// with the staged copy itself as the arguments' pointer measured 0.09-0.11 us a
// request slower than this on an H200.)
static __device__ __forceinline__ int32_t cudaq_call_handler(cudaq_device_handler_t handler,
                                                             const void *request, void *response,
                                                             uint32_t max_result_len,
                                                             uint32_t *result_len) {
  return cudaq_detail_call_tested(
      [handler](const void *args, uint32_t arg_len, void *result, uint32_t max, uint32_t *len) {
        return cudaq_dev_call_handler(handler, args, arg_len, result, max, len);
      },
      [handler](const void *args, uint32_t arg_len, void *result, uint32_t max, uint32_t *len) {
        return cudaq_detail_call_direct(handler, args, arg_len, result, max, len);
      },
      request, response, max_result_len, result_len);
}

// Calls the launch-wide `handler` for `request`: every thread of the launch (or
// of the group the kernel gives the request) calls it with the same request;
// *result_len as cudaq_call_handler's. Goes through cudaq_dev_call_launch_handler
// -- the module's handler switch over its launch-wide exports, whose direct
// calls LTO inlines, or the pointer -- with no test of address spaces: a
// launch-wide request may be in another block's shared memory (a cluster) or in
// device memory (a cooperative grid), and a test would compile every handler
// twice into the kernel.
static __device__ __forceinline__ int32_t cudaq_call_launch_handler(cudaq_device_handler_t handler,
                                                                    const void *request,
                                                                    void *response,
                                                                    uint32_t max_result_len,
                                                                    uint32_t *result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  const uint32_t arg_len = static_cast<uint32_t>(cudaq_detail_request_header(req).w1);
  uint32_t len = 0;
  const int32_t status = cudaq_dev_call_launch_handler(
      handler, req + CUDAQ_RPC_HEADER_SIZE, arg_len, resp + CUDAQ_RPC_HEADER_SIZE, max_result_len,
      &len);
  *result_len = len < max_result_len ? len : max_result_len;
  return status;
}

// Internal: cudaq_answer_request's body, for one of its two address-space cases.
// The header words are read before the handler runs (a handler gets its
// arguments, not the header, and they are const): they stay in registers
// across the call, and the response header is written from them.
template <bool kKnownSpaces>
static __device__ __forceinline__ int32_t
cudaq_detail_answer(cudaq_device_handler_t handler, uint32_t shape, int32_t status,
                    const uint8_t *req, uint8_t *resp, uint32_t max_result_len) {
  const cudaq_detail_request_words_t h = cudaq_detail_request_header(req);
  uint32_t len = 0;
  if (status == CUDAQ_RPC_STATUS_SUCCESS) {
    const void *args = req + CUDAQ_RPC_HEADER_SIZE;
    void *result = resp + CUDAQ_RPC_HEADER_SIZE;
    const uint32_t arg_len = static_cast<uint32_t>(h.w1);
    if (!kKnownSpaces)
      status = cudaq_detail_call_direct(handler, args, arg_len, result, max_result_len, &len);
    else if (shape == CUDAQ_HANDLER_SHAPE_THREAD)
      status = cudaq_dev_call_handler(handler, args, arg_len, result, max_result_len, &len);
    else
      status = cudaq_dev_call_launch_handler(handler, args, arg_len, result, max_result_len, &len);
  }
  len = len < max_result_len ? len : max_result_len;
  CUDAQ_REALTIME_PHASE(3);
  cudaq_detail_write_header_words(resp, h, status, len);
  CUDAQ_REALTIME_PHASE(4);
  return status;
}

// Answers a request where one thread serves it: when `status` (what
// cudaq_validate_request or cudaq_validate_request_cached returned) is
// CUDAQ_RPC_STATUS_SUCCESS, calls `handler` -- of shape `shape`: a
// thread-shaped one, or a launch-wide one in a one-thread launch (rank 0 of 1)
// -- with the request's arguments and result area, then writes the response
// header: cudaq_call_handler (or cudaq_call_launch_handler) followed by
// write_response_header, in one call. Returns the status answered (the
// handler's, or `status`). Publish the response afterwards.
//
// Why one call: the two in sequence test the request's address space twice
// and, after the handler, load the header words (request id, timestamp) back
// from the request, a load that waits on the handler's stores. Here a request
// in shared memory with its response in global memory (what
// cudaq_dev_rx_poll_into gives a kernel that passed its own stage) is served
// by one branch where both spaces are known: the handler comes through the
// module's handler switch for its shape, the arguments' length and the header
// words come from the registers the staging copy stored, and the response
// header is written straight after the handler's last store. Any other request
// goes through the pointer (cudaq_detail_call_direct).
static __device__ __forceinline__ int32_t cudaq_answer_request(cudaq_device_handler_t handler,
                                                               uint32_t shape, int32_t status,
                                                               const void *request,
                                                               void *response,
                                                               uint32_t max_result_len) {
  const uint8_t *req = static_cast<const uint8_t *>(__builtin_assume_aligned(request, 8));
  uint8_t *resp = static_cast<uint8_t *>(__builtin_assume_aligned(response, 8));
  if (__isShared(req) && __isGlobal(resp)) {
    __builtin_assume(__isShared(req));
    __builtin_assume(__isGlobal(resp));
    return cudaq_detail_answer<true>(handler, shape, status, req, resp, max_result_len);
  }
  return cudaq_detail_answer<false>(handler, shape, status, req, resp, max_result_len);
}

// Pointers to the argument and result areas of a slot.
static __device__ __forceinline__ const void *cudaq_request_args(const void *request) {
  return static_cast<const uint8_t *>(request) + CUDAQ_RPC_HEADER_SIZE;
}
static __device__ __forceinline__ void *cudaq_response_result(void *response) {
  return static_cast<uint8_t *>(response) + CUDAQ_RPC_HEADER_SIZE;
}
static __device__ __forceinline__ uint32_t cudaq_request_arg_len(const void *request) {
  return static_cast<uint32_t>(cudaq_detail_request_header(request).w1);
}

// The leader's loop of a launch-wide dispatch kernel (built-in block, cooperative
// grid, cluster): on the calling thread alone, serves every request that needs no
// other thread -- thread-shaped handlers and bad requests, answered and published
// here -- until one needs the whole launch or shutdown. Returns 1 with that
// launch-wide request in *request, *response, *entry (not answered: the kernel
// hands it to its threads, then writes the header and publishes), 0 at shutdown.
// Each request is counted in *stats as soon as it is seen (before its response
// can be). With `stage` (the caller's shared memory, see cudaq_dev_rx_poll_into)
// requests that fit are copied there first; pass nullptr when other blocks must
// read a launch-wide request (they cannot see this block's shared memory).
static __device__ __forceinline__ int
cudaq_serve_until_launch_wide(void *session, uint32_t slot_size,
                              const cudaq_function_entry_t *table, uint32_t table_count,
                              unsigned long long *stats, void *stage, uint32_t stage_bytes,
                              void **request, void **response,
                              const cudaq_function_entry_t **entry) {
  const uint32_t max_result = slot_size - CUDAQ_RPC_HEADER_SIZE;
  cudaq_lookup_cache_t cache = cudaq_lookup_cache_empty();
  for (;;) {
    // The compiler cannot prove a __shared__ stage non-null, so this test stays
    // on every request's path. Choosing by stage_bytes (a constant at the call
    // sites) instead took it off and made this loop in a one-thread kernel as
    // fast as the single-thread example, but the built-in and cluster kernels
    // slower back to back (on an H200).
    const int running = stage != nullptr
                            ? cudaq_dev_rx_poll_into(session, request, response, stage,
                                                     stage_bytes, 1)
                            : cudaq_dev_rx_poll(session, request, response);
    if (!running)
      return 0;
    int32_t status =
        cudaq_validate_request_cached(*request, slot_size, table, table_count, &cache);
    // Counted now, not just before the publish: the publish (a system-scope
    // release) waits for earlier stores to complete, and by then this one has.
    atomicAdd(stats, 1ull);
    if (status == CUDAQ_RPC_STATUS_SUCCESS && cache.shape != CUDAQ_HANDLER_SHAPE_THREAD) {
      *entry = cache.entry;
      return 1; // launch-wide: the caller hands it to every thread
    }
    cudaq_answer_request(cache.handler, CUDAQ_HANDLER_SHAPE_THREAD, status, *request, *response,
                         max_result);
    cudaq_dev_tx_publish(session, *response);
  }
}

#include <cudaq/realtime/detail/graph.cuh>

// ---------------------------------------------------------------------------
// Exporting a handler.
//
// CUDA cannot find a device function by name (after LTO it is even cloned into
// its caller), so a handler is exported through a device global that holds its
// address: `cudaq_handler_<name>`. The run time reads that global
// (get_device_handler(module, "<name>")) and puts the address in the function
// table. The braced extern "C" form matters: the one-line form leaves an
// undefined host symbol and the module fails at import. The global is const
// (`extern` keeps it visible): after LTO its value is a known constant, so a
// handler switch (cudaq_dev_call_handler) that compares an address with it and
// calls through it makes a direct call that the optimizer can inline.
// ---------------------------------------------------------------------------
#define CUDAQ_REALTIME_HANDLER_SYMBOL_PREFIX "cudaq_handler_"
#define CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(name)                                              \
  extern "C" {                                                                                   \
  extern __device__ const cudaq_device_handler_t cudaq_handler_##name = name;                    \
  }                                                                                              \
  static_assert(true, "require a semicolon after CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION")

// Exports a thread-shaped handler (CUDAQ_HANDLER_SHAPE_THREAD): as above, plus
// a marker global `cudaq_shape_thread_<name>` whose presence in the
// linked module tells the run time the handler's shape (FunctionTable.add_device
// fills the entry's shape from it unless given one).
#define CUDAQ_REALTIME_SHAPE_THREAD_SYMBOL_PREFIX "cudaq_shape_thread_"
#define CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION(name)                                              \
  extern "C" {                                                                                   \
  extern __device__ const cudaq_device_handler_t cudaq_handler_##name = name;                    \
  __device__ uint32_t cudaq_shape_thread_##name = CUDAQ_HANDLER_SHAPE_THREAD;                    \
  }                                                                                              \
  static_assert(true, "require a semicolon after CUDAQ_REALTIME_EXPORT_THREAD_FUNCTION")

// The signature every dispatch kernel takes, built-in or custom:
//   extern "C" __global__ void my_dispatcher(void *transport_ctx, uint32_t slot_size,
//       const cudaq_function_entry_t *table, uint32_t table_count,
//       volatile int *shutdown_flag, unsigned long long *stats);
#define CUDAQ_DISPATCH_KERNEL_PARAMS                                                             \
  void *transport_ctx, uint32_t slot_size, const cudaq_function_entry_t *table,                  \
      uint32_t table_count, volatile int *shutdown_flag, unsigned long long *stats

#endif // CUDAQ_REALTIME_UNIFIED_DISPATCH_DEVICE_CUH
