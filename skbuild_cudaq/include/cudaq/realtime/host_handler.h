/* SPDX-License-Identifier: Apache-2.0
 *
 * cudaq/realtime/host_handler.h -- native host handlers (skbuild-cudaq).
 *
 * A native host handler is a C (or C++) function of an ordinary extension module
 * that the host path calls for a HOST_CALL entry, on its serving thread and
 * without the GIL. Its signature is the device handlers' one:
 *
 *     int name(const void *args, uint32_t arg_len,
 *              void *result, uint32_t max_result_len, uint32_t *result_len);
 *
 * `args` points at the request's `arg_len` argument bytes (read-only, valid for
 * the call); the handler writes at most `max_result_len` result bytes at `result`
 * and their number at `*result_len` (0 when it writes nothing), and returns the
 * response's status: 0 success, > 0 a status of the application's (keep them
 * below 0x7FFFFF00: the run time reserves the values above). A result length
 * above `max_result_len` is answered with the reserved status
 * CUDAQ_HOST_STATUS_RESULT_TOO_LONG and no result.
 *
 * Export it after its definition, at file scope, with a semicolon:
 *
 *     #include <cudaq/realtime/host_handler.h>
 *
 *     static int rpc_increment(const void *args, uint32_t arg_len, void *result,
 *                              uint32_t max_result_len, uint32_t *result_len) {
 *       if (arg_len > max_result_len) return 1;
 *       for (uint32_t i = 0; i < arg_len; ++i)
 *         ((uint8_t *)result)[i] = (uint8_t)(((const uint8_t *)args)[i] + 1);
 *       *result_len = arg_len;
 *       return 0;
 *     }
 *     CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(rpc_increment);
 *
 * and look it up from Python with
 * skbuild_cudaq.realtime.get_host_handler(module, "rpc_increment").
 *
 * The macro defines one exported record, `cudaq_host_handler_<name>` (a
 * cudaq_host_export_t), in the binary's dynamic symbol table: it has default
 * visibility whatever -fvisibility says, and a dynamic symbol survives `strip`,
 * `--gc-sections` (the exports of a shared object are kept) and
 * `cmake --install --strip`. A linker version script that exports only
 * PyInit_* hides it: export `cudaq_host_handler_*` there too.
 *
 * Plain C (C99 or newer) or C++11; no CUDA, no Python headers. The handler may be `static`.
 * It runs on the host path's serving thread while the client waits: keep it
 * short, never block, and do not call into Python (there is no GIL).
 */
#ifndef CUDAQ_REALTIME_HOST_HANDLER_H
#define CUDAQ_REALTIME_HOST_HANDLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The signature of a native host handler (the device handlers' one). */
typedef int (*cudaq_host_handler_t)(const void *args, uint32_t arg_len, void *result,
                                    uint32_t max_result_len, uint32_t *result_len);

/* The exported record: 'CUQH', the record's version, the handler, its name. */
#define CUDAQ_HOST_EXPORT_MAGIC 0x43555148u
#define CUDAQ_HOST_EXPORT_VERSION 1u
#define CUDAQ_HOST_EXPORT_PREFIX "cudaq_host_handler_"

typedef struct cudaq_host_export {
  uint32_t magic;   /* CUDAQ_HOST_EXPORT_MAGIC */
  uint32_t version; /* CUDAQ_HOST_EXPORT_VERSION */
  cudaq_host_handler_t handler;
  const char *name; /* the handler's name, as written in the macro */
} cudaq_host_export_t;

/* Statuses the host path answers with itself (the Python names in
 * skbuild_cudaq.realtime.host.dispatcher; applications keep theirs below 0x7FFFFF00). */
#define CUDAQ_HOST_STATUS_HANDLER_EXCEPTION 0x7FFFFF01
#define CUDAQ_HOST_STATUS_RESULT_TOO_LONG 0x7FFFFF02
#define CUDAQ_HOST_STATUS_BAD_HANDLER_RESULT 0x7FFFFF03
/* A graph handler (GRAPH_LAUNCH) the host path could not launch, or whose graph failed
 * on the GPU (the device path's CUDAQ_RPC_STATUS_GRAPH_LAUNCH_FAILED, the same value). */
#define CUDAQ_HOST_STATUS_GRAPH_LAUNCH_FAILED 0x7FFFFF04
/* A graph handler whose graph ended without publishing its response (cudaq_graph_publish). */
#define CUDAQ_HOST_STATUS_GRAPH_NOT_PUBLISHED 0x7FFFFF05

#ifdef __cplusplus
}
#define CUDAQ_HOST_EXPORT_LINKAGE extern "C"
#else
#define CUDAQ_HOST_EXPORT_LINKAGE
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CUDAQ_HOST_EXPORT_ATTRIBUTES __attribute__((visibility("default"), used))
#else
#define CUDAQ_HOST_EXPORT_ATTRIBUTES
#endif

/* A handler of another signature does not compile: C++ refuses the conversion in
 * the record's initializer; C (C11, GCC or Clang) asserts the type, since it would
 * only warn about the conversion. */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L &&       \
    (defined(__GNUC__) || defined(__clang__))
#define CUDAQ_HOST_EXPORT_CHECK(name)                                                            \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&name), cudaq_host_handler_t),         \
                 "CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(" #name "): the handler must be "          \
                 "int " #name "(const void *args, uint32_t arg_len, void *result, "              \
                 "uint32_t max_result_len, uint32_t *result_len)");
#else
#define CUDAQ_HOST_EXPORT_CHECK(name)
#endif

/* Exports the native host handler `name` (defined or declared above, with the
 * signature of cudaq_host_handler_t). Write a semicolon after it.
 *
 * The result contract: the handler writes at most `max_result_len` bytes at `result`,
 * never past them, and sets `*result_len` to at most `max_result_len`. The host path
 * hands the handler a result region of its own (not the ring), followed by a guard
 * it checks after each call: a handler that wrote past `max_result_len` (up to 4 KiB
 * past it is caught without harm to anything else) is answered
 * CUDAQ_HOST_STATUS_RESULT_TOO_LONG with no result, counted in handler_errors, and
 * named in last_handler_error ("<name>: wrote past its result region of
 * max_result_len = N bytes ..."); the request's slot and every other slot of the ring
 * stay as they were. A direct call from Python (NativeHostHandler.__call__) is
 * guarded the same way. Only the `*result_len` bytes are copied into the response. */
#define CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(name)                                                \
  CUDAQ_HOST_EXPORT_CHECK(name)                                                                  \
  CUDAQ_HOST_EXPORT_LINKAGE CUDAQ_HOST_EXPORT_ATTRIBUTES const cudaq_host_export_t              \
      cudaq_host_handler_##name = {CUDAQ_HOST_EXPORT_MAGIC, CUDAQ_HOST_EXPORT_VERSION, &name,    \
                                   #name}

#endif /* CUDAQ_REALTIME_HOST_HANDLER_H */
