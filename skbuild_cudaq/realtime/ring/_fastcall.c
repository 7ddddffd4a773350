/* The compiled round trip of RingClient.call (skbuild_cudaq/realtime/ring/client.py).
 *
 * One request, one slot, no ticket: the same protocol steps and checks as the
 * Python fast path of RingClient.call (see the module docstring of
 * skbuild_cudaq.realtime.ring), in C, so that a round trip from Python costs one
 * call into C instead of tens of bytecodes. Python's limited API (3.10): one
 * abi3 module for every CPython from 3.10.
 *
 *   Ring(address, num_slots, slot_size, max_payload)
 *       a view of one ring allocation at `address` (the caller keeps the memory
 *       alive and stops using the Ring before it goes; RingClient does both).
 *   Ring.call_next(function, payload) -> (status, result) | int | None | False
 *       what RingClient.call runs first: Ring.call for request `next` (an attribute:
 *       the client's next request number, kept here) with the function id of
 *       `function` as remember() last gave it and the spin of `spin_ns` (an
 *       attribute), if the slot holds no ticket of the client (the list given to
 *       attach()). A tuple counts the response in `collected` (an attribute); a
 *       tuple or an int advances `next`. False: `function` is not the one
 *       remembered (nothing was written: the caller computes its id, remembers it
 *       and calls again); None as below, and also before attach().
 *   Ring.call_next_stamped(function, payload) -> (out, written_ns, seen_ns)
 *       call_next() with two clock reads: before the request is written, after its
 *       response flag is seen (for measurements; call() never stamps).
 *   Ring.call_next_traced(function, payload) -> (out, (entry, ..., built))
 *       call_next() with a clock read at each of its steps (trace_t; benchmarks).
 *   Ring.remember(function, function_id), Ring.attach(pending)
 *       the function id call_next() uses for `function` (compared by identity),
 *       and the client's list of tickets (one item a slot, None where free).
 *   Ring.call(k, function_id, payload, spin_ns) -> (status, result) | int | None
 *       None:   slot k % num_slots is not free for request k (its flags are not
 *               both seq - 1) or the payload does not fit: nothing was written;
 *               the caller takes its general path, which waits or raises.
 *       (status, result): request k was written, published and answered, and the
 *               response passed every check (magic, result_len, request id and
 *               timestamp echoed).
 *       int (the request id): request k was written and published, but its
 *               response did not come within spin_ns nanoseconds of spinning, or
 *               came and failed a check; the caller makes a ticket of it and
 *               waits (or raises the protocol error) the general way.
 *
 *   call(client, function, payload=b"", *, timeout=...)  (the module's `call`)
 *       RingClient.call itself: a method descriptor the class takes as its `call`,
 *       so that `client.call(...)` enters C with no Python frame. It runs
 *       client._compiled.call_next(function, payload) where the client has a
 *       compiled Ring, and returns its tuple; anything else (False, None or a
 *       request id) goes to client._call_continue(function, payload, out[,
 *       timeout]), and a client without a Ring (pure Python) or a call with other
 *       arguments than these goes to client._call_python(*args, **kwargs), the
 *       Python method of the same signature (which also raises its TypeErrors), and
 *       so does a `timeout` other than None or a plain float or int >= 0: the Python
 *       method checks it (and refuses a bad one before anything is written).
 *
 * Memory order: the request bytes, then a release store of the request flag;
 * an acquire load of the response flag, then the response bytes (the device
 * pairs these with ld.acquire.sys / st.release.sys). Correct on any host CPU,
 * not only on x86-TSO.
 *
 * ThreadSanitizer (tools/sanitize.sh --thread) sees these atomics, but not the flag loads
 * and stores of the client's Python path (plain numpy accesses, ordered by x86-TSO: see the
 * ring's module docstring). A round trip done with a slot's response tells it so
 * (slot_released): the slot's next request, whichever path publishes it, comes after.
 *
 * The spin holds the GIL, as the Python spin it replaces does; it is bounded by
 * spin_ns (the caller's general path then waits with a backoff that sleeps). With
 * `release_gil` (HostDispatcher.client(): the consumer is a thread of this process that
 * needs the GIL for Python handlers) it spins without the GIL.
 */
