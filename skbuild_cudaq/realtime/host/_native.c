/* The host path's native core (skbuild_cudaq.realtime.host._native): the serving loop of
 * HostDispatcher, the UDP feeder of UdpFeeder, and the lookup and direct call of native
 * host handlers (cudaq/realtime/host_handler.h). Python's limited API (3.10): one abi3
 * module for every CPython from 3.10. Built by cmake/NativeCore.cmake; required (the host
 * path and the UDP feeder have no second implementation in Python).
 *
 * (Over 1,000 lines: the loop and the feeder share the ring view, the thread life cycle
 * and the wire format, and are tested through host_path.py and udp.py.)
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

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

static void name_thread(const char *name) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

/* A thread that may sleep wakes on time: the default timer slack adds ~50 us a sleep. */
static void tight_timer_slack(void) {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
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

static int ring_from(ring_t *r, unsigned long long address, unsigned int num_slots,
                     unsigned int slot_size, const char *who) {
  if (address == 0 || address % 8 != 0) {
    PyErr_Format(PyExc_ValueError, "%s: address must be a non-null, 8-aligned address", who);
    return -1;
  }
  if (num_slots == 0 || slot_size <= HEADER_SIZE || slot_size % 8 != 0) {
    PyErr_Format(PyExc_ValueError, "%s: not a ring layout (num_slots=%u, slot_size=%u)", who,
                 num_slots, slot_size);
    return -1;
  }
  const size_t slots = (size_t)num_slots * slot_size;
  r->base = (uint8_t *)(uintptr_t)address;
  r->num_slots = num_slots;
  r->slot_size = slot_size;
  r->max_payload = slot_size - HEADER_SIZE;
  r->rx = r->base;
  r->tx = r->base + slots;
  r->rx_flags = (uint32_t *)(r->base + 2 * slots);
  r->tx_flags = (uint32_t *)(r->base + 2 * slots + 4u * (size_t)num_slots);
  r->ids = (uint64_t *)(r->base + 2 * slots + 8u * (size_t)num_slots);
  return 0;
}

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
} graph_io_t;
#define GRAPH_IO_SIZE 64u /* CUDAQ_GRAPH_IO_SIZE: the context's room before the request copy */
_Static_assert(sizeof(graph_io_t) == 56, "cudaq_graph_io_t is 56 bytes");
_Static_assert(sizeof(graph_io_t) <= GRAPH_IO_SIZE, "the request copy follows the context");
/* A graph whose answer has not been seen yet: its stream is asked at most this often
 * whether it ended (failed, or without publishing); a published one, at every sweep. */
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

/* fork() copies a life, not its thread. Bumped in the child of every fork() (pthread_atfork,
 * registered once by the module): a life made in an earlier generation belongs to threads of
 * the parent (see life_forked). */
static unsigned long fork_generation;
static void on_fork_child(void) { ++fork_generation; }

static void life_sync_init(life_t *l) {
  pthread_mutex_init(&l->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cv, &attr);
  pthread_condattr_destroy(&attr);
  l->generation = fork_generation;
}

static void life_init(life_t *l) {
  life_sync_init(l);
  l->state = STATE_IDLE;
  l->stop = 0;
  l->thread_ref = NULL;
}

/* In the child of a fork(), a life of the parent's: its thread does not exist here, so the
 * life is idle again (else stop() would wait for it in vain and a Feeder's dealloc for ever),
 * its mutex and condition variable made anew (a thread of the parent may have held them at
 * the fork), and the thread's reference to its object dropped (only calls from Python, with
 * the GIL, find a life of an earlier generation: the parent's threads are not here). The
 * exception: the fork was made by the life's own thread (from a handler), which goes on. */
static void life_forked(life_t *l) {
  if (l->generation == fork_generation)
    return;
  life_sync_init(l);
  if (l->state == STATE_IDLE || pthread_equal(pthread_self(), l->thread))
    return;
  PyObject *ref = l->thread_ref;
  l->state = STATE_IDLE;
  l->stop = 0;
  l->thread_ref = NULL;
  Py_XDECREF(ref);
}

static void life_lock(life_t *l) {
  life_forked(l);
  pthread_mutex_lock(&l->mu);
}

static void life_destroy(life_t *l) {
  life_forked(l);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
}

static void life_set(life_t *l, int state) {
  life_lock(l);
  l->state = state;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

static int life_state(life_t *l) {
  life_lock(l);
  const int s = l->state;
  pthread_mutex_unlock(&l->mu);
  return s;
}

/* Waits (without the GIL: call it between Py_BEGIN/END_ALLOW_THREADS) until the state is
 * not `while_state`, at most `timeout` seconds (< 0: no limit); returns the state. */
static int life_wait(life_t *l, int while_state, double timeout) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  if (!(timeout < 1e9)) /* infinite, NaN or decades: no limit (and no overflow below) */
    timeout = -1.0;
  if (timeout >= 0) {
    const double whole = (double)(long long)timeout;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((timeout - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
  }
  life_lock(l);
  while (l->state == while_state) {
    if (timeout < 0) {
      pthread_cond_wait(&l->cv, &l->mu);
    } else if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT) {
      break;
    }
  }
  const int s = l->state;
  pthread_mutex_unlock(&l->mu);
  return s;
}

/* Start fn(arg) on a detached thread of `l` and wait, without the GIL, until it has left
 * STATE_STARTING. -1 with OSError set (the state back to STATE_IDLE) if it cannot start. */
static int life_launch(life_t *l, void *(*fn)(void *), void *arg) {
  STORE_RLX(&l->stop, 0);
  life_set(l, STATE_STARTING);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int rc = pthread_create(&l->thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    life_set(l, STATE_IDLE);
    errno = rc;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  Py_BEGIN_ALLOW_THREADS
  life_wait(l, STATE_STARTING, -1.0);
  Py_END_ALLOW_THREADS
  return 0;
}

/* An error text shared by a thread and its owner (under the life's mutex). */
static void set_text(life_t *l, char *text, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  life_lock(l);
  memcpy(text, buf, sizeof buf);
  pthread_mutex_unlock(&l->mu);
}

static PyObject *get_text(life_t *l, const char *text) {
  char buf[ERROR_TEXT];
  life_lock(l);
  memcpy(buf, text, sizeof buf);
  pthread_mutex_unlock(&l->mu);
  buf[ERROR_TEXT - 1] = '\0';
  if (buf[0] == '\0')
    Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

/* ------------------------------------------------------------------------------------ */
/* Native host handlers: lookup and direct call                                            */
/* ------------------------------------------------------------------------------------ */
static PyObject *native_host_export(PyObject *mod, PyObject *args) {
  (void)mod;
  const char *path, *symbol;
  int load;
  if (!PyArg_ParseTuple(args, "ssp", &path, &symbol, &load))
    return NULL;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | (load ? 0 : RTLD_NOLOAD));
  if (handle == NULL) {
    const char *why = dlerror();
    PyErr_Format(PyExc_OSError, "%s", why ? why : (load ? "cannot load it" : "not loaded"));
    return NULL;
  }
  /* The handle stays open: the handler must outlive every table that holds it. */
  dlerror();
  const cudaq_host_export_t *rec = (const cudaq_host_export_t *)dlsym(handle, symbol);
  if (rec == NULL)
    Py_RETURN_NONE;
  if (rec->magic != CUDAQ_HOST_EXPORT_MAGIC) {
    PyErr_Format(PyExc_ValueError,
                 "%s is not a record of CUDAQ_REALTIME_EXPORT_HOST_FUNCTION (magic 0x%08x)",
                 symbol, (unsigned)rec->magic);
    return NULL;
  }
  if (rec->version != CUDAQ_HOST_EXPORT_VERSION) {
    PyErr_Format(PyExc_ValueError,
                 "%s was exported by a host_handler.h of record version %u; this skbuild-cudaq "
                 "reads version %u (rebuild the module against this skbuild-cudaq)",
                 symbol, (unsigned)rec->version, (unsigned)CUDAQ_HOST_EXPORT_VERSION);
    return NULL;
  }
  if (rec->handler == NULL) {
    PyErr_Format(PyExc_ValueError, "%s holds a null handler", symbol);
    return NULL;
  }
  const char *name = rec->name ? rec->name : "";
  return Py_BuildValue("(Ksk)", (unsigned long long)(uintptr_t)rec->handler, name,
                       (unsigned long)rec->version);
}

static PyObject *native_call_handler(PyObject *mod, PyObject *args) {
  (void)mod;
  unsigned long long address;
  const char *data;
  Py_ssize_t size;
  unsigned int max_len;
  if (!PyArg_ParseTuple(args, "Ky#I", &address, &data, &size, &max_len))
    return NULL;
  if (address == 0) {
    PyErr_SetString(PyExc_ValueError, "call_handler: null handler");
    return NULL;
  }
  if ((unsigned long long)size > 0xFFFFFFFFull) {
    PyErr_SetString(PyExc_ValueError, "call_handler: arguments longer than 2**32 - 1 bytes");
    return NULL;
  }
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)max_len);
  if (out == NULL)
    return NULL;
  cudaq_host_handler_t fn = (cudaq_host_handler_t)(uintptr_t)address;
  char *result = PyBytes_AsString(out);
  uint32_t result_len = 0;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = fn(data, (uint32_t)size, result, max_len, &result_len);
  Py_END_ALLOW_THREADS
  if (result_len > max_len) {
    Py_DECREF(out);
    return Py_BuildValue("(iy#)", (int)STATUS_RESULT_TOO_LONG, "", (Py_ssize_t)0);
  }
  PyObject *value = Py_BuildValue("(iy#)", status, result, (Py_ssize_t)result_len);
  Py_DECREF(out);
  return value;
}

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
  uint32_t mask;
  uint32_t count;
  entry_t entries[];
} table_t;

