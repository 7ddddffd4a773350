#include <nanobind/nanobind.h>

#include <cudaq/realtime/host_handler.h>

// A native host handler in a nanobind module: hidden visibility, --gc-sections and nanobind's
// strip of Release builds, and still found by get_host_handler.
static int nb_add_one(const void *args, uint32_t arg_len, void *result, uint32_t max_result_len,
                      uint32_t *result_len) {
  if (arg_len > max_result_len)
    return 1;
  for (uint32_t i = 0; i < arg_len; ++i)
    static_cast<uint8_t *>(result)[i] = static_cast<uint8_t>(static_cast<const uint8_t *>(args)[i] + 1);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(nb_add_one);

NB_MODULE(_nb, m) { m.def("answer", []() { return 42; }); }
