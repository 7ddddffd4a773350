/* The ring's shared words for the Python paths: acquire loads, release stores.
 *
 * A ring's request and response flags (u32[num_slots] each) and its request-id source
 * (one u64) are shared with another thread, another process or the GPU. The Python
 * paths (RingClient's general path, BatchClient, RingServer, RingMemory.clear_flags)
 * touch them only through a Words object of this module, so that every access has
 * the ordering the ring's protocol needs on any CPU, x86-64 (TSO) or aarch64 (weakly
 * ordered): see "Memory order" in skbuild_cudaq/realtime/ring/__init__.py and
 * docs/guides/host-path.md, "The ring's memory-ordering contract".
 *
 *   Words(address, count, width)   `count` aligned words of `width` bytes (4 or 8)
 *                                  at `address` (the caller keeps the memory alive
 *                                  and calls release() before it goes)
 *   load(i)          acquire load of word i (what the peer wrote before its release
 *                    store of that word is visible after it)
 *   store(i, v)      release store of v (every earlier store of this thread, the
 *                    payload bytes, is visible before it)
 *   load_all()       a list: an acquire load of each word in order
 *   gather(index)    a list: an acquire load of each word index[j]
 *   scatter(index, values)   a release store of values[j] into word index[j], in order
 *   fetch_add(i, n)  atomic read-modify-write (acq_rel), wrapping; returns the old value
 *   clear()          a release store of 0 into every word
 *   release()        forget the address: any later call raises ValueError
 *
 * Python's limited API (3.10): one abi3 module for every CPython from 3.10. Built by
 * cmake/RingAtomics.cmake, always (like the native core, which needs the same C
 * compiler and Python headers).
 */
#ifndef SKBUILD_CUDAQ_FULL_API /* set by cmake/NativeCore.cmake where there is no stable ABI */
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    PyObject_HEAD
    uintptr_t base;   /* 0 once released */
    Py_ssize_t count;
    int width;        /* 4 or 8 */
} Words;

static int Words_init(Words *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"address", "count", "width", NULL};
    unsigned long long address = 0;
    Py_ssize_t count = 0;
    int width = 4;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Kn|i", kwlist, &address, &count, &width))
        return -1;
    if (width != 4 && width != 8) {
        PyErr_Format(PyExc_ValueError, "width=%d: 4 or 8 bytes", width);
        return -1;
    }
    if (address == 0 || address % (unsigned long long)width != 0) {
        PyErr_Format(PyExc_ValueError, "address 0x%llx: not a %d-byte aligned address", address,
                     width);
        return -1;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count must be >= 0");
        return -1;
    }
    self->base = (uintptr_t)address;
    self->count = count;
    self->width = width;
    return 0;
}

/* The word's address, or NULL with an exception set (released, or out of range). */
static void *word_at(Words *self, PyObject *index) {
    if (self->base == 0) {
        PyErr_SetString(PyExc_ValueError, "operation forbidden on released ring memory");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(index);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->count) {
        PyErr_Format(PyExc_IndexError, "word %zd out of range (%zd words)", i, self->count);
        return NULL;
    }
    return (void *)(self->base + (uintptr_t)i * (uintptr_t)self->width);
}

static PyObject *load_word(Words *self, void *p) {
    if (self->width == 4)
        return PyLong_FromUnsignedLong(
            atomic_load_explicit((_Atomic uint32_t *)p, memory_order_acquire));
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit((_Atomic uint64_t *)p, memory_order_acquire));
}

static int store_word(Words *self, void *p, PyObject *value) {
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (self->width == 4) {
        if (v > UINT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "%llu does not fit a u32 word", v);
            return -1;
        }
        atomic_store_explicit((_Atomic uint32_t *)p, (uint32_t)v, memory_order_release);
    } else {
        atomic_store_explicit((_Atomic uint64_t *)p, (uint64_t)v, memory_order_release);
    }
    return 0;
}

static PyObject *Words_load(Words *self, PyObject *index) {
    void *p = word_at(self, index);
    return p == NULL ? NULL : load_word(self, p);
}

static PyObject *Words_store(Words *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "store(index, value)");
        return NULL;
    }
    void *p = word_at(self, args[0]);
    if (p == NULL || store_word(self, p, args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Words_fetch_add(Words *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "fetch_add(index, n)");
        return NULL;
    }
    void *p = word_at(self, args[0]);
    if (p == NULL)
        return NULL;
    unsigned long long n = PyLong_AsUnsignedLongLongMask(args[1]);
    if (n == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (self->width == 4)
        return PyLong_FromUnsignedLong(atomic_fetch_add_explicit(
            (_Atomic uint32_t *)p, (uint32_t)n, memory_order_acq_rel));
    return PyLong_FromUnsignedLongLong(
        atomic_fetch_add_explicit((_Atomic uint64_t *)p, (uint64_t)n, memory_order_acq_rel));
}

static PyObject *Words_gather(Words *self, PyObject *index) {
    Py_ssize_t n = PySequence_Size(index);
    if (n < 0)
        return NULL;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *item = PySequence_GetItem(index, j);
        void *p = item == NULL ? NULL : word_at(self, item);
        Py_XDECREF(item);
        PyObject *value = p == NULL ? NULL : load_word(self, p);
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SetItem(out, j, value); /* steals the reference */
    }
    return out;
}