static const entry_t *table_find(const table_t *t, uint32_t fid) {
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

static void table_free(table_t *t) {
  while (t != NULL) {
    table_t *older = t->retired;
    for (uint32_t i = 0; i <= t->mask; ++i)
      Py_CLEAR(t->entries[i].callable);
    PyMem_Free(t);
    t = older;
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
 * response flag: once, counted first, as every other answer). The sweep recycles a worker
 * once cuStreamQuery says its stream is done; a request for a busy worker waits in the
 * worker's queue (the ring orders answers per slot, not across slots) and is launched when
 * the worker is recycled. A launch the driver refuses, a stream that reports an error, and
 * a graph that ended without publishing are answered by the loop with a reserved status. */
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
  int answered;         /* the request on the stream has its answer published */
  uint64_t k;           /* the request on the stream */
  uint64_t next_query_ns;
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
  unsigned long long idle_mask; /* bit w set: worker w has nothing on its stream */
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

static int loop_init(PyObject *self_obj, PyObject *args, PyObject *kwds) {
  LoopObject *self = (LoopObject *)self_obj;
  unsigned long long address = 0;
  unsigned int num_slots = 0, slot_size = 0;
  PyObject *owner = NULL;
  static char *kwlist[] = {"address", "num_slots", "slot_size", "owner", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "KIIO", kwlist, &address, &num_slots,
                                   &slot_size, &owner))
    return -1;
  if (self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Loop: already initialised");
    return -1;
  }
  if (ring_from(&self->ring, address, num_slots, slot_size, "Loop") < 0)
    return -1;
  Py_INCREF(owner);
  self->owner = owner;
  life_init(&self->life);
  self->life_ready = 1;
  return 0;
}

static void record_error(LoopObject *self, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_text(&self->life, self->last_error, "%s", buf);
}

/* "TypeName: str(exc)" of an exception instance (never fails: an unprintable one is
 * named as such). A new reference to bytes (UTF-8, errors replaced), or NULL. */
static PyObject *exception_text(PyObject *exc) {
  PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(exc), "__name__");
  if (name == NULL || !PyUnicode_Check(name)) {
    PyErr_Clear();
    Py_XDECREF(name);
    name = PyUnicode_FromString("?");
    if (name == NULL) {
      PyErr_Clear();
      return NULL;
    }
  }
  PyObject *message = PyObject_Str(exc);
  PyObject *text;
  if (message == NULL) {
    PyErr_Clear();
    text = PyUnicode_FromFormat("%U: <exception str() failed>", name);
  } else {
    text = PyUnicode_FromFormat("%U: %U", name, message);
    Py_DECREF(message);
  }
  Py_DECREF(name);
  if (text == NULL) {
    PyErr_Clear();
    return NULL;
  }
  PyObject *utf8 = PyUnicode_AsEncodedString(text, "utf-8", "replace");
  Py_DECREF(text);
  if (utf8 == NULL)
    PyErr_Clear();
  return utf8;
}

/* The handler raised (an exception is set): answer its text, count it, keep a
 * BaseException that is not an Exception for the owner to raise. */
static int32_t handler_raised(LoopObject *self, const entry_t *e, uint8_t *out, uint32_t max,
                              uint32_t *out_len) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  BUMP(&self->handler_errors);
  *out_len = 0;
  PyObject *text = value ? exception_text(value) : NULL;
  if (text != NULL) {
    char *bytes;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(text, &bytes, &n) == 0) {
      const uint32_t len = (size_t)n > max ? max : (uint32_t)n;
      memcpy(out, bytes, len);
      *out_len = len;
      record_error(self, "%s: %s", e->name, bytes);
    } else {
      PyErr_Clear();
    }
    Py_DECREF(text);
  } else {
    record_error(self, "%s: raised an exception that cannot be shown", e->name);
  }
  if (value != NULL && type != NULL && !PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
    if (tb != NULL)
      PyException_SetTraceback(value, tb);
    PyObject *old = self->exit_exc;
    Py_INCREF(value);
    self->exit_exc = value;
    Py_XDECREF(old);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return STATUS_HANDLER_EXCEPTION;
}

/* repr(obj) shortened to 80 characters, for an error message (never fails). */
static void short_repr(PyObject *obj, char *buf, size_t size) {
  PyObject *r = PyObject_Repr(obj);
  const char *s = NULL;
  Py_ssize_t n = 0;
  if (r != NULL) {
    s = PyUnicode_AsUTF8AndSize(r, &n);
  }
  if (s == NULL) {
    PyErr_Clear();
    snprintf(buf, size, "<repr() failed>");
  } else {
    snprintf(buf, size, "%.80s", s);
  }
  Py_XDECREF(r);
}

/* "type repr" of a handler's result for an error message (never fails). */
static void shown(PyObject *obj, char *buf, size_t size) {
  PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__name__");
  const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
  if (n == NULL)
    PyErr_Clear();
  char rep[96];
  short_repr(obj, rep, sizeof rep);
  snprintf(buf, size, "%s %s", n ? n : "object", rep);
  Py_XDECREF(name);
}

/* A result that is no answer: counted, its reason recorded (`why` may use one %s: the
 * result shown as "type repr"). */
static int32_t bad_result(LoopObject *self, const entry_t *e, PyObject *shown_obj,
                          const char *why) {
  char what[160], text[ERROR_TEXT];
  PyErr_Clear();
  BUMP(&self->handler_errors);
  if (shown_obj != NULL) {
    shown(shown_obj, what, sizeof what);
    snprintf(text, sizeof text, why, what);
  } else {
    snprintf(text, sizeof text, "%s", why);
  }
  record_error(self, "%s: %s", e->name, text);
  return STATUS_BAD_HANDLER_RESULT;
}

/* A result that cannot be read (an exception is set): counted, with the exception's text. */
static int32_t unreadable_result(LoopObject *self, const entry_t *e) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject *text = value ? exception_text(value) : NULL;
  BUMP(&self->handler_errors);
  record_error(self, "%s: its result cannot be read (%s)", e->name,
               text ? PyBytes_AsString(text) : "?");
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();
  return STATUS_BAD_HANDLER_RESULT;
}

/* The handler's return value -> status and result bytes in `out` (GIL held): bytes-like,
 * or (status, bytes-like) with any integer status but a bool, within int32. The size is
 * checked before anything is copied. The messages are host_path.py's. */
static int32_t convert_result(LoopObject *self, const entry_t *e, PyObject *res, uint8_t *out,
                              uint32_t max, uint32_t *out_len) {
  PyObject *data = res;
  long long status = 0;
  *out_len = 0;
  if (PyTuple_Check(res)) {
    if (PyTuple_Size(res) != 2)
      return bad_result(self, e, res, "returned %s, expected bytes or (status, bytes)");
    PyObject *st = PyTuple_GetItem(res, 0);
    data = PyTuple_GetItem(res, 1);
    if (st == NULL || data == NULL)
      return bad_result(self, e, res, "returned %s, expected bytes or (status, bytes)");
    if (PyBool_Check(st)) {
      char text[96];
      snprintf(text, sizeof text, "returned the status %s, a bool: return an integer status",
               st == Py_True ? "True" : "False");
      return bad_result(self, e, NULL, text);
    }
    PyObject *index = PyNumber_Index(st);
    if (index == NULL)
      return bad_result(self, e, st, "returned the status %s, expected an integer");
    int overflow = 0;
    status = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (overflow || (status == -1 && PyErr_Occurred()) || status < INT32_MIN ||
        status > INT32_MAX) {
      PyObject *digits = PyObject_Str(index);
      const char *d = digits ? PyUnicode_AsUTF8AndSize(digits, NULL) : NULL;
      char text[160];
      snprintf(text, sizeof text, "returned the status %.60s, which does not fit an int32",
               d ? d : "?");
      Py_XDECREF(digits);
      Py_DECREF(index);
      return bad_result(self, e, NULL, text);
    }
    Py_DECREF(index);
  }
  PyObject *copy = NULL;
  const char *bytes = NULL;
  Py_ssize_t size;
  if (PyObject_TypeCheck(data, &PyMemoryView_Type)) {
    PyObject *nbytes = PyObject_GetAttrString(data, "nbytes"); /* a released view raises */
    if (nbytes == NULL)
      return unreadable_result(self, e);
    size = PyLong_AsSsize_t(nbytes);
    Py_DECREF(nbytes);
    if (size < 0)
      return unreadable_result(self, e);
  } else if (PyBytes_Check(data)) {
    size = PyBytes_Size(data);
  } else if (PyByteArray_Check(data)) {
    size = PyByteArray_Size(data);
  } else {
    return bad_result(self, e, data, "returned %s, expected bytes");
  }
  if ((size_t)size > max) {
    BUMP(&self->handler_errors);
    record_error(self, "%s: result of %lld bytes exceeds the max payload %u", e->name,
                 (long long)size, max);
    return STATUS_RESULT_TOO_LONG;
  }
  Py_ssize_t got;
  if (PyBytes_Check(data)) {
    bytes = PyBytes_AsString(data);
    got = PyBytes_Size(data);
  } else if (PyByteArray_Check(data)) {
    bytes = PyByteArray_AsString(data);
    got = PyByteArray_Size(data);
  } else {
    copy = PyObject_CallMethod(data, "tobytes", NULL);
    if (copy == NULL)
      return unreadable_result(self, e);
    bytes = PyBytes_Check(copy) ? PyBytes_AsString(copy) : NULL;
    got = PyBytes_Check(copy) ? PyBytes_Size(copy) : -1;
  }
  if (got != size || (size > 0 && bytes == NULL)) { /* a view that changed while read */
    char text[160], tn[64];
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(data), "__name__");
    const char *n = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8AndSize(name, NULL) : NULL;
    snprintf(tn, sizeof tn, "%s", n ? n : "object");
    Py_XDECREF(name);
    PyErr_Clear();
    snprintf(text, sizeof text, "returned %s of %lld bytes that read as %lld", tn,
             (long long)size, (long long)got);
    Py_XDECREF(copy);
    return bad_result(self, e, NULL, text);
  }
  if (size > 0)
    memcpy(out, bytes, (size_t)size);
  *out_len = (uint32_t)size;
  Py_XDECREF(copy);
  return (int32_t)status;
}

