/* The round trip itself: Ring.call, call_next() and its stamped and traced forms,
 * remember() (see fastcall.h). */
#include "fastcall.h"

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
PyObject *ring_call(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
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
PyObject *call_next(RingObject *self, PyObject *function, PyObject *payload, trace_t *trace) {
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
PyObject *ring_call_next(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
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
PyObject *ring_call_next_stamped(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
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
PyObject *ring_call_next_traced(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
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
PyObject *ring_remember(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs) {
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
