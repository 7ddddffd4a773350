/* The handler table of a Loop (table_t in internal.h): set_table() builds one, the
 * serving thread reads it, and the ones it replaced are freed once no thread reads them. */
#include "internal.h"

/* ------------------------------------------------------------------------------------ */
/* The handler table (open addressing on the function id, an FNV-1a hash already)         */
/* ------------------------------------------------------------------------------------ */

void table_free(table_t *t) {
  while (t != NULL) {
    table_t *older = t->retired;
    for (uint32_t i = 0; i <= t->mask; ++i)
      Py_CLEAR(t->entries[i].callable);
    PyMem_Free(t);
    t = older;
  }
}

/* Frees the tables set_table retired once no serving thread can be reading one (the GIL,
 * held, keeps a start() and other set_table() calls out): all of them when none runs (the
 * state is idle); while one runs, those replaced at a generation it has passed a quiescent
 * point after (table_seen: it holds no table from before). The list runs newest first, so
 * those are a tail of it. The rest wait for a later call, or the loop's end. */
void loop_free_retired(LoopObject *self) {
  table_t *t = self->table;
  if (t == NULL || t->retired == NULL)
    return;
  table_t *keep = t; /* the last table kept: its `retired` is the first freed */
  if (life_state(&self->life) != STATE_IDLE) {
    const unsigned long long seen = LOAD_ACQ(&self->table_seen);
    while (keep->retired != NULL && keep->retired->replaced_at > seen)
      keep = keep->retired;
  }
  table_t *old = keep->retired;
  keep->retired = NULL;
  table_free(old); /* may run a callable's __del__: the list is detached first */
}

/* set_table([(function_id, name, address, callable, worker), ...]): address != 0 a native
 * handler, worker >= 0 a graph entry (set_graphs first), else the Python callable. */
PyObject *loop_set_table(PyObject *self_obj, PyObject *items) {
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
  /* The serving thread may be reading the old table: it is kept until the thread has passed
   * a quiescent point after this (see loop_free_retired). */
  const unsigned long long gen = self->table_gen + 1;
  if (self->table != NULL)
    self->table->replaced_at = gen;
  t->retired = self->table;
  __atomic_store_n(&self->table, t, __ATOMIC_RELEASE);
  STORE_REL(&self->table_gen, gen); /* after the table: a thread that loads gen finds it */
  loop_free_retired(self);
  Py_RETURN_NONE;
}