/* One call of a Python handler (GIL held): every outcome is a status and a result. */
static int32_t call_python(LoopObject *self, const entry_t *e, const uint8_t *args,
                           uint32_t arg_len, uint8_t *out, uint32_t max, uint32_t *out_len) {
  PyObject *a = PyBytes_FromStringAndSize((const char *)args, (Py_ssize_t)arg_len);
  PyObject *res = NULL;
  if (a != NULL) {
    PyObject *call_args = PyTuple_Pack(1, a);
    Py_DECREF(a);
    if (call_args != NULL) {
      res = PyObject_Call(e->callable, call_args, NULL);
      Py_DECREF(call_args);
    }
  }
  if (res == NULL)
    return handler_raised(self, e, out, max, out_len);
  const int32_t status = convert_result(self, e, res, out, max, out_len);
  Py_DECREF(res); /* a __del__ may run here: its errors are not the handler's answer */
  if (PyErr_Occurred())
    PyErr_Clear();
  return status;
}

/* ------------------------------------------------------------------------------------ */
/* Graph workers (see worker_t): launch, sweep, answer                                     */
/* ------------------------------------------------------------------------------------ */
static const char *cu_error_name(const LoopObject *self, int code) {
  const char *name = NULL;
  if (self->cu.get_error_name == NULL || self->cu.get_error_name(code, &name) != CU_SUCCESS ||
      name == NULL)
    return "CUresult";
  return name;
}

/* Request k's answer is in its response slot: count it, publish it (once), free the slot. */
static void graph_publish(LoopObject *self, uint64_t k) {
  ring_t *r = &self->ring;
  const uint32_t slot = slot_of(r, k);
  self->taken[slot] = 0;
  STORE_RLX(&self->graphs_outstanding, self->graphs_outstanding - 1);
  BUMP(&self->published); /* counted first: never behind a response a reader can see */
  STORE_REL(&r->tx_flags[slot], seq_of(r, k));
}

/* Answers request k of worker w itself, the graph having not: `status`, the reason as the
 * result (and in last_handler_error); counted as a handler error. Nothing of the graph
 * writes to the slot any more (it was not launched, or its stream is done). */