#ifndef SKBUILD_CUDAQ_FULL_API /* set by cmake/FastClient.cmake where there is no stable ABI */
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define REQUEST_MAGIC 0x43555152u
#define RESPONSE_MAGIC 0x43555153u
#define HEADER_SIZE 24u

typedef struct {
  PyObject_HEAD
  uint8_t *base;
  uint32_t num_slots;
  uint32_t slot_size;
  uint32_t max_payload;
  uint32_t *rx_flags;
  uint32_t *tx_flags;
  uint64_t *ids;
  uint8_t *tx_slots;
  /* call_next()'s state: the client's next request number and its count of
   * responses read, its tickets (a list, one item a slot), the last function and
   * its id, the spin bound. */
  unsigned long long next;
  unsigned long long collected;
  unsigned long long spin_ns;
  PyObject *pending;
  PyObject *last_function;
  uint32_t last_fid;
  int prefetch_response; /* 1: fetch the response's first line while spinning (the default) */
  int release_gil;       /* 1: spin without the GIL (a consumer of this process needs it) */
  /* shut(): `closing` tells a round trip spinning without the GIL to stop; `waiting` is 1
   * from before a round trip lets the GIL go until it is done with the ring's memory, the
   * GIL held again (both set and cleared with the GIL held; read by the other side) */
  int closing;
  int waiting;
} RingObject;

#if defined(__SANITIZE_THREAD__)
#define RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RING_TSAN 1
#endif
#endif
#ifdef RING_TSAN
void __tsan_release(void *addr);
#endif

/* The round trip is done with its slot's response (`rx_flag`: the slot's request flag). For
 * ThreadSanitizer only (nothing in other builds): a release of what it did in the slot to
 * whoever acquires that flag next -- the consumer, once the slot's next request is published.
 * This module publishes with a release store, which ThreadSanitizer sees; the client's
 * Python path with a plain numpy store (a release on x86-TSO), which it cannot. */
static inline void slot_released(uint32_t *rx_flag) {
#ifdef RING_TSAN
  __tsan_release(rx_flag);
#else
  (void)rx_flag;
#endif
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int as_u64(PyObject *obj, const char *what, unsigned long long *out) {
  unsigned long long v = PyLong_AsUnsignedLongLong(obj);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_ValueError, "%s must be an integer in [0, 2**64)", what);
    return -1;
  }
  *out = v;
  return 0;
}

