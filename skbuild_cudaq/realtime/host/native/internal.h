/* internal.h: what the files of the host path's native core share (nothing here is public).
 *
 * The host path's native core (skbuild_cudaq.realtime.host._native): the serving loop of
 * HostDispatcher, the UDP feeder of UdpFeeder, and the lookup and direct call of native
 * host handlers (cudaq/realtime/host_handler.h). Python's limited API (3.10): one abi3
 * module for every CPython from 3.10. Built by cmake/NativeCore.cmake; required (the host
 * path and the UDP feeder have no second implementation in Python).
 *
 * One module of several C files, one job each (cmake/NativeCore.cmake lists them):
 *   internal.h    this header: the ring view, the wire header, the thread life cycle's,
 *                 the handler table's, the graph workers' and the loop's types
 *   life.c        the thread life cycle shared by Loop and Feeder (start, stop, fork),
 *                 the shared error texts (the loop's last error), sleeping and naming a
 *                 thread
 *   ring.c        the ring view of one allocation (the layout of ring/layout.py)
 *   handlers.c    native host handlers (lookup, direct call) and Python handler calls
 *   table.c       the handler table: set_table(), and freeing the tables retired
 *   loop.c        Loop: the serving loop (HostDispatcher), its life and its Python type
 *   graphs.c      the loop's graph workers (GRAPH_LAUNCH entries): set_graphs(), launch, sweep
 *   udp_feeder.c  Feeder: the UDP transport into a ring (UdpFeeder); a second transport is
 *                 a file of its own beside it, a producer of the ring as this one is
 *   backlog.c     what a transport holds while the ring is full, and the fair shedding of
 *                 what does not fit (longest queue drop)
 *   segment.c     a shared ring segment truncated under the process (SIGBUS): one line
 *   module.c      the module: its functions, types and constants
 *
 *   host_export(path, symbol, load) -> (handler address, name, version) | None
 *       the record `symbol` (a cudaq_host_export_t) of the binary at `path`, found with
 *       dlsym: in the already loaded binary (load=False: RTLD_NOLOAD), or loading it.
 *       None: no such symbol. OSError: the binary cannot be opened; ValueError: the
 *       symbol is not such a record.
 *   call_handler(address, args, max_result_len) -> (status, bytes)
 *       one direct call of a native handler, without the GIL (NativeHandler.__call__).
 *
 *   Loop(address, num_slots, slot_size, owner)
 *       the consumer of a ring (HostDispatcher). set_table([(function_id, name, address,
 *       callable), ...]) installs the handlers (address != 0: native, else the Python
 *       callable); start() runs a thread that polls the ring without the GIL, calls
 *       native handlers without it and takes it (one thread state for the thread's life)
 *       only to call a Python handler; stop(timeout) -> bool; serve_one() -> bool (the
 *       caller's thread, holding the GIL); take_exit() -> the BaseException a Python
 *       handler raised (not an Exception: the program is asked to stop) or None.
 *       Counters: published, rejected, handler_errors; last_handler_error; next (the
 *       next request number); idle_sleep_ns (0: spin while serving); shared_ring (a
 *       ring a device dispatcher consumes too: see next_request()).
 *       Graph handlers (GRAPH_LAUNCH): set_graphs(context, entry_points, ring_device,
 *       workers, owner) gives the loop one worker per graph entry (a stream, a device
 *       record, its pinned image, a publish word; see "Graph workers" below) and the
 *       CUDA driver's entry points as addresses (cuGetProcAddress, from Python): this
 *       module links nothing of CUDA. set_table items name a worker (>= 0) for a graph
 *       entry. idle_mask, graphs_outstanding and graph_stats() show the bookkeeping.
 *   Feeder(fd, address, num_slots, slot_size, owner)
 *       a producer of a ring fed from a UDP socket (UdpFeeder): a thread that never
 *       takes the GIL: recvmmsg, validate, write into the ring, sendmmsg the answers.
 *       start(next) / stop(timeout) -> bool; counters(); error (None, or why the thread
 *       stopped on its own); next; idle_sleep_ns (0: spin while serving).
 *
 * fork(): a child gets copies of Loop and Feeder objects, not their threads; there they are
 * idle (life_forked), so stop() returns at once and start() runs a thread of the child's.
 *
 * Memory order: request bytes, then a release store of the request flag; an acquire
 * load of a flag, then the bytes it guards (the device pairs these with
 * ld.acquire.sys / st.release.sys). Correct on any host CPU. What a thread writes while
 * another reads it -- counters, the stop word, the idle mask, a graph worker's counts -- is
 * a relaxed atomic on both sides (STORE_RLX / BUMP, LOAD_RLX), read from Python through a
 * getter (loop_counter, graph_stats(), counters()), never a PyMemberDef (a plain load);
 * the rest of a life is under its mutex. Checked under ThreadSanitizer by
 * `tools/sanitize.sh --thread`.
 */