static void graph_answer(LoopObject *self, const worker_t *w, uint64_t k, int32_t status,
                         const char *fmt, ...) {
  ring_t *r = &self->ring;
  const uint32_t slot = slot_of(r, k);
  char text[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  header_t h;
  read_header(r->rx + (size_t)slot * r->slot_size, &h);
  uint8_t *resp = r->tx + (size_t)slot * r->slot_size;
  size_t len = strlen(text);
  if (len > r->max_payload)
    len = r->max_payload;
  memcpy(resp + HEADER_SIZE, text, len);
  write_header(resp, RESPONSE_MAGIC, status, (uint32_t)len, h.request_id, h.timestamp);
  BUMP(&self->handler_errors);
  record_error(self, "%s: %s", w->name, text);
  graph_publish(self, k);
}

/* Hands request k to worker wi, which is idle: the image of its record filled (the I/O
 * context as the device path fills it, the request copied after it), the copy into the
 * record and the graph enqueued on its stream; the worker is busy until its stream is done.
 * A call the driver refuses is answered at once (STATUS_GRAPH_LAUNCH_FAILED). */
static void graph_launch(LoopObject *self, uint32_t wi, uint64_t k) {
  ring_t *r = &self->ring;
  worker_t *w = &self->workers[wi];
  const uint32_t slot = slot_of(r, k);
  const uint8_t *req = r->rx + (size_t)slot * r->slot_size;
  header_t h;
  read_header(req, &h);
  if (h.arg_len > r->max_payload) /* validated when taken; a producer may have changed it */
    h.arg_len = r->max_payload;
  const uint32_t sequence = w->launches + 1;
  STORE_RLX(&w->launches, sequence); /* graph_stats() reads the worker's counts meanwhile */
  graph_io_t io;
  memset(&io, 0, sizeof io);
  io.request = w->record + GRAPH_IO_SIZE;
  io.response = self->ring_device + (uint64_t)(r->tx - r->base) + (uint64_t)slot * r->slot_size;
  io.response_flag = w->flag_device;
  io.response_flag_value = sequence;
  io.slot_size = r->slot_size;
  io.sequence = sequence;
  io.released = sequence - 1;
  io.graph_exec = (uint64_t)(uintptr_t)w->exec;
  io.launch_error = w->launch_error;
  io.launch_failures = w->launch_failures;
  memset(w->staging, 0, GRAPH_IO_SIZE);
  memcpy(w->staging, &io, sizeof io);
  /* header + arguments, whole words: at most the slot (slot_size is a multiple of 8) */
  const size_t request_bytes = ((size_t)HEADER_SIZE + h.arg_len + 7u) & ~(size_t)7u;
  memcpy(w->staging + GRAPH_IO_SIZE, req, request_bytes);
  w->k = k;
  w->answered = 0;
  w->next_query_ns = now_ns() + GRAPH_QUERY_NS;
  const char *call = "cuCtxSetCurrent";
  int rc = self->context_result, enqueued = 0;
  if (rc == CU_SUCCESS) {
    call = "cuMemcpyHtoDAsync";
    rc = self->cu.memcpy_htod_async(w->record, w->staging, GRAPH_IO_SIZE + request_bytes,
                                    w->stream);
    enqueued = rc == CU_SUCCESS;
  }
  if (rc == CU_SUCCESS) {
    call = "cuGraphLaunch";
    rc = self->cu.graph_launch(w->exec, w->stream);
  }
  if (rc != CU_SUCCESS) {
    BUMP(&w->launch_failures);
    STORE_RLX(&w->launch_error, (uint32_t)rc);
    w->answered = 1;
    graph_answer(self, w, k, STATUS_GRAPH_LAUNCH_FAILED, "%s failed: %s (%d)", call,
                 cu_error_name(self, rc), rc);
    if (!enqueued)
      return; /* nothing on its stream: the worker stays idle */
  }
  STORE_RLX(&self->idle_mask, self->idle_mask & ~(1ull << wi));
}

/* Launches what waits for worker wi while it is idle (a launch refused at once leaves it so). */
static void graph_run_queue(LoopObject *self, uint32_t wi) {
  worker_t *w = &self->workers[wi];
  while (w->queued != 0 && ((self->idle_mask >> wi) & 1ull)) {
    const uint32_t slot = w->head;
    w->head = self->pend_next[slot];
    STORE_RLX(&w->queued, w->queued - 1);
    graph_launch(self, wi, self->pend_k[slot]);
  }
}

/* Request k (valid, its flag seen) is for worker wi's graph: launched now if the worker is
 * idle, else queued behind what waits for it. Answered once the graph has answered. */
static void graph_take(LoopObject *self, uint32_t wi, uint64_t k) {
  ring_t *r = &self->ring;
  worker_t *w = &self->workers[wi];
  const uint32_t slot = slot_of(r, k);
  self->taken[slot] = 1;
  STORE_RLX(&self->graphs_outstanding, self->graphs_outstanding + 1);
  self->pend_k[slot] = k;
  self->pend_next[slot] = UINT32_MAX;
  if (w->queued != 0)
    self->pend_next[w->tail] = slot;
  else
    w->head = slot;
  w->tail = slot;
  BUMP(&w->queued);
  graph_run_queue(self, wi);
}

/* The sweep over busy workers: publishes what their graphs answered, asks their streams
 * whether they are done (cuStreamQuery), recycles those that are (their bit set again in
 * the idle mask) and launches what waits for them. Returns whether anything happened. */
static int graph_sweep(LoopObject *self) {
  unsigned long long busy = self->all_idle & ~self->idle_mask;
  int progressed = 0;
  uint64_t now = 0;
  while (busy != 0) {
    const uint32_t wi = (uint32_t)__builtin_ctzll(busy);
    busy &= busy - 1;
    worker_t *w = &self->workers[wi];
    if (!w->answered && LOAD_ACQ(w->flag) == w->launches) {
      w->answered = 1; /* the graph published: its answer is in the slot */
      graph_publish(self, w->k);
      progressed = 1;
    }
    if (!w->answered) { /* not answered yet: its stream is asked now and then */
      if (now == 0)
        now = now_ns();
      if (now < w->next_query_ns)
        continue;
      w->next_query_ns = now + GRAPH_QUERY_NS;
    }
    const int q = self->cu.stream_query(w->stream);
    if (q == CU_ERROR_NOT_READY)
      continue;
    if (!w->answered) {
      w->answered = 1;
      if (LOAD_ACQ(w->flag) == w->launches) {
        graph_publish(self, w->k); /* it published as it ended */
      } else if (q == CU_SUCCESS) {
        graph_answer(self, w, w->k, STATUS_GRAPH_NOT_PUBLISHED,
                     "the graph ended without publishing its response (cudaq_graph_publish)");
      } else {
        BUMP(&w->launch_failures);
        STORE_RLX(&w->launch_error, (uint32_t)q);
        graph_answer(self, w, w->k, STATUS_GRAPH_LAUNCH_FAILED, "the graph failed: %s (%d)",
                     cu_error_name(self, q), q);
      }
    } else if (q != CU_SUCCESS) { /* after its answer: recorded; the answer stands */
      STORE_RLX(&w->launch_error, (uint32_t)q);
      record_error(self, "%s: its stream reported %s (%d) after the graph answered", w->name,
                   cu_error_name(self, q), q);
    }
    STORE_RLX(&self->idle_mask, self->idle_mask | (1ull << wi));
    progressed = 1;
    graph_run_queue(self, wi);
  }
  return progressed;
}

/* Serves request k in its slot (its flag already seen). `ts`: the serving thread's state,
 * to take the GIL with for a Python handler; NULL: the caller holds the GIL. */
static void serve_request(LoopObject *self, uint64_t k, PyThreadState **ts) {
  ring_t *r = &self->ring;
  const uint32_t slot = slot_of(r, k);
  const uint8_t *req = r->rx + (size_t)slot * r->slot_size;
  uint8_t *resp = r->tx + (size_t)slot * r->slot_size;
  header_t h;
  read_header(req, &h);
  int32_t status;
  uint32_t result_len = 0;
  const entry_t *e = NULL;
  if (h.magic != REQUEST_MAGIC) {
    status = STATUS_BAD_MAGIC;
  } else if (h.arg_len > r->max_payload) {
    status = STATUS_ARGS_TOO_LONG;
  } else if ((e = table_find(__atomic_load_n(&self->table, __ATOMIC_ACQUIRE), h.function_id)) ==
             NULL) {
    status = STATUS_UNKNOWN_FUNCTION;
  } else if (e->worker >= 0) {
    graph_take(self, (uint32_t)e->worker, k);
    return; /* answered once its graph has (graph_sweep) */
  } else if (e->native != NULL) {
    status = e->native(req + HEADER_SIZE, h.arg_len, resp + HEADER_SIZE, r->max_payload,
                       &result_len);
    if (result_len > r->max_payload) {
      BUMP(&self->handler_errors);
      record_error(self, "%s: result_len %u exceeds the max payload %u", e->name, result_len,
                   r->max_payload);
      status = STATUS_RESULT_TOO_LONG;
      result_len = 0;
    }
  } else {
    if (ts != NULL)
      PyEval_RestoreThread(*ts);
    status = call_python(self, e, req + HEADER_SIZE, h.arg_len, resp + HEADER_SIZE,
                         r->max_payload, &result_len);
    if (ts != NULL)
      *ts = PyEval_SaveThread();
  }
  if (status < 0 && e == NULL)
    BUMP(&self->rejected);
  write_header(resp, RESPONSE_MAGIC, status, result_len, h.request_id, h.timestamp);
  BUMP(&self->published); /* counted first: never behind a response a reader can see */
  STORE_REL(&r->tx_flags[slot], seq_of(r, k));
}

/* Whether this loop answers a request on a shared ring: a well-formed one for one of its
 * handlers (host_path.owns_on_shared_ring; the device kernel's cudaq_is_peer_request after
 * cudaq_validate_request makes the same test with the same table). */
static int owns(LoopObject *self, const header_t *h) {
  return h->magic == REQUEST_MAGIC && h->arg_len <= self->ring.max_payload &&
         table_find(__atomic_load_n(&self->table, __ATOMIC_ACQUIRE), h->function_id) != NULL;
}

/* The next request this loop answers, from request number *k on: 1 with *k its number, or 0
 * with *k where to look again. On a ring of its own that is request *k once its flag is set.
 * On a shared ring (host_path's docstring), requests the device answers are passed over: a
 * slot whose request flag is ahead of the sequence expected (serial-number arithmetic) held
 * one the device answered and the producer reused; a request whose response flag is set
 * after its header was read was answered by the device meanwhile; a request that is not
 * this loop's (owns()) is left to the device, neither answered nor counted. */
static int next_request(LoopObject *self, uint64_t *k) {
  ring_t *r = &self->ring;
  const uint64_t first = *k;
  for (uint64_t n = first;; ++n) {
    if (n - first >= SKIP_STEP) { /* slots to skip without end (flags set far ahead): */
      *k = n;                     /* the caller checks for a stop, then comes back */
      return 0;
    }
    const uint32_t slot = slot_of(r, n), seq = seq_of(r, n);
    if (self->taken != NULL && self->taken[slot]) { /* its graph request is still in hand */
      *k = n;
      return 0;
    }
    const uint32_t seen = LOAD_ACQ(&r->rx_flags[slot]);
    if (seen != seq) {
      if (self->shared_ring && (uint32_t)(seen - seq) - 1u < 0x7FFFFFFFu)
        continue; /* 0 < seen - seq < 2^31: answered by the device, slot reused */
      *k = n;
      return 0;
    }
    if (!self->shared_ring) {
      *k = n;
      return 1;
    }
    header_t h;
    read_header(r->rx + (size_t)slot * r->slot_size, &h);
    if (LOAD_ACQ(&r->tx_flags[slot]) == seq) /* after the header: answered while read */
      continue;
    if (!owns(self, &h))
      continue; /* the device's to answer */
    *k = n;
    return 1;
  }
}

static void *loop_thread(void *arg) {
  LoopObject *self = (LoopObject *)arg;
  /* One thread state for the thread's life (PyGILState_Ensure/Release around each call
   * would create and destroy one every time: ~15 us). */
  PyGILState_STATE gil = PyGILState_Ensure();
  PyThreadState *ts = PyEval_SaveThread();
  name_thread("cudaq-host-loop");
  const uint64_t idle_sleep = self->idle_sleep_ns;
  if (idle_sleep)
    tight_timer_slack();
  if (self->num_workers != 0) /* graph launches need the GPU's context on this thread */
    self->context_result = self->cu.ctx_set_current(self->context);
  life_set(&self->life, STATE_RUNNING);
  uint64_t k = self->next, idle_start = 0, nap = 1000;
  uint32_t spins = 0;
serve:
  while (!LOAD_RLX(&self->life.stop)) {
    const int graphs = self->idle_mask != self->all_idle; /* a graph on a worker's stream */
    if (graphs && graph_sweep(self)) {
      idle_start = 0;
      nap = 1000;
    }
    if (!next_request(self, &k)) {
      self->next = k;
      if (idle_sleep && !graphs && (++spins & 1023u) == 0) {
        const uint64_t t = now_ns();
        if (idle_start == 0) {
          idle_start = t;
        } else if (t - idle_start >= IDLE_SPIN_NS) {
          sleep_ns(nap < idle_sleep ? nap : idle_sleep);
          nap = nap < idle_sleep ? nap * 2 : idle_sleep;
        }
      }
      continue;
    }
    idle_start = 0;
    nap = 1000;
    serve_request(self, k, &ts);
    self->next = ++k;
    if (self->exit_exc != NULL) /* set by this thread, with the GIL */
      break;
  }
  /* Graph requests in hand are answered before the thread stops: their memory (the ring,
   * the workers' records) is freed only once it has. */
  while (self->idle_mask != self->all_idle) {
    if (!LOAD_RLX(&self->life.stop) && self->exit_exc == NULL)
      goto serve; /* a start() cleared the stop meanwhile */
    if (!graph_sweep(self) && idle_sleep)
      sleep_ns(1000);
  }
  /* Stop, unless a start() cleared the stop meanwhile (after a stop() that timed out).
   * The GIL is taken first and held until the thread state is gone: whoever waits for
   * STATE_IDLE (stop(), the atexit hook) gets the GIL back only after this thread is done
   * with Python, so it never waits for the GIL while the interpreter finalizes (where
   * Python ends such a thread with pthread_exit, or leaves it hanging since 3.14). */
  PyEval_RestoreThread(ts);
  life_lock(&self->life);
  if (!LOAD_RLX(&self->life.stop) && self->exit_exc == NULL) {
    pthread_mutex_unlock(&self->life.mu);
    ts = PyEval_SaveThread();
    goto serve;
  }
  self->life.state = STATE_IDLE; /* nothing touches the ring after this */
  pthread_cond_broadcast(&self->life.cv);
  pthread_mutex_unlock(&self->life.mu);
  Py_DECREF(self); /* the thread's reference (start() took it) */
  PyGILState_Release(gil); /* releases the GIL: the thread only returns after this */
  return NULL;
}

static PyObject *loop_start(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  LoopObject *self = (LoopObject *)self_obj;
  if (!self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Loop: not initialised");
    return NULL;
  }
  life_lock(&self->life);
  if (self->life.state != STATE_IDLE) { /* e.g. after a stop() that timed out: serve on */
    STORE_RLX(&self->life.stop, 0);
    pthread_mutex_unlock(&self->life.mu);
    Py_RETURN_FALSE;
  }
  pthread_mutex_unlock(&self->life.mu);
  Py_INCREF(self); /* the thread's reference */
  self->life.thread_ref = self_obj; /* dropped by life_forked in a child of fork() */
  if (life_launch(&self->life, loop_thread, self) < 0) {
    self->life.thread_ref = NULL;
    Py_DECREF(self);
    return NULL;
  }
  Py_RETURN_TRUE;
}

/* stop(timeout) -> True once the thread is gone (or was never there), False if it still
 * runs after `timeout` seconds (its handler has not returned); timeout < 0: no limit. */
static PyObject *life_stop(life_t *l, PyObject *arg) {
  const double timeout = PyFloat_AsDouble(arg);
  if (timeout == -1.0 && PyErr_Occurred())
    return NULL;
  STORE_RLX(&l->stop, 1);
  if (life_state(l) == STATE_IDLE)
    Py_RETURN_TRUE;
  if (pthread_equal(pthread_self(), l->thread)) /* from a handler: it stops after it */
    Py_RETURN_TRUE;
  int state;
  Py_BEGIN_ALLOW_THREADS
  state = life_wait(l, STATE_RUNNING, timeout);
  if (state == STATE_STARTING)
    state = life_wait(l, STATE_STARTING, -1.0) == STATE_IDLE ? STATE_IDLE : STATE_RUNNING;
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(state == STATE_IDLE);
}

/* Frees the tables set_table retired once no serving thread can be reading one (none runs:
 * the state is idle, and the GIL, held, keeps a start() out); else they wait for a later
 * call, or the loop's end. Adding handlers one by one kept every table made on the way. */
static void loop_free_retired(LoopObject *self) {
  table_t *t = self->table;
  if (t == NULL || t->retired == NULL || life_state(&self->life) != STATE_IDLE)
    return;
  table_t *old = t->retired;
  t->retired = NULL;
  table_free(old); /* may run a callable's __del__: the list is detached first */
}

static PyObject *loop_stop(PyObject *self_obj, PyObject *arg) {
  PyObject *stopped = life_stop(&((LoopObject *)self_obj)->life, arg);
  if (stopped == Py_True)
    loop_free_retired((LoopObject *)self_obj);
  return stopped;
}

/* on_serving_thread() -> bool: whether the caller is the serving thread (a handler). */
static PyObject *loop_on_serving_thread(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  LoopObject *self = (LoopObject *)self_obj;
  return PyBool_FromLong(self->life_ready && life_state(&self->life) != STATE_IDLE &&
                         pthread_equal(pthread_self(), self->life.thread));
}

static PyObject *loop_serve_one(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  LoopObject *self = (LoopObject *)self_obj;
  if (!self->life_ready || life_state(&self->life) != STATE_IDLE) {
    PyErr_SetString(PyExc_RuntimeError,
                    "serve_one() while the serving thread runs: stop() it first");
    return NULL;
  }
  if (self->num_workers != 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "serve_one() serves no graph handlers: start() the serving thread");
    return NULL;
  }
  uint64_t k = self->next;
  const int ready = next_request(self, &k);
  self->next = k;
  if (!ready)
    Py_RETURN_FALSE;
  serve_request(self, k, NULL);
  self->next = k + 1;
  if (self->exit_exc != NULL) {
    PyObject *exc = self->exit_exc; /* raised again here, with its traceback */
    self->exit_exc = NULL;
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    PyErr_Restore(type, exc, PyException_GetTraceback(exc)); /* steals the three */
    return NULL;
  }
  Py_RETURN_TRUE;
}