/* A wire function id: an integer that fits in 32 bits. */
static int as_fid(PyObject *obj, uint32_t *out) {
  unsigned long long v;
  if (as_u64(obj, "function_id", &v) < 0)
    return -1;
  if (v > 0xFFFFFFFFull) {
    PyErr_SetString(PyExc_ValueError, "function_id must fit in 32 bits");
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static int ring_init(PyObject *self_obj, PyObject *args, PyObject *kwds) {
  RingObject *self = (RingObject *)self_obj;
  unsigned long long address = 0;
  unsigned int num_slots = 0, slot_size = 0, max_payload = 0;
  static char *kwlist[] = {"address", "num_slots", "slot_size", "max_payload", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "KIII", kwlist, &address, &num_slots,
                                   &slot_size, &max_payload))
    return -1;
  if (address == 0 || address % 8 != 0) {
    PyErr_SetString(PyExc_ValueError, "Ring: address must be a non-null, 8-aligned address");
    return -1;
  }
  if (num_slots == 0 || slot_size <= HEADER_SIZE || slot_size % 8 != 0 ||
      max_payload != slot_size - HEADER_SIZE) {
    PyErr_Format(PyExc_ValueError,
                 "Ring: not a ring layout (num_slots=%u, slot_size=%u, max_payload=%u)",
                 num_slots, slot_size, max_payload);
    return -1;
  }
  self->base = (uint8_t *)(uintptr_t)address;
  self->num_slots = num_slots;
  self->slot_size = slot_size;
  self->max_payload = max_payload;
  {
    const size_t slots = (size_t)num_slots * slot_size;
    self->tx_slots = self->base + slots;
    self->rx_flags = (uint32_t *)(self->base + 2 * slots);
    self->tx_flags = (uint32_t *)(self->base + 2 * slots + 4u * (size_t)num_slots);
    self->ids = (uint64_t *)(self->base + 2 * slots + 8u * (size_t)num_slots);
  }
  self->prefetch_response = 1;
  return 0;
}

/* The benchmarks' clock reads of a round trip (Ring.call_next_stamped and
 * call_next_traced): CLOCK_MONOTONIC ns at these points, 0 where not reached. A
 * stamped call reads the clock at TRACE_WRITTEN and TRACE_SEEN only, a traced call at
 * every point; call() reads it at none. */
enum {
  TRACE_ENTRY,     /* call_next() entered */
  TRACE_CLAIMED,   /* the slot claimed, the request id taken */
  TRACE_WRITTEN,   /* before the request is written */
  TRACE_PUBLISHED, /* its flag stored */
  TRACE_SEEN,      /* the response flag seen */
  TRACE_CHECKED,   /* the response header read and checked */
  TRACE_BUILT,     /* the result objects built */
  TRACE_POINTS
};
typedef struct {
  uint64_t t[TRACE_POINTS];
  int every; /* 0: TRACE_WRITTEN and TRACE_SEEN only */
} trace_t;
#define TRACE(trace, point)                                                                     \
  do {                                                                                           \
    if ((trace) != NULL && ((trace)->every || (point) == TRACE_WRITTEN || (point) == TRACE_SEEN)) \
      (trace)->t[(point)] = now_ns();                                                            \
  } while (0)

static PyObject *read_response(RingObject *self, const uint8_t *resp, uint32_t rid,
                               uint32_t *rx_flag, trace_t *trace);

/* The round trip of request k (see Ring.call in the header comment). *published
 * is set to 1 once the request was written and published (a tuple or an int comes
 * back), else left 0 (None, or NULL with an exception set). */
static PyObject *round_trip(RingObject *self, unsigned long long k, uint32_t fid,
                            PyObject *payload, unsigned long long spin_ns, int *published,
                            trace_t *trace) {
  const char *data;
  Py_ssize_t size;
  if (PyBytes_Check(payload)) {
    data = PyBytes_AsString(payload);
    size = PyBytes_Size(payload);
  } else if (PyByteArray_Check(payload)) {
    data = PyByteArray_AsString(payload);
    size = PyByteArray_Size(payload);
  } else {
    Py_RETURN_NONE; /* other buffers: the general path copies them */
  }
  if (data == NULL || size < 0)
    return NULL;
  if ((size_t)size > self->max_payload)
    Py_RETURN_NONE; /* the general path raises with the message */
  if (__atomic_load_n(&self->closing, __ATOMIC_RELAXED))
    Py_RETURN_NONE; /* shut(): the general path finds the client closed */

  const uint32_t slot = (uint32_t)(k % self->num_slots);
  const uint32_t seq = (uint32_t)(k / self->num_slots + 1);
  const uint32_t prev = seq - 1;
  uint32_t *rx_flag = &self->rx_flags[slot];
  uint32_t *tx_flag = &self->tx_flags[slot];
  if (__atomic_load_n(rx_flag, __ATOMIC_ACQUIRE) != prev ||
      __atomic_load_n(tx_flag, __ATOMIC_ACQUIRE) != prev)
    Py_RETURN_NONE; /* claim: the general path waits for an older answer or raises */

  /* The ring's id source: one producer at a time, as in RingClient._new_request_id. */
  const uint64_t id64 = self->ids[0];
  self->ids[0] = id64 + 1;
  const uint32_t rid = (uint32_t)id64;

  TRACE(trace, TRACE_CLAIMED);
  TRACE(trace, TRACE_WRITTEN);
  uint8_t *req = self->base + (size_t)slot * self->slot_size;
  const uint32_t head[4] = {REQUEST_MAGIC, (uint32_t)fid, (uint32_t)size, rid};
  const uint64_t timestamp = 0;
  memcpy(req, head, sizeof head);
  memcpy(req + 16, &timestamp, sizeof timestamp);
  memcpy(req + HEADER_SIZE, data, (size_t)size);
  const uint8_t *resp = self->tx_slots + (size_t)slot * self->slot_size;
  const int prefetch = self->prefetch_response; /* read with the GIL: an attribute */
  /* release_gil: the consumer is a thread of this process that needs the GIL (the host
   * path's Python handlers): wait without it, as ctypes would. Released before the request
   * is published, so that the consumer never finds it held and sleeps on it. */
  PyThreadState *released = NULL;
  if (self->release_gil) {
    /* with the GIL: shut(), with it too, sees it and waits until it is 0 again */
    __atomic_store_n(&self->waiting, 1, __ATOMIC_RELAXED);
    released = PyEval_SaveThread();
  }
  __atomic_store_n(rx_flag, seq, __ATOMIC_RELEASE);
  *published = 1;
  TRACE(trace, TRACE_PUBLISHED);

  uint64_t deadline = 0;
  uint32_t spins = 0;
  int answered = 1;
  while (__atomic_load_n(tx_flag, __ATOMIC_ACQUIRE) != seq) {
    if (released != NULL && __atomic_load_n(&self->closing, __ATOMIC_ACQUIRE)) {
      answered = -1;
      break;
    }
    /* The response's first line (header and the first 40 result bytes) is written before
     * its flag: fetched while spinning, the read after the flag finds it in cache instead
     * of missing on it then. A prefetch orders nothing; the reads below come after the
     * flag's acquire, and coherence gives them the device's bytes. */
    if (prefetch)
      __builtin_prefetch(resp, 0, 3);
    if ((++spins & 255u) == 0) {
      const uint64_t t = now_ns();
      if (deadline == 0) {
        deadline = t + spin_ns;
      } else if (t >= deadline) {
        answered = 0;
        break;
      }
    }
  }
  if (released != NULL)
    PyEval_RestoreThread(released);
  PyObject *out;
  if (answered < 0) { /* shut() meanwhile: the ring's memory may go; not read again */
    Py_INCREF(Py_None);
    out = Py_None;
  } else if (!answered) {
    out = PyLong_FromUnsignedLong(rid); /* published, not answered yet */
  } else {
    out = read_response(self, resp, rid, rx_flag, trace);
  }
  if (released != NULL) /* done with the ring's memory: shut() may return */
    __atomic_store_n(&self->waiting, 0, __ATOMIC_RELEASE);
  return out;
}

/* The answered response of request `rid` in `resp` (with the GIL): (status, result), or the
 * request id when it is not the response it should be (the general path raises). */
static PyObject *read_response(RingObject *self, const uint8_t *resp, uint32_t rid,
                               uint32_t *rx_flag, trace_t *trace) {
  const uint64_t timestamp = 0;
  TRACE(trace, TRACE_SEEN);
  uint32_t rhead[4];
  uint64_t rts;
  memcpy(rhead, resp, sizeof rhead);
  memcpy(&rts, resp + 16, sizeof rts);
  if (rhead[0] != RESPONSE_MAGIC || rhead[2] > self->max_payload || rhead[3] != rid ||
      rts != timestamp) {
    slot_released(rx_flag);
    return PyLong_FromUnsignedLong(rid); /* the general path raises with the details */
  }
  TRACE(trace, TRACE_CHECKED);
  PyObject *result = PyBytes_FromStringAndSize((const char *)resp + HEADER_SIZE, rhead[2]);
  slot_released(rx_flag);
  if (result == NULL)
    return NULL;
  PyObject *status = PyLong_FromLong((long)(int32_t)rhead[1]);
  if (status == NULL) {
    Py_DECREF(result);
    return NULL;
  }
  PyObject *out = PyTuple_New(2);
  if (out == NULL) {
    Py_DECREF(result);
    Py_DECREF(status);
    return NULL;
  }
  PyTuple_SetItem(out, 0, status); /* steals the references */
  PyTuple_SetItem(out, 1, result);
  TRACE(trace, TRACE_BUILT);
  return out;
}

/* Ring.call(k, function_id, payload, spin_ns) (METH_FASTCALL: no argument tuple). */
static PyObject *ring_call(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
  RingObject *self = (RingObject *)self_obj;
  unsigned long long k, spin_ns;
  uint32_t fid;
  int published = 0;
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "Ring.call(k, function_id, payload, spin_ns)");
    return NULL;
  }
  if (self->base == NULL) {
    PyErr_SetString(PyExc_ValueError, "Ring: not initialised");
    return NULL;
  }
  if (as_u64(args[0], "k", &k) < 0 || as_fid(args[1], &fid) < 0 ||
      as_u64(args[3], "spin_ns", &spin_ns) < 0)
    return NULL;
  return round_trip(self, k, fid, args[2], spin_ns, &published, NULL);
}

