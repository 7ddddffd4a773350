/* The module skbuild_cudaq.realtime.ring._fastcall: the Ring type and `call` (the files of
 * the compiled ring client: fastcall.h). */
#include "fastcall.h"

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
    "The compiled round trip of RingClient.call (see ring/fastcall/).",
    0,
    NULL,
    fastcall_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastcall(void) { return PyModuleDef_Init(&fastcall_module); }