static PyObject *loop_take_exit(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  LoopObject *self = (LoopObject *)self_obj;
  PyObject *exc = self->exit_exc;
  self->exit_exc = NULL;
  if (exc == NULL)
    Py_RETURN_NONE;
  return exc;
}

/* set_table([(function_id, name, address, callable, worker), ...]): address != 0 a native
 * handler, worker >= 0 a graph entry (set_graphs first), else the Python callable. */
static PyObject *loop_set_table(PyObject *self_obj, PyObject *items) {
  LoopObject *self = (LoopObject *)self_obj;
  if (!self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Loop: not initialised");
    return NULL;
  }
  PyObject *seq = PySequence_Fast(items, "set_table: a sequence of entries");
  if (seq == NULL)
    return NULL;
  const Py_ssize_t n = PySequence_Size(seq);
  uint32_t size = 2;
  while (size < 2 * (uint64_t)n)
    size *= 2;
  table_t *t = PyMem_Calloc(1, sizeof(table_t) + size * sizeof(entry_t));
  if (t == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  t->mask = size - 1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *item = PySequence_GetItem(seq, i);
    unsigned int fid;
    const char *name;
    unsigned long long address;
    PyObject *callable;
    int worker;
    if (item == NULL ||
        !PyArg_ParseTuple(item, "IsKOi", &fid, &name, &address, &callable, &worker)) {
      Py_XDECREF(item);
      table_free(t);
      Py_DECREF(seq);
      return NULL;
    }
    if (worker >= 0 && ((uint32_t)worker >= self->num_workers || address != 0)) {
      Py_DECREF(item);
      table_free(t);
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "set_table: graph entry %s names worker %d of %u", name,
                   worker, (unsigned)self->num_workers);
      return NULL;
    }
    if (worker < 0 && address == 0 && !PyCallable_Check(callable)) {
      Py_DECREF(item);
      table_free(t);
      Py_DECREF(seq);
      PyErr_Format(PyExc_TypeError, "set_table: handler %s is neither native nor callable", name);
      return NULL;
    }
    uint32_t j = fid & t->mask;
    while (t->entries[j].used && t->entries[j].function_id != fid)
      j = (j + 1) & t->mask;
    entry_t *e = &t->entries[j];
    if (e->used) {
      Py_DECREF(item);
      table_free(t);
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "set_table: function id 0x%08x twice", fid);
      return NULL;
    }
    e->used = 1;
    e->function_id = fid;
    e->native = (cudaq_host_handler_t)(uintptr_t)address;
    e->worker = worker < 0 ? -1 : worker;
    if (address == 0 && worker < 0) {
      Py_INCREF(callable);
      e->callable = callable;
    }
    snprintf(e->name, sizeof e->name, "%s", name);
    t->count++;
    Py_DECREF(item);
  }
  Py_DECREF(seq);
  /* The serving thread may be reading the old table: it is kept until none runs. */
  t->retired = self->table;
  __atomic_store_n(&self->table, t, __ATOMIC_RELEASE);
  loop_free_retired(self);
  Py_RETURN_NONE;
}

/* set_graphs(context, (cuCtxSetCurrent, cuGraphLaunch, cuStreamQuery, cuMemcpyHtoDAsync,
 * cuGetErrorName), ring_device, [(function_id, name, graph_exec, stream, record, staging,
 * flag, flag_device), ...], owner): the graph workers, once, before the thread starts. The
 * addresses are the driver's entry points (cuGetErrorName may be 0) and the memory of
 * worker_t; `owner` keeps that memory alive as long as the loop. */
static PyObject *loop_set_graphs(PyObject *self_obj, PyObject *args) {
  LoopObject *self = (LoopObject *)self_obj;
  unsigned long long context, ring_device;
  unsigned long long fn[5];
  PyObject *items, *owner;
  if (!PyArg_ParseTuple(args, "K(KKKKK)KOO", &context, &fn[0], &fn[1], &fn[2], &fn[3], &fn[4],
                        &ring_device, &items, &owner))
    return NULL;
  if (!self->life_ready || life_state(&self->life) != STATE_IDLE || self->workers != NULL) {
    PyErr_SetString(PyExc_RuntimeError,
                    "set_graphs: once, on a loop whose serving thread has never started");
    return NULL;
  }
  if (fn[0] == 0 || fn[1] == 0 || fn[2] == 0 || fn[3] == 0 || ring_device == 0) {
    PyErr_SetString(PyExc_ValueError, "set_graphs: a null driver entry point or ring address");
    return NULL;
  }
  PyObject *seq = PySequence_Fast(items, "set_graphs: a sequence of workers");
  if (seq == NULL)
    return NULL;
  const Py_ssize_t n = PySequence_Size(seq);
  if (n < 1 || n > (Py_ssize_t)MAX_WORKERS) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "set_graphs: 1 to %u workers, not %zd", MAX_WORKERS, n);
    return NULL;
  }
  const size_t slots = self->ring.num_slots;
  worker_t *workers = PyMem_Calloc((size_t)n, sizeof(worker_t));
  uint32_t *pend_next = PyMem_Calloc(slots, sizeof(uint32_t));
  uint64_t *pend_k = PyMem_Calloc(slots, sizeof(uint64_t));
  uint8_t *taken = PyMem_Calloc(slots, 1);
  if (workers == NULL || pend_next == NULL || pend_k == NULL || taken == NULL) {
    PyMem_Free(workers);
    PyMem_Free(pend_next);
    PyMem_Free(pend_k);
    PyMem_Free(taken);
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    worker_t *w = &workers[i];
    unsigned int fid;
    const char *name;
    unsigned long long exec, stream, record, staging, flag, flag_device;
    PyObject *item = PySequence_GetItem(seq, i);
    const int parsed = item != NULL && PyArg_ParseTuple(item, "IsKKKKKK", &fid, &name, &exec,
                                                        &stream, &record, &staging, &flag,
                                                        &flag_device);
    if (parsed) /* name stays valid: the sequence holds the item */
      snprintf(w->name, sizeof w->name, "%s", name);
    Py_XDECREF(item);
    if (!parsed || exec == 0 || record == 0 || staging == 0 || flag == 0 || flag_device == 0 ||
        flag % 4 != 0) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "set_graphs: worker %zd has a null handle or address", i);
      PyMem_Free(workers);
      PyMem_Free(pend_next);
      PyMem_Free(pend_k);
      PyMem_Free(taken);
      Py_DECREF(seq);
      return NULL;
    }
    w->function_id = fid;
    w->exec = (void *)(uintptr_t)exec;
    w->stream = (void *)(uintptr_t)stream;
    w->record = record;
    w->staging = (uint8_t *)(uintptr_t)staging;
    w->flag = (uint32_t *)(uintptr_t)flag;
    w->flag_device = flag_device;
    w->launches = LOAD_ACQ(w->flag); /* the word's last value: no launch matches it yet */
  }
  Py_DECREF(seq);
  self->cu.ctx_set_current = (cu_ctx_set_current_fn)(uintptr_t)fn[0];
  self->cu.graph_launch = (cu_graph_launch_fn)(uintptr_t)fn[1];
  self->cu.stream_query = (cu_stream_query_fn)(uintptr_t)fn[2];
  self->cu.memcpy_htod_async = (cu_memcpy_htod_async_fn)(uintptr_t)fn[3];
  self->cu.get_error_name = (cu_get_error_name_fn)(uintptr_t)fn[4];
  self->context = (void *)(uintptr_t)context;
  self->ring_device = ring_device;
  self->pend_next = pend_next;
  self->pend_k = pend_k;
  self->taken = taken;
  self->all_idle = n == 64 ? ~0ull : (1ull << n) - 1;
  self->idle_mask = self->all_idle;
  Py_INCREF(owner);
  self->graph_owner = owner;
  self->workers = workers;
  self->num_workers = (uint32_t)n;
  Py_RETURN_NONE;
}