#ifndef SKBUILD_CUDAQ_NATIVE_INTERNAL_H
#define SKBUILD_CUDAQ_NATIVE_INTERNAL_H

#define _GNU_SOURCE /* recvmmsg, sendmmsg, pthread_setname_np */
#ifndef SKBUILD_CUDAQ_FULL_API /* set by cmake/NativeCore.cmake where there is no stable ABI */
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cudaq/realtime/host_handler.h>

#define REQUEST_MAGIC 0x43555152u
#define RESPONSE_MAGIC 0x43555153u
#define HEADER_SIZE 24u
#define STATUS_BAD_MAGIC (-1)
#define STATUS_UNKNOWN_FUNCTION (-2)
#define STATUS_ARGS_TOO_LONG (-3)
#define STATUS_HANDLER_EXCEPTION CUDAQ_HOST_STATUS_HANDLER_EXCEPTION
#define STATUS_RESULT_TOO_LONG CUDAQ_HOST_STATUS_RESULT_TOO_LONG
#define STATUS_BAD_HANDLER_RESULT CUDAQ_HOST_STATUS_BAD_HANDLER_RESULT
#define STATUS_GRAPH_LAUNCH_FAILED CUDAQ_HOST_STATUS_GRAPH_LAUNCH_FAILED
#define STATUS_GRAPH_NOT_PUBLISHED CUDAQ_HOST_STATUS_GRAPH_NOT_PUBLISHED

/* With idle_sleep_ns set, a thread spins this long with nothing to do before it sleeps. */
#define IDLE_SPIN_NS 100000ull
/* Shared ring: slots next_request() skips at most in one call (those the device answered). */
#define SKIP_STEP 65536u
#define ERROR_TEXT 320

#define LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define STORE_REL(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define LOAD_RLX(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE_RLX(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define BUMP(p) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED)

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------------------ */
/* The ring (the layout of skbuild_cudaq.realtime.ring.layout)                           */
/* ------------------------------------------------------------------------------------ */
typedef struct {
  uint8_t *base;
  uint32_t num_slots;
  uint32_t slot_size;
  uint32_t max_payload;
  uint8_t *rx;
  uint8_t *tx;
  uint32_t *rx_flags;
  uint32_t *tx_flags;
  uint64_t *ids;
} ring_t;

static inline uint32_t slot_of(const ring_t *r, uint64_t k) { return (uint32_t)(k % r->num_slots); }
static inline uint32_t seq_of(const ring_t *r, uint64_t k) {
  return (uint32_t)(k / r->num_slots + 1);
}

typedef struct {
  uint32_t magic, function_id, arg_len, request_id;
  uint64_t timestamp;
} header_t;

static inline void read_header(const uint8_t *p, header_t *h) {
  memcpy(&h->magic, p, 4);
  memcpy(&h->function_id, p + 4, 4);
  memcpy(&h->arg_len, p + 8, 4);
  memcpy(&h->request_id, p + 12, 4);
  memcpy(&h->timestamp, p + 16, 8);
}

static inline void write_header(uint8_t *p, uint32_t magic, int32_t status_or_fid,
                                uint32_t len, uint32_t request_id, uint64_t timestamp) {
  memcpy(p, &magic, 4);
  memcpy(p + 4, &status_or_fid, 4);
  memcpy(p + 8, &len, 4);
  memcpy(p + 12, &request_id, 4);
  memcpy(p + 16, &timestamp, 8);
}

/* ------------------------------------------------------------------------------------ */
/* Graph handlers: the CUDA driver's entry points and a graph's I/O context               */
/* ------------------------------------------------------------------------------------ */
/* The driver functions the graph workers call, by address (cuGetProcAddress, CUDA 12.0
 * ABI): this module links nothing of CUDA, so the package builds and the host path runs
 * where there is none. CUresult is an int; CUcontext, CUstream and CUgraphExec are
 * pointers; CUdeviceptr is a 64-bit integer. */
typedef int (*cu_ctx_set_current_fn)(void *ctx);
typedef int (*cu_graph_launch_fn)(void *exec, void *stream);
typedef int (*cu_stream_query_fn)(void *stream);
typedef int (*cu_memcpy_htod_async_fn)(unsigned long long dst, const void *src, size_t bytes,
                                       void *stream);