/* call_next() of `self` (see the header comment); NULL with an exception set on an error.
 * `trace`: NULL, or where the benchmarks' clock reads go (see trace_t). */
static PyObject *call_next(RingObject *self, PyObject *function, PyObject *payload,
                           trace_t *trace) {
  TRACE(trace, TRACE_ENTRY);
  if (self->base == NULL || self->pending == NULL)
    Py_RETURN_NONE; /* not attached: the general path */
  if (function != self->last_function)
    Py_RETURN_FALSE; /* the caller remembers its id and calls again */
  const unsigned long long k = self->next;
  PyObject *ticket = PyList_GetItem(self->pending, (Py_ssize_t)(k % self->num_slots));
  if (ticket == NULL)
    return NULL;
  if (ticket != Py_None)
    Py_RETURN_NONE; /* the slot holds a ticket: the general path collects it first */
  int published = 0;
  PyObject *out =
      round_trip(self, k, self->last_fid, payload, self->spin_ns, &published, trace);
  if (published) {
    self->next = k + 1;
    if (out != NULL && PyTuple_Check(out))
      self->collected += 1;
  }
  return out;
}

/* Ring.call_next(function, payload): RingClient.call's first step, every bit of
 * its bookkeeping here (see the header comment). */
static PyObject *ring_call_next(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "Ring.call_next(function, payload)");
    return NULL;
  }
  return call_next((RingObject *)self_obj, args[0], args[1], NULL);
}

