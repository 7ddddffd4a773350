#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cxx20_defs/config.h>

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "cxx20_defs", nullptr, 0,
                             nullptr, nullptr, nullptr, nullptr, nullptr};
PyMODINIT_FUNC PyInit_cxx20_defs(void) {
  PyObject *m = PyModule_Create(&module);
  if (m != nullptr && PyModule_AddIntConstant(m, "MAGIC", CXX20_DEFS_MAGIC) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
