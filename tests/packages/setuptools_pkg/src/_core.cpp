// The extension's host side: a plain CPython module. Its device code (the
// handlers in handlers.cu and the dispatch kernel) is what matters.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "setuptools_pkg/config.h"

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "_core", "CUDA-Q realtime handlers and a dispatch kernel.", -1,
    nullptr, nullptr, nullptr, nullptr, nullptr};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&core_module); }