/* Ring.call_next_stamped(function, payload) -> (out, written_ns, seen_ns): call_next() with
 * the clock (CLOCK_MONOTONIC, ns) read right before the request is written and right after
 * its response flag is seen (0, 0 where it was not): the C part of a round trip, timed as
 * a native client times its own. For measurements; call() never stamps. */
static PyObject *ring_call_next_stamped(PyObject *self_obj, PyObject *const *args,
                                        Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "Ring.call_next_stamped(function, payload)");
    return NULL;
  }
  trace_t trace = {{0}, 0};
  PyObject *out = call_next((RingObject *)self_obj, args[0], args[1], &trace);
  if (out == NULL)
    return NULL;
  return Py_BuildValue("(NKK)", out, (unsigned long long)trace.t[TRACE_WRITTEN],
                       (unsigned long long)trace.t[TRACE_SEEN]);
}

/* Ring.call_next_traced(function, payload) -> (out, (entry, claimed, written, published,
 * seen, checked, built)): call_next() with the clock (CLOCK_MONOTONIC, ns) read at each of
 * the points of trace_t (0 where not reached): where the compiled round trip's time goes,
 * each step with one clock read of its own. For benchmarks; call() never traces. */
static PyObject *ring_call_next_traced(PyObject *self_obj, PyObject *const *args,
                                       Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "Ring.call_next_traced(function, payload)");
    return NULL;
  }
  trace_t trace = {{0}, 1};
  PyObject *out = call_next((RingObject *)self_obj, args[0], args[1], &trace);
  if (out == NULL)
    return NULL;
  PyObject *points = PyTuple_New(TRACE_POINTS);
  if (points == NULL) {
    Py_DECREF(out);
    return NULL;
  }
  for (int i = 0; i < TRACE_POINTS; ++i) {
    PyObject *t = PyLong_FromUnsignedLongLong((unsigned long long)trace.t[i]);
    if (t == NULL) {
      Py_DECREF(out);
      Py_DECREF(points);
      return NULL;
    }
    PyTuple_SetItem(points, i, t); /* steals the reference */
  }
  return Py_BuildValue("(NN)", out, points);
}