typedef int (*cu_get_error_name_fn)(int error, const char **name);
#define CU_SUCCESS 0
#define CU_ERROR_NOT_READY 600

typedef struct {
  cu_ctx_set_current_fn ctx_set_current;
  cu_graph_launch_fn graph_launch;
  cu_stream_query_fn stream_query;
  cu_memcpy_htod_async_fn memcpy_htod_async;
  cu_get_error_name_fn get_error_name; /* may be NULL: errors are then named by number */
} cu_entry_points_t;

/* cudaq_graph_io_t (unified_dispatch_device.cuh; graph.py's GraphIO): what a graph's
 * kernels find through their mailbox. The host path fills it exactly as the device path
 * does, in device memory, followed by the copy of the request. */
typedef struct {
  uint64_t request;       /* device address of the request copy (header + arguments) */
  uint64_t response;      /* device address of the response slot (the mapped ring) */
  uint64_t response_flag; /* device address the graph's publish stores to */
  uint32_t response_flag_value;
  uint32_t slot_size;
  uint32_t sequence;
  uint32_t released;
  uint64_t graph_exec;
  uint32_t launch_error;
  uint32_t launch_failures;
  uint64_t phase_record; /* the device path's measurement build only: 0 here */
} graph_io_t;
#define GRAPH_IO_SIZE 64u /* CUDAQ_GRAPH_IO_SIZE: the context's room before the request copy */
_Static_assert(sizeof(graph_io_t) == 64, "cudaq_graph_io_t is 64 bytes");
_Static_assert(sizeof(graph_io_t) <= GRAPH_IO_SIZE, "the request copy follows the context");
/* A busy worker's stream is asked at most this often whether it is done (cuStreamQuery):
 * before the answer, to catch a graph that failed or ended without publishing; after it, to
 * see the graph's tail end (and report an error there) and let the worker go idle. */
#define GRAPH_QUERY_NS 20000ull
#define MAX_WORKERS 64u /* one bit each in the idle mask */

/* ------------------------------------------------------------------------------------ */
/* Thread life cycle shared by Loop and Feeder                                            */
/* ------------------------------------------------------------------------------------ */
enum { STATE_IDLE, STATE_STARTING, STATE_RUNNING };

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state;      /* under mu */
  int stop;       /* atomic: asks the thread to stop */
  pthread_t thread;
  unsigned long generation; /* fork_generation when the mutex was made */
  PyObject *thread_ref;     /* the thread's reference to its object (a Loop's), or NULL */
} life_t;


/* ------------------------------------------------------------------------------------ */
/* The handler table (open addressing on the function id, an FNV-1a hash already)         */
/* ------------------------------------------------------------------------------------ */
typedef struct {
  uint32_t function_id;
  uint32_t used;
  cudaq_host_handler_t native; /* NULL: a Python handler, or a graph */
  PyObject *callable;          /* strong reference (Python handlers) */
  int32_t worker;              /* >= 0: a GRAPH_LAUNCH entry, served by that graph worker */
  char name[96];
} entry_t;

typedef struct table {
  struct table *retired; /* older tables (the thread may still read one): loop_free_retired */
  unsigned long long replaced_at; /* retired: the generation of the table that replaced it */
  uint32_t mask;
  uint32_t count;
  entry_t entries[];
} table_t;

static inline const entry_t *table_find(const table_t *t, uint32_t fid) {
  if (t == NULL)
    return NULL;
  for (uint32_t i = fid & t->mask;; i = (i + 1) & t->mask) {
    const entry_t *e = &t->entries[i];
    if (!e->used)
      return NULL;
    if (e->function_id == fid)
      return e;
  }
}

