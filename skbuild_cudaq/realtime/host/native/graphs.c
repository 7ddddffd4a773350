/* The serving loop's graph workers (worker_t in internal.h): set_graphs(), launching a
 * GRAPH_LAUNCH request's graph, the sweep that publishes, launches the next request and
 * recycles, graph_stats(). */
#include "internal.h"

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

/* Whether worker wi is idle: its stream seen done (cuStreamQuery), nothing in hand. */
static inline int graph_idle(const LoopObject *self, uint32_t wi) {
  return (int)((self->idle_mask >> wi) & 1ull);
}

/* Whether worker w may launch its next request: its last one is answered and no copy of a
 * refused launch may still read its image. Its stream need not be done: the answer was
 * published by the graph, which ran after its copy (the image is free again), or by the loop
 * once the stream was done or nothing was enqueued; the next copy and graph queue behind
 * what still runs there (the graph's tail) in stream order. */
static inline int graph_free(const worker_t *w) { return w->answered && !w->image_held; }

/* Hands request k to worker wi, which is free (graph_free): the image of its record filled
 * (the I/O context as the device path fills it, the request copied after it), the copy into
 * the record and the graph enqueued on its stream; the worker is busy until the sweep sees
 * its stream done. A call the driver refuses is answered at once
 * (STATUS_GRAPH_LAUNCH_FAILED); a refused launch after its copy was enqueued holds the image
 * (the copy may still read it) until the stream is done. */
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
  w->behind = !graph_idle(self, wi);
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
    w->image_held = enqueued;
    graph_answer(self, w, k, STATUS_GRAPH_LAUNCH_FAILED, "%s failed: %s (%d)", call,
                 cu_error_name(self, rc), rc);
    if (!enqueued)
      return; /* nothing new on its stream: the worker stays as it was (idle or not) */
  }
  STORE_RLX(&self->idle_mask, self->idle_mask & ~(1ull << wi));
}

/* Launches what waits for worker wi while it is free (a launch refused at once leaves it so;
 * a refused launch after its copy holds it until its stream is done). */
static void graph_run_queue(LoopObject *self, uint32_t wi) {
  worker_t *w = &self->workers[wi];
  while (w->queued != 0 && graph_free(w)) {
    const uint32_t slot = w->head;
    w->head = self->pend_next[slot];
    STORE_RLX(&w->queued, w->queued - 1);
    graph_launch(self, wi, self->pend_k[slot]);
  }
}

/* Request k (valid, its flag seen) is for worker wi's graph: launched now if the worker is
 * free, else queued behind what waits for it. Answered once the graph has answered. */
void graph_take(LoopObject *self, uint32_t wi, uint64_t k) {
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

/* Worker wi's stream is done: cuStreamQuery said `q` (not CU_ERROR_NOT_READY), so everything
 * enqueued there has run. Its last request, unless answered, is answered now: published if
 * the graph published as it ended, else STATUS_GRAPH_NOT_PUBLISHED (the stream succeeded) or
 * STATUS_GRAPH_LAUNCH_FAILED (it failed: where the request was launched behind an answered
 * graph's tail, that tail may be what failed; nothing after it ran). An error after the
 * answer is recorded (launch_error, last_handler_error); the answer stands. The worker is
 * idle again and its image free. */
static void graph_stream_done(LoopObject *self, uint32_t wi, int q) {
  worker_t *w = &self->workers[wi];
  if (!w->answered && LOAD_ACQ(w->flag) == w->launches) {
    w->answered = 1; /* it published as it ended */
    graph_publish(self, w->k);
  }
  if (!w->answered) {
    w->answered = 1;
    if (q == CU_SUCCESS) {
      graph_answer(self, w, w->k, STATUS_GRAPH_NOT_PUBLISHED,
                   "the graph ended without publishing its response (cudaq_graph_publish)");
    } else {
      BUMP(&w->launch_failures);
      STORE_RLX(&w->launch_error, (uint32_t)q);
      graph_answer(self, w, w->k, STATUS_GRAPH_LAUNCH_FAILED, "the graph failed: %s (%d)%s",
                   cu_error_name(self, q), q,
                   w->behind ? " (or the tail of the graph before it, after that one answered)"
                             : "");
    }
  } else if (q != CU_SUCCESS) {
    STORE_RLX(&w->launch_error, (uint32_t)q);
    record_error(self, "%s: its stream reported %s (%d) after its request was answered",
                 w->name, cu_error_name(self, q), q);
  }
  w->image_held = 0;
  STORE_RLX(&self->idle_mask, self->idle_mask | (1ull << wi));
}

/* One busy worker in the sweep: what its graph published is published in the ring and the
 * worker's next request launched at once; its stream is asked whether it is done at most
 * every GRAPH_QUERY_NS (*now: the sweep's clock, read once when first needed). Returns
 * whether anything happened. */
static int graph_sweep_worker(LoopObject *self, uint32_t wi, uint64_t *now) {
  worker_t *w = &self->workers[wi];
  int progressed = 0;
  if (!w->answered && LOAD_ACQ(w->flag) == w->launches) {
    w->answered = 1; /* the graph published: its answer is in the slot, its copy has run */
    graph_publish(self, w->k);
    graph_run_queue(self, wi);
    progressed = 1;
  }
  if (*now == 0)
    *now = now_ns();
  if (*now < w->next_query_ns)
    return progressed;
  w->next_query_ns = *now + GRAPH_QUERY_NS;
  const int q = self->cu.stream_query(w->stream);
  if (q == CU_ERROR_NOT_READY)
    return progressed;
  graph_stream_done(self, wi, q);
  graph_run_queue(self, wi);
  return 1;
}

/* The sweep over busy workers (graph_sweep_worker each). Returns whether anything happened. */
int graph_sweep(LoopObject *self) {
  unsigned long long busy = self->all_idle & ~self->idle_mask;
  int progressed = 0;
  uint64_t now = 0;
  while (busy != 0) {
    const uint32_t wi = (uint32_t)__builtin_ctzll(busy);
    busy &= busy - 1;
    progressed |= graph_sweep_worker(self, wi, &now);
  }
  return progressed;
}

/* set_graphs(context, (cuCtxSetCurrent, cuGraphLaunch, cuStreamQuery, cuMemcpyHtoDAsync,
 * cuGetErrorName), ring_device, [(function_id, name, graph_exec, stream, record, staging,
 * flag, flag_device), ...], owner): the graph workers, once, before the thread starts. The
 * addresses are the driver's entry points (cuGetErrorName may be 0) and the memory of
 * worker_t; `owner` keeps that memory alive as long as the loop. */
PyObject *loop_set_graphs(PyObject *self_obj, PyObject *args) {
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
    w->answered = 1;                 /* nothing launched yet: free */
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

/* graph_stats() -> [(name, requests, launch_failures, launch_error, queued, busy), ...]:
 * busy is the worker's bit clear in the idle mask (its stream not yet seen done: a request
 * in hand, or an answered graph's tail, or a refused launch's copy, may still run there);
 * a busy worker whose request is answered launches the next one at once. */
PyObject *loop_graph_stats(PyObject *self_obj, PyObject *unused) {
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
