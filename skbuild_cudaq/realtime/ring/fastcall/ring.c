/* The Ring type: a view of one ring allocation, attach(), shut() and its Python type
 * (see fastcall.h). */
#include "fastcall.h"

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

PyType_Spec ring_spec = {
    "skbuild_cudaq.realtime.ring._fastcall.Ring",
    sizeof(RingObject),
    0,
    Py_TPFLAGS_DEFAULT,
    ring_slots,
};