/* ------------------------------------------------------------------------------------ */
/* Loop: the consumer (HostDispatcher's serving loop)                                     */
/* ------------------------------------------------------------------------------------ */
/* Graph workers. One per GRAPH_LAUNCH entry (its graph exec and mailbox hold one I/O
 * context, so one request of an entry runs at a time, as on the device path): a stream of
 * its own, the entry's device record (I/O context + request copy, which its mailbox points
 * at), a pinned image of that record (the source of the copy) and a publish word in pinned
 * mapped memory. For a request, the loop fills the image, enqueues its copy into the
 * record and the graph on the worker's stream (cuMemcpyHtoDAsync, cuGraphLaunch), clears
 * the worker's bit in the idle mask and serves on. The graph's cudaq_graph_publish writes
 * the response into the ring's slot and stores the launch's number into the publish word;
 * the loop's sweep sees it there, counts the answer and publishes it in the ring (the
 * response flag: once, counted first, as every other answer). The worker is then free to
 * launch its next request at once (graph_free): the graph ran after its copy, so the image is
 * free, and stream order puts the next copy and graph behind the graph's tail. The worker's
 * bit in the idle mask is set again only once cuStreamQuery (asked at most every
 * GRAPH_QUERY_NS) says its stream is done; until then the worker is busy (its stream may hold
 * work), whether or not its request is answered. A request for a worker that is not free
 * waits in the worker's queue (the ring orders answers per slot, not across slots) and is
 * launched once it is. A launch the driver refuses, a stream that reports an error, and a
 * graph that ended without publishing are answered by the loop with a reserved status. */
typedef struct {
  uint32_t function_id;
  char name[96];
  void *exec;           /* CUgraphExec */
  void *stream;         /* CUstream (non-blocking, the worker's own) */
  uint64_t record;      /* device address of the entry's record */
  uint8_t *staging;     /* pinned image of the record (GRAPH_IO_SIZE + slot_size bytes) */
  uint32_t *flag;       /* host view of the publish word */
  uint64_t flag_device; /* its device address (the I/O context's response_flag) */
  uint32_t launches;    /* requests handed to the graph: the value its publish stores */
  int answered;         /* the last request launched has its answer published (1: none) */
  int image_held;       /* a refused launch's copy may still read the image: no launch
                           until the stream is done */
  int behind;           /* the last request was launched behind the tail of an answered
                           graph (the stream not yet seen done) */
  uint64_t k;           /* the last request launched */
  uint64_t next_query_ns; /* the stream is not asked before this (now_ns) */
  uint32_t head, tail, queued; /* requests waiting for this worker (slots, via pend_next) */
  uint32_t launch_failures, launch_error;
  /* launches, queued, launch_failures, launch_error: written by the serving thread only,
   * each with a relaxed atomic store, as graph_stats() reads them while it serves */
} worker_t;

typedef struct {
  PyObject_HEAD
  ring_t ring;
  PyObject *owner;    /* keeps the ring memory alive */
  table_t *table;     /* atomic pointer; older ones on its `retired` list */
  /* set_table()'s count (the current table's generation), stored after the table; and the
   * generation the serving thread last loaded at the top of its loop, holding no table
   * then: a table replaced at a generation <= table_seen is read by no thread any more
   * (loop_free_retired). Both atomic (release/acquire). */
  unsigned long long table_gen, table_seen;
  uint8_t *result_area; /* a native handler's result region (max_payload + RESULT_GUARD) */
  PyObject *exit_exc; /* a BaseException a Python handler raised, not yet taken (GIL) */
  life_t life;
  int life_ready;
  unsigned long long next; /* the consumer's next request number */
  /* counted by the serving thread (BUMP), read while it serves (loop_counter) */
  unsigned long long published, rejected, handler_errors;
  unsigned long long idle_sleep_ns; /* 0: spin while serving */
  int shared_ring;                  /* 1: a device dispatcher consumes the ring too */
  char last_error[ERROR_TEXT];
  /* graph handlers (set_graphs); num_workers == 0: none */
  worker_t *workers;
  uint32_t num_workers;
  unsigned long long all_idle;  /* the idle mask with every worker idle */
  /* written by the serving thread only (STORE_RLX), read while it serves (loop_counter) */
  unsigned long long idle_mask; /* bit w set: worker w's stream seen done, nothing in hand */
  unsigned long long graphs_outstanding; /* graph requests taken and not answered yet */
  uint32_t *pend_next;           /* per slot: the next slot in its worker's queue */
  uint64_t *pend_k;              /* per slot: the request number waiting there */
  uint8_t *taken;                /* per slot: a graph request in hand (not answered yet) */
  uint64_t ring_device;          /* the ring as the GPU sees it */
  void *context;                 /* CUcontext made current on the serving thread */
  int context_result;            /* what cuCtxSetCurrent returned there */
  cu_entry_points_t cu;
  PyObject *graph_owner;         /* keeps the workers' memory alive */
} LoopObject;

/* Received and answered in one batch by the UDP feeder at most (the module's BATCH). */
#define FEEDER_BATCH 64u

/* A native handler writes its result into the loop's result area, followed by RESULT_GUARD
 * bytes of GUARD_BYTE; the first RESULT_GUARD_CHECKED of them are checked after each call
 * (a write past max_result_len is answered STATUS_RESULT_TOO_LONG, naming the handler),
 * and the rest keeps a longer overrun off other memory. Only the result is copied into the
 * ring: a handler never writes into a slot that is not its own. */