static PyObject *Words_load_all(Words *self, PyObject *Py_UNUSED(ignored)) {
    if (self->base == 0) {
        PyErr_SetString(PyExc_ValueError, "operation forbidden on released ring memory");
        return NULL;
    }
    PyObject *out = PyList_New(self->count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < self->count; j++) {
        PyObject *value =
            load_word(self, (void *)(self->base + (uintptr_t)j * (uintptr_t)self->width));
        if (value == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SetItem(out, j, value);
    }
    return out;
}

static PyObject *Words_scatter(Words *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "scatter(index, values)");
        return NULL;
    }
    Py_ssize_t n = PySequence_Size(args[0]);
    if (n < 0)
        return NULL;
    if (PySequence_Size(args[1]) != n) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "scatter: index and values differ in length");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *item = PySequence_GetItem(args[0], j);
        void *p = item == NULL ? NULL : word_at(self, item);
        Py_XDECREF(item);
        if (p == NULL)
            return NULL;
        PyObject *value = PySequence_GetItem(args[1], j);
        int bad = value == NULL || store_word(self, p, value) < 0;
        Py_XDECREF(value);
        if (bad)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Words_clear(Words *self, PyObject *Py_UNUSED(ignored)) {
    if (self->base == 0) {
        PyErr_SetString(PyExc_ValueError, "operation forbidden on released ring memory");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < self->count; j++) {
        void *p = (void *)(self->base + (uintptr_t)j * (uintptr_t)self->width);
        if (self->width == 4)
            atomic_store_explicit((_Atomic uint32_t *)p, 0u, memory_order_release);
        else
            atomic_store_explicit((_Atomic uint64_t *)p, 0u, memory_order_release);
    }
    Py_RETURN_NONE;
}

static PyObject *Words_release(Words *self, PyObject *Py_UNUSED(ignored)) {
    self->base = 0;
    self->count = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t Words_len(Words *self) { return self->count; }

static PyObject *Words_get_released(Words *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->base == 0);
}

static PyMethodDef Words_methods[] = {
    {"load", (PyCFunction)Words_load, METH_O, "acquire load of word i"},
    {"store", (PyCFunction)(void (*)(void))Words_store, METH_FASTCALL,
     "release store of value into word i"},
    {"fetch_add", (PyCFunction)(void (*)(void))Words_fetch_add, METH_FASTCALL,
     "atomic add (acq_rel, wrapping) to word i; the old value"},
    {"gather", (PyCFunction)Words_gather, METH_O, "acquire loads of the words index[j]"},
    {"load_all", (PyCFunction)Words_load_all, METH_NOARGS, "acquire loads of every word"},
    {"scatter", (PyCFunction)(void (*)(void))Words_scatter, METH_FASTCALL,
     "release stores of values[j] into the words index[j], in order"},
    {"clear", (PyCFunction)Words_clear, METH_NOARGS, "release store of 0 into every word"},
    {"release", (PyCFunction)Words_release, METH_NOARGS,
     "forget the address (the memory may go)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Words_getset[] = {
    {"released", (getter)Words_get_released, NULL, "whether release() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Words_slots[] = {
    {Py_tp_doc, "Aligned shared words of a ring: acquire loads, release stores."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, Words_init},
    {Py_tp_methods, Words_methods},
    {Py_tp_getset, Words_getset},
    {Py_sq_length, Words_len},
    {0, NULL},
};

static PyType_Spec Words_spec = {
    "skbuild_cudaq.realtime.ring._atomics.Words",
    sizeof(Words),
    0,
    Py_TPFLAGS_DEFAULT,
    Words_slots,
};

static int atomics_exec(PyObject *module) {
    PyObject *type = PyType_FromSpec(&Words_spec);
    if (type == NULL)
        return -1;
    if (PyModule_AddObject(module, "Words", type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot atomics_slots[] = {
    {Py_mod_exec, atomics_exec},
    {0, NULL},
};

static struct PyModuleDef atomics_module = {
    PyModuleDef_HEAD_INIT,
    "_atomics",
    "The ring's shared words for the Python paths: acquire loads, release stores.",
    0,
    NULL,
    atomics_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__atomics(void) { return PyModuleDef_Init(&atomics_module); }
