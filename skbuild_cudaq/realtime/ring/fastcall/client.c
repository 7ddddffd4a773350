/* call(client, ...): RingClient.call itself, entering C with no Python frame, and its way
 * back to the client's Python methods (see fastcall.h). */
#include "fastcall.h"

/* What client_call needs, made once by fastcall_exec: the Ring type and the names it
 * looks up on the client. */
PyTypeObject *ring_type;
PyObject *str_compiled, *str_call_continue, *str_call_python;

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

PyMethodDef client_call_def = {
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