/* Ring.remember(function, function_id) */
static PyObject *ring_remember(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
  RingObject *self = (RingObject *)self_obj;
  uint32_t fid;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "Ring.remember(function, function_id)");
    return NULL;
  }
  if (as_fid(args[1], &fid) < 0)
    return NULL;
  PyObject *old = self->last_function;
  Py_INCREF(args[0]);
  self->last_function = args[0];
  self->last_fid = fid;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

/* Ring.attach(pending): the client's list of tickets, one item a slot. */
static PyObject *ring_attach(PyObject *self_obj, PyObject *pending) {
  RingObject *self = (RingObject *)self_obj;
  if (!PyList_Check(pending) || PyList_Size(pending) != (Py_ssize_t)self->num_slots) {
    PyErr_SetString(PyExc_TypeError, "Ring.attach: a list with one item a slot");
    return NULL;
  }
  PyObject *old = self->pending;
  Py_INCREF(pending);
  self->pending = pending;
  Py_XDECREF(old);
  Py_RETURN_NONE;
}

static void ring_dealloc(PyObject *self) {
  RingObject *ring = (RingObject *)self;
  Py_CLEAR(ring->pending);
  Py_CLEAR(ring->last_function);
  PyTypeObject *tp = Py_TYPE(self);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self);
  Py_DECREF(tp);
}

/* What client_call needs, made once by fastcall_exec: the Ring type and the names it
 * looks up on the client. */
static PyTypeObject *ring_type;
static PyObject *str_compiled, *str_call_continue, *str_call_python;

/* client._call_python(*args, **kwargs): the Python method, for every call the compiled
 * path does not take (a pure-Python client, other arguments). */
static PyObject *python_call(PyObject *client, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  PyObject *method = PyObject_GetAttr(client, str_call_python);
  if (method == NULL)
    return NULL;
  PyObject *pos = PyTuple_New(nargs);
  PyObject *kw = NULL, *out = NULL;
  if (pos == NULL)
    goto done;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SetItem(pos, i, args[i]); /* steals the reference */
  }
  if (kwnames != NULL) {
    const Py_ssize_t nkw = PyTuple_Size(kwnames);
    kw = PyDict_New();
    if (kw == NULL)
      goto done;
    for (Py_ssize_t i = 0; i < nkw; ++i)
      if (PyDict_SetItem(kw, PyTuple_GetItem(kwnames, i), args[nargs + i]) < 0)
        goto done;
  }
  out = PyObject_Call(method, pos, kw);
done:
  Py_DECREF(method);
  Py_XDECREF(pos);
  Py_XDECREF(kw);
  return out;
}

/* Whether `timeout` (a call's keyword) is one the compiled path takes as it is: None, or a
 * float or an int (exactly those types) >= 0 -- NaN is not. Anything else (a bool, a
 * string, a negative number, NaN, a float subclass such as numpy's) goes to the Python
 * method, which checks it as every waiting method does: the same error before anything is
 * written, or (a valid number of another type) the same round trip. */
static int plain_timeout(PyObject *timeout) {
  if (timeout == Py_None)
    return 1;
  if (PyFloat_CheckExact(timeout))
    return PyFloat_AsDouble(timeout) >= 0.0; /* false for NaN */
  if (PyLong_CheckExact(timeout)) {            /* not a bool: its type is not exactly int */
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(timeout, &overflow);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    return overflow > 0 || (overflow == 0 && v >= 0);
  }
  return 0;
}