#define RESULT_GUARD 4096u
#define RESULT_GUARD_CHECKED 64u
#define GUARD_BYTE 0xA5u
/* Whether the `n` bytes at p are all GUARD_BYTE. */
static inline int guard_intact(const uint8_t *p, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i)
    if (p[i] != GUARD_BYTE)
      return 0;
  return 1;
}

/* ------------------------------------------------------------------------------------ */
/* A transport's backlog (backlog.c)                                                      */
/* ------------------------------------------------------------------------------------ */
typedef struct {
  uint64_t key;        /* the source (backlog.c's source_key) */
  uint32_t len;        /* bytes of the datagram */
  uint32_t prev, next; /* its source's arrival order (UINT32_MAX: none); `next` also links
                          the free entries */
  struct sockaddr_storage addr;
  socklen_t addr_len;
} held_t;

typedef struct {
  uint64_t key;
  uint32_t count;      /* its datagrams in the backlog */
  uint32_t head, tail; /* the oldest and the newest of them */
} source_t;

typedef struct {
  uint32_t capacity, buffer_size;
  uint32_t count, num_sources;
  uint32_t turn;       /* the source whose oldest goes next (round robin) */
  uint32_t free_list;
  held_t *held;        /* capacity entries */
  source_t *sources;   /* the sources with datagrams held, num_sources of them */
  uint8_t *data;       /* capacity * buffer_size bytes: entry i's datagram at i * buffer_size */
} backlog_t;

/* ------------------------------------------------------------------------------------ */
/* Functions shared between the files (each documented where it is defined)              */
/* ------------------------------------------------------------------------------------ */
/* life.c */
extern unsigned long fork_generation;
void on_fork_child(void);
void sleep_ns(uint64_t ns);
void name_thread(const char *name);
void tight_timer_slack(void);
void life_init(life_t *l);
void life_lock(life_t *l);
void life_destroy(life_t *l);
void life_set(life_t *l, int state);
int life_state(life_t *l);
int life_wait(life_t *l, int while_state, double timeout);
int life_launch(life_t *l, void *(*fn)(void *), void *arg);
PyObject *life_stop(life_t *l, PyObject *arg);
void set_text(life_t *l, char *text, const char *fmt, ...);
PyObject *get_text(life_t *l, const char *text);
void record_error(LoopObject *self, const char *fmt, ...);
/* ring.c */
int ring_from(ring_t *r, unsigned long long address, unsigned int num_slots,
              unsigned int slot_size, const char *who);
/* handlers.c */
PyObject *native_host_export(PyObject *mod, PyObject *args);
PyObject *native_call_handler(PyObject *mod, PyObject *args);
int32_t call_python(LoopObject *self, const entry_t *e, const uint8_t *args, uint32_t arg_len,
                    uint8_t *out, uint32_t max, uint32_t *out_len);
/* table.c */
void table_free(table_t *t);
void loop_free_retired(LoopObject *self);
PyObject *loop_set_table(PyObject *self_obj, PyObject *items);
/* loop.c */
extern PyType_Spec loop_spec;
/* graphs.c */
void graph_take(LoopObject *self, uint32_t wi, uint64_t k);
int graph_sweep(LoopObject *self);
PyObject *loop_set_graphs(PyObject *self_obj, PyObject *args);
PyObject *loop_graph_stats(PyObject *self_obj, PyObject *unused);
/* udp_feeder.c */
extern PyType_Spec feeder_spec;
/* backlog.c: init (-1: out of memory; backlog_free frees what was made), admit a datagram
 * (returns how many were shed for it: 0, or 1 when the backlog was full), the one whose turn
 * it is (the oldest of the next source in turn; NULL: none) and its bytes, pop that one */
int backlog_init(backlog_t *b, uint32_t capacity, uint32_t buffer_size);
void backlog_free(backlog_t *b);
int backlog_admit(backlog_t *b, const uint8_t *data, uint32_t len,
                  const struct sockaddr_storage *addr, socklen_t addr_len);
const held_t *backlog_next(const backlog_t *b, const uint8_t **data);
void backlog_pop(backlog_t *b);
/* segment.c */
PyObject *native_watch_segment(PyObject *mod, PyObject *args);
PyObject *native_unwatch_segment(PyObject *mod, PyObject *arg);

#endif /* SKBUILD_CUDAQ_NATIVE_INTERNAL_H */
