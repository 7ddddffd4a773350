// SPDX-License-Identifier: Apache-2.0
// _odl: the Python module. Its CUDA runtime entry points (odl_*, in scale.cu) are
// called through ctypes by the tests.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyModuleDef odl_module = {PyModuleDef_HEAD_INIT, "_odl", nullptr, 0, nullptr};

PyMODINIT_FUNC PyInit__odl(void) { return PyModule_Create(&odl_module); }
