/* Native host handlers: C functions the host path calls on its serving thread, without
 * the GIL (skbuild-cudaq's <cudaq/realtime/host_handler.h>). The module needs no CUDA. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include <cudaq/realtime/host_handler.h>

/* Adds one to each byte (the example handler of the device path, on the host). */
static int rpc_increment(const void *args, uint32_t arg_len, void *result,
                         uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len > max_result_len)
    return 1; /* a status of the application's */
  const uint8_t *in = (const uint8_t *)args;
  uint8_t *out = (uint8_t *)result;
  for (uint32_t i = 0; i < arg_len; ++i)
    out[i] = (uint8_t)(in[i] + 1);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(rpc_increment);

/* Returns its arguments. */
static int echo(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                uint32_t *result_len) {
  if (arg_len > max_result_len)
    return 1;
  memcpy(result, args, arg_len);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(echo);

/* The sum of the argument bytes as a little-endian u32; status 2 without arguments. */
static int checksum(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                    uint32_t *result_len) {
  if (arg_len == 0)
    return 2;
  if (max_result_len < 4)
    return 1;
  uint32_t sum = 0;
  for (uint32_t i = 0; i < arg_len; ++i)
    sum += ((const uint8_t *)args)[i];
  memcpy(result, &sum, 4);
  *result_len = 4;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(checksum);

/* A Python function of the module (not a native host handler). */
static PyObject *handler_names(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return Py_BuildValue("(sss)", "rpc_increment", "echo", "checksum");
}

static PyMethodDef methods[] = {
    {"handler_names", handler_names, METH_NOARGS, "The native host handlers it exports."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_handlers",
                                    "Native host handlers (see handlers.c).", -1, methods};

PyMODINIT_FUNC PyInit__handlers(void) { return PyModule_Create(&module); }