/* call(client, function, payload=b"", *, timeout=...): RingClient.call (see the header
 * comment). METH_FASTCALL | METH_KEYWORDS: no argument tuple on the round trip's path. */
static PyObject *client_call(PyObject *client, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
  PyObject *timeout = NULL;
  if (kwnames != NULL) {
    const Py_ssize_t nkw = PyTuple_Size(kwnames);
    if (nkw > 1 || (nkw == 1 && PyUnicode_CompareWithASCIIString(
                                    PyTuple_GetItem(kwnames, 0), "timeout") != 0))
      return python_call(client, args, nargs, kwnames);
    if (nkw == 1) {
      timeout = args[nargs];
      if (!plain_timeout(timeout)) /* checked (and refused) before anything is written */
        return python_call(client, args, nargs, kwnames);
    }
  }
  if (nargs < 1 || nargs > 2)
    return python_call(client, args, nargs, kwnames);
  PyObject *ring = PyObject_GetAttr(client, str_compiled);
  if (ring == NULL)
    return NULL;
  if (Py_TYPE(ring) != ring_type || ((RingObject *)ring)->base == NULL) {
    Py_DECREF(ring); /* None: a pure-Python client, or a closed one */
    return python_call(client, args, nargs, kwnames);
  }
  PyObject *payload = nargs == 2 ? Py_NewRef(args[1]) : PyBytes_FromStringAndSize(NULL, 0);
  if (payload == NULL) {
    Py_DECREF(ring);
    return NULL;
  }
  PyObject *out = call_next((RingObject *)ring, args[0], payload, NULL);
  Py_DECREF(ring);
  if (out != NULL && !PyTuple_Check(out)) {
    /* False, None or a request id: the Python rest of the call (timeout last, if given) */
    PyObject *rest =
        PyObject_CallMethodObjArgs(client, str_call_continue, args[0], payload, out, timeout, NULL);
    Py_DECREF(out);
    out = rest;
  }
  Py_DECREF(payload);
  return out;
}

static PyMethodDef client_call_def = {
    "call", (PyCFunction)(void (*)(void))client_call, METH_FASTCALL | METH_KEYWORDS,
    "call($self, function, payload=b'', *, timeout=...)\n--\n\n"
    "Submit one request and wait for it: ``(status, result)``.\n\n"
    "``timeout``: seconds >= 0, or None for no limit; left out, the client's\n"
    ":attr:`timeout`. Checked before anything is written.\n\n"
    "The round trip's own path: when the next slot is free it writes the request,\n"
    "publishes it and spins on the response flag without creating a ticket (the same\n"
    "checks as :meth:`wait`); otherwise it goes through :meth:`submit` and :meth:`wait`.\n"
    "Compiled code with no Python frame where the client has the compiled ring\n"
    "(:attr:`compiled`); the Python method ``_call_python`` otherwise."};

/* Ring.shut(): no round trip reads or writes the ring's memory once it returns, so that its
 * owner may free it (RingClient.close()). A round trip spinning without the GIL in another
 * thread stops (it gives None: the general path then finds the client closed) or, answered
 * already, finishes reading its response first; later ones give None at once. */
