#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hs", NULL, 0, NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__hs(void) { return PyModule_Create(&module); }
