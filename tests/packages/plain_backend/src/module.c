#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "plain_backend", NULL, 0,
                             NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_plain_backend(void) { return PyModule_Create(&module); }