static PyObject *ring_shut(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  RingObject *self = (RingObject *)self_obj;
  __atomic_store_n(&self->closing, 1, __ATOMIC_RELEASE);
  if (__atomic_load_n(&self->waiting, __ATOMIC_ACQUIRE)) {
    Py_BEGIN_ALLOW_THREADS /* the round trip takes the GIL back before it is done */
    while (__atomic_load_n(&self->waiting, __ATOMIC_ACQUIRE))
      sched_yield();
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static PyMethodDef ring_methods[] = {
    {"call", (PyCFunction)(void (*)(void))ring_call, METH_FASTCALL,
     "call(k, function_id, payload, spin_ns) -> (status, result) | request id | None\n\n"
     "One round trip of request k (see the module docstring)."},
    {"call_next", (PyCFunction)(void (*)(void))ring_call_next, METH_FASTCALL,
     "call_next(function, payload) -> (status, result) | request id | None | False\n\n"
     "RingClient.call's round trip of request `next` (see the module docstring)."},
    {"call_next_stamped", (PyCFunction)(void (*)(void))ring_call_next_stamped, METH_FASTCALL,
     "call_next_stamped(function, payload) -> (out, written_ns, seen_ns)\n\n"
     "call_next() with the C part of the round trip stamped (benchmarks)."},
    {"call_next_traced", (PyCFunction)(void (*)(void))ring_call_next_traced, METH_FASTCALL,
     "call_next_traced(function, payload) -> (out, (entry, claimed, written, published, seen,\n"
     "checked, built))\n\ncall_next() with the clock read at each step (benchmarks)."},
    {"remember", (PyCFunction)(void (*)(void))ring_remember, METH_FASTCALL,
     "remember(function, function_id): the id call_next() uses for `function`."},
    {"shut", (PyCFunction)ring_shut, METH_NOARGS,
     "shut(): no round trip uses the ring's memory once it returns (one spinning without "
     "the GIL in another thread stops); later ones give None."},
    {"attach", (PyCFunction)ring_attach, METH_O,
     "attach(pending): the client's tickets, one item a slot (None where free)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ring_members[] = {
    {"next", T_ULONGLONG, offsetof(RingObject, next), 0, "the client's next request number"},
    {"collected", T_ULONGLONG, offsetof(RingObject, collected), 0,
     "responses call_next() read (the client adds the rest)"},
    {"spin_ns", T_ULONGLONG, offsetof(RingObject, spin_ns), 0,
     "call_next()'s spin bound in nanoseconds"},
    {"release_gil", T_INT, offsetof(RingObject, release_gil), 0,
     "1: spin on the response flag without the GIL (the consumer is a thread of this process "
     "that needs it); 0 (the default): holding it"},
    {"prefetch_response", T_INT, offsetof(RingObject, prefetch_response), 0,
     "1 (the default): fetch the response's first line while spinning; 0: not (benchmarks)"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot ring_slots[] = {
    {Py_tp_doc, (void *)"Ring(address, num_slots, slot_size, max_payload): the compiled "
                        "round trip of RingClient.call over one ring allocation."},
    {Py_tp_init, (void *)ring_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)ring_dealloc},
    {Py_tp_methods, (void *)ring_methods},
    {Py_tp_members, (void *)ring_members},
    {0, NULL},
};

static PyType_Spec ring_spec = {
    "skbuild_cudaq.realtime.ring._fastcall.Ring",
    sizeof(RingObject),
    0,
    Py_TPFLAGS_DEFAULT,
    ring_slots,
};

static int fastcall_exec(PyObject *module) {
  if (str_compiled == NULL) { /* once a process: the names client_call looks up */
    str_compiled = PyUnicode_InternFromString("_compiled");
    str_call_continue = PyUnicode_InternFromString("_call_continue");
    str_call_python = PyUnicode_InternFromString("_call_python");
    if (str_compiled == NULL || str_call_continue == NULL || str_call_python == NULL)
      return -1;
  }
  PyObject *type = PyType_FromSpec(&ring_spec);
  if (type == NULL)
    return -1;
  if (PyModule_AddObject(module, "Ring", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  ring_type = (PyTypeObject *)type; /* the module keeps it; client_call compares with it */
  /* a method of any object: RingClient takes it as its `call` */
  PyObject *call = PyDescr_NewMethod(&PyBaseObject_Type, &client_call_def);
  if (call == NULL)
    return -1;
  if (PyModule_AddObject(module, "call", call) < 0) {
    Py_DECREF(call);
    return -1;
  }
  return 0;
}

static PyModuleDef_Slot fastcall_slots[] = {
    {Py_mod_exec, (void *)fastcall_exec},
    {0, NULL},
};

static struct PyModuleDef fastcall_module = {
    PyModuleDef_HEAD_INIT,
    "_fastcall",
    "The compiled round trip of RingClient.call (see _fastcall.c).",
    0,
    NULL,
    fastcall_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastcall(void) { return PyModuleDef_Init(&fastcall_module); }