/* graph_stats() -> [(name, requests, launch_failures, launch_error, queued, busy), ...] */
static PyObject *loop_graph_stats(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  LoopObject *self = (LoopObject *)self_obj;
  PyObject *out = PyList_New(0);
  if (out == NULL)
    return NULL;
  const unsigned long long idle = LOAD_RLX(&self->idle_mask);
  for (uint32_t i = 0; i < self->num_workers; ++i) {
    const worker_t *w = &self->workers[i];
    PyObject *row = Py_BuildValue("(sIIIIO)", w->name, (unsigned)LOAD_RLX(&w->launches),
                                  (unsigned)LOAD_RLX(&w->launch_failures),
                                  (unsigned)LOAD_RLX(&w->launch_error),
                                  (unsigned)LOAD_RLX(&w->queued),
                                  ((idle >> i) & 1ull) ? Py_False : Py_True);
    if (row == NULL || PyList_Append(out, row) < 0) {
      Py_XDECREF(row);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(row);
  }
  return out;
}

/* A counter of the loop's (closure: its offset in LoopObject) as the serving thread leaves
 * it: a relaxed atomic load, for it may be counting meanwhile (a PyMemberDef attribute would
 * read it with a plain load: a data race). */
static PyObject *loop_counter(PyObject *self_obj, void *offset) {
  const unsigned long long *p =
      (const unsigned long long *)((const char *)self_obj + (size_t)(uintptr_t)offset);
  return PyLong_FromUnsignedLongLong(LOAD_RLX(p));
}

static PyObject *loop_get_running(PyObject *self_obj, void *closure) {
  (void)closure;
  LoopObject *self = (LoopObject *)self_obj;
  return PyBool_FromLong(self->life_ready && life_state(&self->life) != STATE_IDLE);
}

static PyObject *loop_get_last_error(PyObject *self_obj, void *closure) {
  (void)closure;
  LoopObject *self = (LoopObject *)self_obj;
  if (!self->life_ready)
    Py_RETURN_NONE;
  return get_text(&self->life, self->last_error);
}

static int loop_traverse(PyObject *self_obj, visitproc visit, void *arg) {
  LoopObject *self = (LoopObject *)self_obj;
  Py_VISIT(self->owner);
  Py_VISIT(self->exit_exc);
  Py_VISIT(self->graph_owner);
  for (table_t *t = self->table; t != NULL; t = t->retired)
    for (uint32_t i = 0; i <= t->mask; ++i)
      Py_VISIT(t->entries[i].callable);
  Py_VISIT((PyObject *)Py_TYPE(self_obj));
  return 0;
}

static int loop_clear(PyObject *self_obj) {
  LoopObject *self = (LoopObject *)self_obj;
  /* Only ever collected with no thread running: a running thread holds a reference. */
  Py_CLEAR(self->exit_exc);
  Py_CLEAR(self->graph_owner);
  table_t *t = self->table;
  self->table = NULL;
  table_free(t);
  return 0;
}

static void loop_dealloc(PyObject *self_obj) {
  LoopObject *self = (LoopObject *)self_obj;
  PyObject_GC_UnTrack(self_obj);
  loop_clear(self_obj);
  Py_CLEAR(self->owner);
  PyMem_Free(self->workers);
  PyMem_Free(self->pend_next);
  PyMem_Free(self->pend_k);
  PyMem_Free(self->taken);
  if (self->life_ready)
    life_destroy(&self->life);
  PyTypeObject *tp = Py_TYPE(self_obj);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self_obj);
  Py_DECREF(tp);
}

