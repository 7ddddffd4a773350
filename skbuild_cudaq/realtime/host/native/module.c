/* The module skbuild_cudaq.realtime.host._native: its functions, its two types and its
 * constants (the files of the native core: internal.h). */
#include "internal.h"

/* ------------------------------------------------------------------------------------ */
/* The module                                                                             */
/* ------------------------------------------------------------------------------------ */
static PyMethodDef native_functions[] = {
    {"host_export", native_host_export, METH_VARARGS,
     "host_export(path, symbol, load) -> (address, name, version) | None"},
    {"call_handler", native_call_handler, METH_VARARGS,
     "call_handler(address, args, max_result_len) -> (status, bytes)"},
    {"watch_segment", native_watch_segment, METH_VARARGS,
     "watch_segment(name, address, size): a SIGBUS in the segment ends the process in one "
     "line naming it"},
    {"unwatch_segment", native_unwatch_segment, METH_O,
     "unwatch_segment(address): the segment at address is watched no more"},
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
      PyModule_AddIntConstant(module, "GRAPH_QUERY_NS", (long)GRAPH_QUERY_NS) < 0 ||
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
    "The host path's native core: serving loop, UDP feeder, native host handlers (host/native/).",
    0,
    native_functions,
    native_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&native_module); }
