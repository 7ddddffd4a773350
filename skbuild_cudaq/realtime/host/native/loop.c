/* Loop: the consumer of a ring (HostDispatcher's serving loop): serving a request, the
 * serving thread, its start and stop, and the Python type. */
#include "internal.h"

/* ------------------------------------------------------------------------------------ */
/* Loop: the consumer (HostDispatcher's serving loop)                                     */
/* ------------------------------------------------------------------------------------ */

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
  self->result_area = PyMem_Malloc((size_t)self->ring.max_payload + RESULT_GUARD);
  if (self->result_area == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  memset(self->result_area + self->ring.max_payload, GUARD_BYTE, RESULT_GUARD);
  Py_INCREF(owner);
  self->owner = owner;
  life_init(&self->life);
  self->life_ready = 1;
  return 0;
}

/* One call of a native handler (any thread, no GIL needed): its result written into the
 * loop's result area (followed by its guard, see RESULT_GUARD), then copied to `out` (the
 * response slot's result) if it kept to max_result_len. A result length above it, or a
 * write past it, is answered STATUS_RESULT_TOO_LONG with no result, counted and named. */
static int32_t call_native(LoopObject *self, const entry_t *e, const uint8_t *args,
                           uint32_t arg_len, uint8_t *out, uint32_t *out_len) {
  const uint32_t max = self->ring.max_payload;
  uint8_t *area = self->result_area;
  uint32_t result_len = 0;
  int32_t status = e->native(args, arg_len, area, max, &result_len);
  *out_len = 0;
  if (!guard_intact(area + max, RESULT_GUARD_CHECKED)) {
    memset(area + max, GUARD_BYTE, RESULT_GUARD); /* for the next call */
    BUMP(&self->handler_errors);
    record_error(self,
                 "%s: wrote past its result region of max_result_len = %u bytes (a native "
                 "handler writes at most max_result_len bytes at result): answered "
                 "STATUS_RESULT_TOO_LONG",
                 e->name, max);
    return STATUS_RESULT_TOO_LONG;
  }
  if (result_len > max) {
    BUMP(&self->handler_errors);
    record_error(self, "%s: result_len %u exceeds the max payload %u", e->name, result_len,
                 max);
    return STATUS_RESULT_TOO_LONG;
  }
  memcpy(out, area, result_len);
  *out_len = result_len;
  return status;
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
    status = call_native(self, e, req + HEADER_SIZE, h.arg_len, resp + HEADER_SIZE,
                         &result_len);
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
  unsigned long long seen_gen = 0;
  uint32_t spins = 0;
serve:
  while (!LOAD_RLX(&self->life.stop)) {
    /* A quiescent point (no table in hand): the tables replaced up to the generation loaded
     * here are read no more, and set_table() may free them (loop_free_retired). */
    const unsigned long long gen = LOAD_ACQ(&self->table_gen);
    if (gen != seen_gen) {
      seen_gen = gen;
      STORE_REL(&self->table_seen, gen);
    }
    const int graphs = self->idle_mask != self->all_idle; /* a worker's stream busy */
    if (graphs && graph_sweep(self)) {
      idle_start = 0;
      nap = 1000;
    }
    if (!next_request(self, &k)) {
      STORE_RLX(&self->next, k);
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
    STORE_RLX(&self->next, ++k);
    if (self->exit_exc != NULL) /* set by this thread, with the GIL */
      break;
  }
  /* Before the thread stops, the graph requests in hand are answered (queued ones launched
   * meanwhile) and every worker's stream is seen done (an answered graph's tail too): their
   * memory (the ring, the workers' records and images) is freed only once it is. */
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

/* A counter of the loop's (closure: its offset in LoopObject) as the serving thread leaves
 * it: a relaxed atomic load, for it may be counting meanwhile (a PyMemberDef attribute would
 * read it with a plain load: a data race). */
static PyObject *loop_counter(PyObject *self_obj, void *offset) {
  const unsigned long long *p =
      (const unsigned long long *)((const char *)self_obj + (size_t)(uintptr_t)offset);
  return PyLong_FromUnsignedLongLong(LOAD_RLX(p));
}

/* next: where the serving thread is (it moves it meanwhile: a relaxed atomic load). */
static PyObject *loop_get_next(PyObject *self_obj, void *closure) {
  (void)closure;
  return PyLong_FromUnsignedLongLong(LOAD_RLX(&((LoopObject *)self_obj)->next));
}

/* Setting next (HostDispatcher.reset()) is refused while a serving thread runs: it would
 * go on from where it is, and the ring's clients from the new position (the check and the
 * store under the life's mutex, which start() takes too). */
static int loop_set_next(PyObject *self_obj, PyObject *value, void *closure) {
  (void)closure;
  LoopObject *self = (LoopObject *)self_obj;
  if (value == NULL) {
    PyErr_SetString(PyExc_AttributeError, "Loop.next cannot be deleted");
    return -1;
  }
  const unsigned long long k = PyLong_AsUnsignedLongLong(value);
  if (k == (unsigned long long)-1 && PyErr_Occurred())
    return -1;
  if (!self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Loop: not initialised");
    return -1;
  }
  life_lock(&self->life);
  const int idle = self->life.state == STATE_IDLE;
  if (idle)
    STORE_RLX(&self->next, k);
  pthread_mutex_unlock(&self->life.mu);
  if (!idle) {
    PyErr_SetString(PyExc_RuntimeError,
                    "Loop.next set while the serving thread runs: stop() it first");
    return -1;
  }
  return 0;
}

/* tables: the handler tables alive (the current one and those retired, not freed yet). */
static PyObject *loop_get_tables(PyObject *self_obj, void *closure) {
  (void)closure;
  unsigned long long n = 0;
  for (const table_t *t = ((LoopObject *)self_obj)->table; t != NULL; t = t->retired)
    ++n;
  return PyLong_FromUnsignedLongLong(n);
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
  PyMem_Free(self->result_area);
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
    LOOP_COUNTER(idle_mask, "bit w set: graph worker w's stream seen done, nothing in hand"),
    LOOP_COUNTER(graphs_outstanding, "graph requests taken and not answered yet"),
    {"next", loop_get_next, loop_set_next,
     "the next request number to serve (set only while the serving thread is stopped)", NULL},
    {"tables", loop_get_tables, NULL,
     "handler tables alive: the current one and those retired not freed yet", NULL},
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

PyType_Spec loop_spec = {
    "skbuild_cudaq.realtime.host._native.Loop",
    sizeof(LoopObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    loop_slots,
};
