// SPDX-License-Identifier: Apache-2.0
//
// example_app._core: the extension module whose binary carries the device code
// (handlers compiled by nvcc with -rdc, the dispatch kernel embedded by
// skbuild-cudaq). Its host side only describes what the binary holds; the run
// time (skbuild_cudaq.realtime) reads the device code from the module's file.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace {

const char *const kHandlers[] = {"rpc_increment", "echo", "block_reverse"};
const char *const kDispatchKernels[] = {"single_thread_dispatcher", "cooperative_grid_dispatcher",
                                        "warp_parallel_dispatcher", "cluster_dispatcher"};

PyObject *names(const char *const *items, Py_ssize_t count) {
  PyObject *tuple = PyTuple_New(count);
  if (tuple == nullptr)
    return nullptr;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject *item = PyUnicode_FromString(items[i]);
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, i, item);
  }
  return tuple;
}

int core_exec(PyObject *module) {
  PyObject *handlers = names(kHandlers, sizeof(kHandlers) / sizeof(kHandlers[0]));
  if (handlers == nullptr || PyModule_AddObject(module, "HANDLERS", handlers) < 0) {
    Py_XDECREF(handlers);
    return -1;
  }
  PyObject *kernels = names(kDispatchKernels, sizeof(kDispatchKernels) / sizeof(kDispatchKernels[0]));
  if (kernels == nullptr || PyModule_AddObject(module, "DISPATCH_KERNELS", kernels) < 0) {
    Py_XDECREF(kernels);
    return -1;
  }
  return 0;
}

PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, reinterpret_cast<void *>(core_exec)},
    {0, nullptr},
};

PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    "_core",
    "Device code of example_app: RPC handlers (HANDLERS) and dispatch kernels "
    "(DISPATCH_KERNELS), linked at run time by skbuild_cudaq.realtime.",
    0,
    nullptr,
    core_slots,
    nullptr,
    nullptr,
    nullptr,
};

} // namespace

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&core_module); }
