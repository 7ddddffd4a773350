#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyModuleDef module = {PyModuleDef_HEAD_INIT, "space_path", NULL, 0,
                             NULL, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit_space_path(void) { return PyModule_Create(&module); }