static PyMethodDef loop_methods[] = {
    {"start", loop_start, METH_NOARGS, "start() -> bool: start the serving thread (False: runs)"},
    {"stop", loop_stop, METH_O, "stop(timeout) -> bool: whether the thread is gone"},
    {"on_serving_thread", loop_on_serving_thread, METH_NOARGS,
     "on_serving_thread() -> bool: whether this is the serving thread (a handler calls)"},
    {"serve_one", loop_serve_one, METH_NOARGS,
     "serve_one() -> bool: answer the next request on this thread if it is there"},
    {"take_exit", loop_take_exit, METH_NOARGS,
     "take_exit(): the BaseException a Python handler raised to stop the program, or None"},
    {"set_table", loop_set_table, METH_O,
     "set_table([(function_id, name, address, callable, worker), ...]): the handlers"},
    {"set_graphs", loop_set_graphs, METH_VARARGS,
     "set_graphs(context, entry_points, ring_device, workers, owner): the graph workers"},
    {"graph_stats", loop_graph_stats, METH_NOARGS,
     "graph_stats() -> [(name, requests, launch_failures, launch_error, queued, busy), ...]"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef loop_members[] = {
    {"next", T_ULONGLONG, offsetof(LoopObject, next), 0,
     "the next request number to serve (while the serving thread is stopped)"},
    {"idle_sleep_ns", T_ULONGLONG, offsetof(LoopObject, idle_sleep_ns), 0,
     "0: spin while serving; else the longest sleep when idle (read at start())"},
    {"shared_ring", T_INT, offsetof(LoopObject, shared_ring), 0,
     "1: a device dispatcher consumes the ring too (requests not ours passed over)"},
    {"num_workers", T_UINT, offsetof(LoopObject, num_workers), READONLY,
     "graph workers (one per GRAPH_LAUNCH entry served)"},
    {NULL, 0, 0, 0, NULL},
};

#define LOOP_COUNTER(name, doc) \
  {#name, loop_counter, NULL, doc, (void *)(uintptr_t)offsetof(LoopObject, name)}

static PyGetSetDef loop_getset[] = {
    LOOP_COUNTER(published, "responses published"),
    LOOP_COUNTER(rejected, "requests answered -1, -2 or -3"),
    LOOP_COUNTER(handler_errors, "handler failures answered with a reserved status"),
    LOOP_COUNTER(idle_mask, "bit w set: graph worker w has nothing on its stream"),
    LOOP_COUNTER(graphs_outstanding, "graph requests taken and not answered yet"),
    {"running", loop_get_running, NULL, "whether the serving thread runs", NULL},
    {"last_handler_error", loop_get_last_error, NULL, "the last handler failure, or None",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot loop_slots[] = {
    {Py_tp_doc, (void *)"Loop(address, num_slots, slot_size, owner): the host path's "
                        "serving loop over one ring (HostDispatcher)."},
    {Py_tp_init, (void *)loop_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)loop_dealloc},
    {Py_tp_traverse, (void *)loop_traverse},
    {Py_tp_clear, (void *)loop_clear},
    {Py_tp_methods, (void *)loop_methods},
    {Py_tp_members, (void *)loop_members},
    {Py_tp_getset, (void *)loop_getset},
    {0, NULL},
};

static PyType_Spec loop_spec = {
    "skbuild_cudaq.realtime.host._native.Loop",
    sizeof(LoopObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    loop_slots,
};

/* ------------------------------------------------------------------------------------ */
/* Feeder: UDP datagrams in, ring requests out, answers back (UdpFeeder)                   */
/* ------------------------------------------------------------------------------------ */
#define FEEDER_BATCH 64u
/* With requests in flight and no answer ready, the feeder watches the oldest one's response
 * flag this long before its next receive call: an answer is then sent as soon as it is
 * published instead of after a recvmmsg (a system call, ~0.5 us) that found nothing. */
#define FEEDER_ANSWER_SPIN_NS 10000ull
#define FEEDER_BUFFERS (4u << 20) /* receive buffers of one batch, at most */

typedef struct {
  uint32_t peer_id; /* the peer's request id, put back into the answer */
  uint32_t ring_id; /* the id the request got in the ring */
  uint64_t timestamp;
  struct sockaddr_storage addr;
  socklen_t addr_len;
} inflight_t;

/* The counters of UdpFeeder (udp.py): every datagram received is forwarded, rejected
 * (answered by the feeder), dropped (shorter than a header), or one of the two drops
 * that are never answered (the response magic; the feeder's own address). */
enum {
  C_RECEIVED,
  C_FORWARDED,
  C_ANSWERED,
  C_REJECTED,
  C_DROPPED,
  C_DROPPED_RESPONSES,
  C_DROPPED_OWN_ADDRESS,
  C_SEND_ERRORS,
  C_PROTOCOL_ERRORS,
  C_COUNT
};
static const char *const counter_names[C_COUNT] = {
    "received",          "forwarded",           "answered",    "rejected",        "dropped",
    "dropped_responses", "dropped_own_address", "send_errors", "protocol_errors",
};

typedef struct {
  PyObject_HEAD
  ring_t ring;
  PyObject *owner;
  int fd;
  life_t life;
  int life_ready;
  unsigned long long next; /* the producer's next request number */
  unsigned long long done; /* the oldest request not answered yet */
  unsigned long long idle_sleep_ns;
  unsigned long long answer_spin_ns; /* FEEDER_ANSWER_SPIN_NS (read at start()) */
  unsigned long long counters[C_COUNT];
  inflight_t *inflight; /* one per slot */
  struct sockaddr_storage self_addr;
  socklen_t self_len;
  uint32_t batch, buffer_size;
  uint8_t *buffers; /* batch * buffer_size */
  struct mmsghdr *rmsgs, *smsgs;
  struct iovec *riov, *siov; /* 1 a receive, 2 a send */
  struct sockaddr_storage *raddrs;
  uint8_t *sheads; /* 24 bytes a send */
  char error[ERROR_TEXT];
} FeederObject;

static int feeder_init(PyObject *self_obj, PyObject *args, PyObject *kwds) {
  FeederObject *self = (FeederObject *)self_obj;
  int fd = -1;
  unsigned long long address = 0;
  unsigned int num_slots = 0, slot_size = 0;
  PyObject *owner = NULL;
  static char *kwlist[] = {"fd", "address", "num_slots", "slot_size", "owner", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "iKIIO", kwlist, &fd, &address, &num_slots,
                                   &slot_size, &owner))
    return -1;
  if (self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Feeder: already initialised");
    return -1;
  }
  if (fd < 0) {
    PyErr_SetString(PyExc_ValueError, "Feeder: not a socket");
    return -1;
  }
  if (ring_from(&self->ring, address, num_slots, slot_size, "Feeder") < 0)
    return -1;
  self->fd = fd;
  self->buffer_size = slot_size < 65536u ? slot_size + 1 : 65536u; /* +1: "longer than a slot" */
  uint32_t batch = FEEDER_BUFFERS / self->buffer_size;
  batch = batch < 1 ? 1 : batch;
  batch = batch > FEEDER_BATCH ? FEEDER_BATCH : batch;
  self->batch = batch;
  self->answer_spin_ns = FEEDER_ANSWER_SPIN_NS;
  self->inflight = PyMem_Calloc(num_slots, sizeof(inflight_t));
  self->buffers = PyMem_Malloc((size_t)batch * self->buffer_size);
  self->rmsgs = PyMem_Calloc(batch, sizeof(struct mmsghdr));
  self->smsgs = PyMem_Calloc(batch, sizeof(struct mmsghdr));
  self->riov = PyMem_Calloc(batch, sizeof(struct iovec));
  self->siov = PyMem_Calloc(2 * (size_t)batch, sizeof(struct iovec));
  self->raddrs = PyMem_Calloc(batch, sizeof(struct sockaddr_storage));
  self->sheads = PyMem_Calloc(batch, HEADER_SIZE);
  if (!self->inflight || !self->buffers || !self->rmsgs || !self->smsgs || !self->riov ||
      !self->siov || !self->raddrs || !self->sheads) {
    PyErr_NoMemory();
    return -1;
  }
  Py_INCREF(owner);
  self->owner = owner;
  life_init(&self->life);
  self->life_ready = 1;
  return 0;
}

static int is_loopback(const struct sockaddr_storage *a) {
  if (a->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
  if (a->ss_family == AF_INET6) {
    const struct in6_addr *ip = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
  }
  return 0;
}

/* Whether `from` is the feeder's own address: its address and port, or, bound to every
 * interface, its port on a loopback address (its other addresses are caught by the
 * response-magic rule: the feeder only ever sends answers). */
static int is_self(const FeederObject *f, const struct sockaddr_storage *from) {
  if (from->ss_family != f->self_addr.ss_family)
    return 0;
  if (from->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)from;
    const struct sockaddr_in *s = (const struct sockaddr_in *)&f->self_addr;
    if (a->sin_port != s->sin_port)
      return 0;
    return a->sin_addr.s_addr == s->sin_addr.s_addr ||
           (s->sin_addr.s_addr == htonl(INADDR_ANY) && is_loopback(from));
  }
  if (from->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)from;
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&f->self_addr;
    if (a->sin6_port != s->sin6_port)
      return 0;
    return memcmp(&a->sin6_addr, &s->sin6_addr, sizeof s->sin6_addr) == 0 ||
           (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr) && is_loopback(from));
  }
  return 0;
}

static int recv_batch(int fd, struct mmsghdr *msgs, unsigned int n) {
#ifdef __linux__
  return recvmmsg(fd, msgs, n, MSG_DONTWAIT, NULL);
#else
  unsigned int got = 0;
  for (; got < n; ++got) {
    ssize_t r = recvmsg(fd, &msgs[got].msg_hdr, MSG_DONTWAIT);
    if (r < 0)
      return got ? (int)got : -1;
    msgs[got].msg_len = (unsigned int)r;
  }
  return (int)got;
#endif
}

/* Sends msgs[0..n); a message the socket refuses is counted and skipped. */
static void send_batch(FeederObject *f, struct mmsghdr *msgs, unsigned int n) {
  unsigned int sent = 0;
  while (sent < n) {
#ifdef __linux__
    const int r = sendmmsg(f->fd, msgs + sent, n - sent, MSG_DONTWAIT);
#else
    const int r = sendmsg(f->fd, &msgs[sent].msg_hdr, MSG_DONTWAIT) < 0 ? -1 : 1;
#endif
    if (r > 0) {
      sent += (unsigned int)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      BUMP(&f->counters[C_SEND_ERRORS]); /* e.g. a full send buffer, an unreachable peer */
      sent += 1;
    }
  }
}

static void feeder_fail(FeederObject *f, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_text(&f->life, f->error, "%s", buf);
  STORE_RLX(&f->life.stop, 1);
}

/* Sends every answer that is ready, in ring order; returns how many requests it finished. */
static unsigned int feeder_answers(FeederObject *f) {
  ring_t *r = &f->ring;
  unsigned int finished = 0, n = 0;
  while (f->done < f->next) {
    const uint64_t k = f->done;
    const uint32_t slot = slot_of(r, k);
    if (LOAD_ACQ(&r->tx_flags[slot]) != seq_of(r, k))
      break;
    inflight_t *in = &f->inflight[slot];
    const uint8_t *resp = r->tx + (size_t)slot * r->slot_size;
    header_t h;
    read_header(resp, &h); /* magic, status, result_len, request id, timestamp */
    f->done = k + 1;
    ++finished;
    if (h.magic != RESPONSE_MAGIC || h.arg_len > r->max_payload || h.request_id != in->ring_id ||
        h.timestamp != in->timestamp) {
      BUMP(&f->counters[C_PROTOCOL_ERRORS]); /* not the answer to what was sent: dropped */
      continue;
    }
    uint8_t *head = f->sheads + (size_t)n * HEADER_SIZE;
    write_header(head, RESPONSE_MAGIC, (int32_t)h.function_id, h.arg_len, in->peer_id,
                 h.timestamp);
    struct iovec *iov = &f->siov[2 * (size_t)n];
    iov[0].iov_base = head;
    iov[0].iov_len = HEADER_SIZE;
    iov[1].iov_base = (void *)(resp + HEADER_SIZE);
    iov[1].iov_len = h.arg_len;
    struct msghdr *m = &f->smsgs[n].msg_hdr;
    memset(m, 0, sizeof *m);
    m->msg_name = &in->addr;
    m->msg_namelen = in->addr_len;
    m->msg_iov = iov;
    m->msg_iovlen = h.arg_len ? 2 : 1;
    BUMP(&f->counters[C_ANSWERED]); /* counted before the peer can see it */
    if (++n == f->batch) {
      send_batch(f, f->smsgs, n);
      n = 0;
    }
  }
  if (n)
    send_batch(f, f->smsgs, n);
  return finished;
}

/* How many of the next `want` requests may go into their slots now (the claim of
 * skbuild_cudaq.realtime.ring: both flags of a slot at seq - 1). -1: the ring broke the
 * protocol (the feeder stops with the reason). */
static int feeder_claimable(FeederObject *f, uint32_t want) {
  ring_t *r = &f->ring;
  for (uint32_t i = 0; i < want; ++i) {
    const uint64_t k = f->next + i;
    const uint32_t slot = slot_of(r, k), prev = seq_of(r, k) - 1;
    const uint32_t rx = LOAD_ACQ(&r->rx_flags[slot]), tx = LOAD_ACQ(&r->tx_flags[slot]);
    if (rx != prev) {
      feeder_fail(f,
                  "slot %u: request flag %u, expected %u: another producer wrote to the ring "
                  "(one producer at a time: the feeder's ring client is the feeder's)",
                  slot, rx, prev);
      return -1;
    }
    if (tx == prev)
      continue;
    if (tx == prev - 1) /* an earlier client's request, not answered yet: wait for it */
      return (int)i;
    feeder_fail(f,
                "slot %u: response flag %u while its request flag is %u: a response nobody "
                "asked for (two producers on one ring, or a consumer out of step)",
                slot, tx, prev);
    return -1;
  }
  return (int)want;
}

/* Handles a batch of `n` received datagrams: forwards, answers or drops each. */
static void feeder_datagrams(FeederObject *f, unsigned int n) {
  ring_t *r = &f->ring;
  unsigned int replies = 0;
  for (unsigned int i = 0; i < n; ++i) {
    const struct msghdr *m = &f->rmsgs[i].msg_hdr;
    const uint8_t *data = f->buffers + (size_t)i * f->buffer_size;
    const uint32_t size = f->rmsgs[i].msg_len;
    const int truncated = (m->msg_flags & MSG_TRUNC) != 0;
    BUMP(&f->counters[C_RECEIVED]);
    if (is_self(f, &f->raddrs[i])) { /* nothing of the feeder's own can be a request */
      BUMP(&f->counters[C_DROPPED_OWN_ADDRESS]);
      continue;
    }
    if (size < HEADER_SIZE) { /* no header: no answer possible */
      BUMP(&f->counters[C_DROPPED]);
      continue;
    }
    header_t h;
    read_header(data, &h);
    if (h.magic == RESPONSE_MAGIC) { /* an answer is never answered: no loops between servers */
      BUMP(&f->counters[C_DROPPED_RESPONSES]);
      continue;
    }
    if (truncated || size > r->slot_size || size - HEADER_SIZE < h.arg_len) {
      BUMP(&f->counters[C_REJECTED]);
      uint8_t *head = f->sheads + (size_t)replies * HEADER_SIZE;
      write_header(head, RESPONSE_MAGIC,
                   h.magic != REQUEST_MAGIC ? STATUS_BAD_MAGIC : STATUS_ARGS_TOO_LONG, 0,
                   h.request_id, h.timestamp);
      struct iovec *iov = &f->siov[2 * (size_t)replies];
      iov->iov_base = head;
      iov->iov_len = HEADER_SIZE;
      struct msghdr *sm = &f->smsgs[replies].msg_hdr;
      memset(sm, 0, sizeof *sm);
      sm->msg_name = &f->raddrs[i];
      sm->msg_namelen = m->msg_namelen;
      sm->msg_iov = iov;
      sm->msg_iovlen = 1;
      ++replies;
      continue;
    }
    /* Forward: the header with the ring's own request id, the arguments without padding. */
    const uint64_t k = f->next;
    const uint32_t slot = slot_of(r, k);
    const uint64_t id64 = r->ids[0];
    r->ids[0] = id64 + 1;
    inflight_t *in = &f->inflight[slot];
    in->peer_id = h.request_id;
    in->ring_id = (uint32_t)id64;
    in->timestamp = h.timestamp;
    memcpy(&in->addr, &f->raddrs[i], sizeof in->addr);
    in->addr_len = m->msg_namelen;
    uint8_t *req = r->rx + (size_t)slot * r->slot_size;
    write_header(req, h.magic, (int32_t)h.function_id, h.arg_len, in->ring_id, h.timestamp);
    memcpy(req + HEADER_SIZE, data + HEADER_SIZE, h.arg_len);
    BUMP(&f->counters[C_FORWARDED]);
    f->next = k + 1;
    STORE_REL(&r->rx_flags[slot], seq_of(r, k));
  }
  if (replies)
    send_batch(f, f->smsgs, replies);
}

static void *feeder_thread(void *arg) {
  FeederObject *f = (FeederObject *)arg;
  ring_t *r = &f->ring;
  name_thread("cudaq-udp-feed");
  const uint64_t idle_sleep = f->idle_sleep_ns, answer_spin = f->answer_spin_ns;
  if (idle_sleep)
    tight_timer_slack();
  life_set(&f->life, STATE_RUNNING);
  uint64_t idle_start = 0;
  while (!LOAD_RLX(&f->life.stop)) {
    int progressed = feeder_answers(f) != 0;
    if (!progressed && f->done < f->next && answer_spin) {
      const uint64_t k = f->done;
      const uint32_t *flag = &r->tx_flags[slot_of(r, k)], seq = seq_of(r, k);
      uint64_t until = 0;
      for (uint32_t spins = 1; LOAD_ACQ(flag) != seq; ++spins) {
        if ((spins & 63u) == 0) {
          const uint64_t t = now_ns();
          if (until == 0)
            until = t + answer_spin;
          else if (t >= until || LOAD_RLX(&f->life.stop))
            break;
        }
      }
      progressed = feeder_answers(f) != 0;
    }
    const uint32_t free_slots = r->num_slots - (uint32_t)(f->next - f->done);
    if (free_slots) {
      const uint32_t want = free_slots < f->batch ? free_slots : f->batch;
      const int can = feeder_claimable(f, want);
      if (can < 0)
        break;
      if (can > 0) {
        for (int i = 0; i < can; ++i) {
          f->riov[i].iov_base = f->buffers + (size_t)i * f->buffer_size;
          f->riov[i].iov_len = f->buffer_size;
          struct msghdr *m = &f->rmsgs[i].msg_hdr;
          memset(m, 0, sizeof *m);
          m->msg_name = &f->raddrs[i];
          m->msg_namelen = sizeof f->raddrs[i];
          m->msg_iov = &f->riov[i];
          m->msg_iovlen = 1;
        }
        const int got = recv_batch(f->fd, f->rmsgs, (unsigned int)can);
        if (got > 0) {
          feeder_datagrams(f, (unsigned int)got);
          progressed = 1;
        } else if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                   errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH) {
          feeder_fail(f, "cannot receive from the socket: %s", strerror(errno));
          break;
        }
      }
    }
    if (progressed) {
      idle_start = 0;
    } else if (idle_sleep && f->next == f->done) {
      /* nothing in flight: after a while, wait on the socket instead of spinning */
      const uint64_t t = now_ns();
      if (idle_start == 0) {
        idle_start = t;
      } else if (t - idle_start >= IDLE_SPIN_NS) {
        struct pollfd p = {f->fd, POLLIN, 0};
        const uint64_t ms = idle_sleep / 1000000ull;
        poll(&p, 1, ms == 0 ? 1 : (ms > 10 ? 10 : (int)ms));
      }
    }
  }
  life_set(&f->life, STATE_IDLE);
  return NULL;
}

/* start(next) -> bool: start at request number `next` of the ring (the ring client's
 * position); requests still in flight from before are kept when it is the feeder's own. */
static PyObject *feeder_start(PyObject *self_obj, PyObject *arg) {
  FeederObject *f = (FeederObject *)self_obj;
  if (!f->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Feeder: not initialised");
    return NULL;
  }
  const unsigned long long next = PyLong_AsUnsignedLongLong(arg);
  if (next == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  if (life_state(&f->life) != STATE_IDLE)
    Py_RETURN_FALSE;
  if (next != f->next) /* the ring client was used since: what was in flight is not ours */
    f->done = f->next = next;
  f->self_len = sizeof f->self_addr;
  if (getsockname(f->fd, (struct sockaddr *)&f->self_addr, &f->self_len) != 0)
    return PyErr_SetFromErrno(PyExc_OSError);
  f->error[0] = '\0';
  /* No reference for the thread: it never touches Python; the dealloc stops and waits. */
  if (life_launch(&f->life, feeder_thread, f) < 0)
    return NULL;
  Py_RETURN_TRUE;
}

static PyObject *feeder_stop(PyObject *self_obj, PyObject *arg) {
  return life_stop(&((FeederObject *)self_obj)->life, arg);
}

static PyObject *feeder_counters(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  FeederObject *f = (FeederObject *)self_obj;
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
  for (int i = 0; i < C_COUNT; ++i) {
    PyObject *v = PyLong_FromUnsignedLongLong(LOAD_RLX(&f->counters[i]));
    if (v == NULL || PyDict_SetItemString(d, counter_names[i], v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

static PyObject *feeder_get_running(PyObject *self_obj, void *closure) {
  (void)closure;
  FeederObject *f = (FeederObject *)self_obj;
  return PyBool_FromLong(f->life_ready && life_state(&f->life) != STATE_IDLE);
}

static PyObject *feeder_get_error(PyObject *self_obj, void *closure) {
  (void)closure;
  FeederObject *f = (FeederObject *)self_obj;
  if (!f->life_ready)
    Py_RETURN_NONE;
  return get_text(&f->life, f->error);
}

static void feeder_dealloc(PyObject *self_obj) {
  FeederObject *f = (FeederObject *)self_obj;
  if (f->life_ready) {
    /* The thread never takes the GIL: wait for it here, then nothing uses the ring. */
    STORE_RLX(&f->life.stop, 1);
    Py_BEGIN_ALLOW_THREADS
    while (life_wait(&f->life, STATE_STARTING, -1.0) != STATE_IDLE)
      life_wait(&f->life, STATE_RUNNING, -1.0);
    Py_END_ALLOW_THREADS
    life_destroy(&f->life);
  }
  Py_CLEAR(f->owner);
  PyMem_Free(f->inflight);
  PyMem_Free(f->buffers);
  PyMem_Free(f->rmsgs);
  PyMem_Free(f->smsgs);
  PyMem_Free(f->riov);
  PyMem_Free(f->siov);
  PyMem_Free(f->raddrs);
  PyMem_Free(f->sheads);
  PyTypeObject *tp = Py_TYPE(self_obj);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self_obj);
  Py_DECREF(tp);
}

static PyMethodDef feeder_methods[] = {
    {"start", feeder_start, METH_O, "start(next) -> bool: start the feeder thread at request next"},
    {"stop", feeder_stop, METH_O, "stop(timeout) -> bool: whether the thread is gone"},
    {"counters", feeder_counters, METH_NOARGS, "counters() -> dict of the feeder's counters"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef feeder_members[] = {
    {"next", T_ULONGLONG, offsetof(FeederObject, next), READONLY,
     "the producer's next request number"},
    {"done", T_ULONGLONG, offsetof(FeederObject, done), READONLY,
     "the oldest request not answered yet"},
    {"batch", T_UINT, offsetof(FeederObject, batch), READONLY,
     "datagrams a recvmmsg/sendmmsg takes at most"},
    {"idle_sleep_ns", T_ULONGLONG, offsetof(FeederObject, idle_sleep_ns), 0,
     "0: spin while serving; else wait on the socket when idle (read at start())"},
    {"answer_spin_ns", T_ULONGLONG, offsetof(FeederObject, answer_spin_ns), 0,
     "how long to watch for an answer before the next receive call (read at start())"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef feeder_getset[] = {
    {"running", feeder_get_running, NULL, "whether the feeder thread runs", NULL},
    {"error", feeder_get_error, NULL, "why the thread stopped on its own, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot feeder_slots[] = {
    {Py_tp_doc, (void *)"Feeder(fd, address, num_slots, slot_size, owner): a UDP socket "
                        "feeding one ring (UdpFeeder)."},
    {Py_tp_init, (void *)feeder_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)feeder_dealloc},
    {Py_tp_methods, (void *)feeder_methods},
    {Py_tp_members, (void *)feeder_members},
    {Py_tp_getset, (void *)feeder_getset},
    {0, NULL},
};

static PyType_Spec feeder_spec = {
    "skbuild_cudaq.realtime.host._native.Feeder",
    sizeof(FeederObject),
    0,
    Py_TPFLAGS_DEFAULT,
    feeder_slots,
};

/* ------------------------------------------------------------------------------------ */
/* The module                                                                             */
/* ------------------------------------------------------------------------------------ */
static PyMethodDef native_functions[] = {
    {"host_export", native_host_export, METH_VARARGS,
     "host_export(path, symbol, load) -> (address, name, version) | None"},
    {"call_handler", native_call_handler, METH_VARARGS,
     "call_handler(address, args, max_result_len) -> (status, bytes)"},
    {NULL, NULL, 0, NULL},
};

static int native_exec(PyObject *module) {
  static int at_fork; /* once a process (the module may be initialised again) */
  if (!at_fork) {
    const int rc = pthread_atfork(NULL, NULL, on_fork_child);
    if (rc != 0) {
      errno = rc;
      PyErr_SetFromErrno(PyExc_OSError);
      return -1;
    }
    at_fork = 1;
  }
  PyObject *loop = PyType_FromSpec(&loop_spec);
  if (loop == NULL || PyModule_AddObject(module, "Loop", loop) < 0) {
    Py_XDECREF(loop);
    return -1;
  }
  PyObject *feeder = PyType_FromSpec(&feeder_spec);
  if (feeder == NULL || PyModule_AddObject(module, "Feeder", feeder) < 0) {
    Py_XDECREF(feeder);
    return -1;
  }
  if (PyModule_AddStringConstant(module, "EXPORT_PREFIX", CUDAQ_HOST_EXPORT_PREFIX) < 0 ||
      PyModule_AddIntConstant(module, "EXPORT_VERSION", CUDAQ_HOST_EXPORT_VERSION) < 0 ||
      PyModule_AddIntConstant(module, "BATCH", FEEDER_BATCH) < 0 ||
      PyModule_AddIntConstant(module, "IDLE_SPIN_NS", (long)IDLE_SPIN_NS) < 0 ||
      PyModule_AddIntConstant(module, "GRAPH_IO_SIZE", (long)GRAPH_IO_SIZE) < 0 ||
      PyModule_AddIntConstant(module, "MAX_GRAPH_WORKERS", (long)MAX_WORKERS) < 0 ||
      PyModule_AddIntConstant(module, "STATUS_GRAPH_LAUNCH_FAILED", STATUS_GRAPH_LAUNCH_FAILED) < 0 ||
      PyModule_AddIntConstant(module, "STATUS_GRAPH_NOT_PUBLISHED", STATUS_GRAPH_NOT_PUBLISHED) < 0)
    return -1;
  return 0;
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, (void *)native_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "_native",
    "The host path's native core: serving loop, UDP feeder, native host handlers (_native.c).",
    0,
    native_functions,
    native_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&native_module); }
