#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_core", NULL, 0,
                             NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
