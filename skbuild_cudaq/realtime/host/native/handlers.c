/* Handler calls: native host handlers (cudaq/realtime/host_handler.h) found and called
 * directly, and a Python handler's call from the serving loop, every outcome an answer. */
#include "internal.h"

/* ------------------------------------------------------------------------------------ */
/* Native host handlers: lookup and direct call                                            */
/* ------------------------------------------------------------------------------------ */
PyObject *native_host_export(PyObject *mod, PyObject *args) {
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

PyObject *native_call_handler(PyObject *mod, PyObject *args) {
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
  /* the result region, then its guard (RESULT_GUARD): a write past max_len is answered as
   * a result_len past it, and lands in the guard, not in memory of another's */
  PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)max_len + RESULT_GUARD);
  if (out == NULL)
    return NULL;
  cudaq_host_handler_t fn = (cudaq_host_handler_t)(uintptr_t)address;
  char *result = PyBytes_AsString(out);
  memset(result + max_len, GUARD_BYTE, RESULT_GUARD);
  uint32_t result_len = 0;
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = fn(data, (uint32_t)size, result, max_len, &result_len);
  Py_END_ALLOW_THREADS
  if (result_len > max_len ||
      !guard_intact((const uint8_t *)result + max_len, RESULT_GUARD_CHECKED)) {
    Py_DECREF(out);
    return Py_BuildValue("(iy#)", (int)STATUS_RESULT_TOO_LONG, "", (Py_ssize_t)0);
  }
  PyObject *value = Py_BuildValue("(iy#)", status, result, (Py_ssize_t)result_len);
  Py_DECREF(out);
  return value;
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
 * checked before anything is copied. The messages are host/dispatcher.py's. */
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
int32_t call_python(LoopObject *self, const entry_t *e, const uint8_t *args, uint32_t arg_len,
                    uint8_t *out, uint32_t max, uint32_t *out_len) {
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
