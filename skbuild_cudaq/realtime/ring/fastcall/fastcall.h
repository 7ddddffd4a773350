/* fastcall.h: what the files of the compiled ring client share (nothing here is public).
 *
 * The compiled round trip of RingClient.call (skbuild_cudaq/realtime/ring/client.py).
 *
 * One request, one slot, no ticket: the same protocol steps and checks as the
 * Python fast path of RingClient.call (see the module docstring of
 * skbuild_cudaq.realtime.ring), in C, so that a round trip from Python costs one
 * call into C instead of tens of bytecodes. Python's limited API (3.10): one
 * abi3 module for every CPython from 3.10. One module of several C files, one job each
 * (cmake/FastClient.cmake lists them): this header (the Ring object, the wire constants,
 * the benchmarks' trace points); round_trip.c (the round trip: Ring.call, call_next() and
 * its stamped and traced forms, remember()); ring.c (the Ring type: init, attach(),
 * shut()); client.c (the module's `call`, RingClient.call itself); module.c.
 *
 *   Ring(address, num_slots, slot_size, max_payload)
 *       a view of one ring allocation at `address` (the caller keeps the memory
 *       alive and stops using the Ring before it goes; RingClient does both).
 *   Ring.call_next(function, payload) -> (status, result) | int | None | False
 *       what RingClient.call runs first: Ring.call for request `next` (an attribute:
 *       the client's next request number, kept here) with the function id of
 *       `function` as remember() last gave it and the spin of `spin_ns` (an
 *       attribute), if the slot holds no ticket of the client (the list given to
 *       attach()). A tuple counts the response in `collected` (an attribute); a
 *       tuple or an int advances `next`. False: `function` is not the one
 *       remembered (nothing was written: the caller computes its id, remembers it
 *       and calls again); None as below, and also before attach().
 *   Ring.call_next_stamped(function, payload) -> (out, written_ns, seen_ns)
 *       call_next() with two clock reads: before the request is written, after its
 *       response flag is seen (for measurements; call() never stamps).
 *   Ring.call_next_traced(function, payload) -> (out, (entry, ..., built))
 *       call_next() with a clock read at each of its steps (trace_t; benchmarks).
 *   Ring.remember(function, function_id), Ring.attach(pending)
 *       the function id call_next() uses for `function` (compared by identity),
 *       and the client's list of tickets (one item a slot, None where free).
 *   Ring.call(k, function_id, payload, spin_ns) -> (status, result) | int | None
 *       None:   slot k % num_slots is not free for request k (its flags are not
 *               both seq - 1) or the payload does not fit: nothing was written;
 *               the caller takes its general path, which waits or raises.
 *       (status, result): request k was written, published and answered, and the
 *               response passed every check (magic, result_len, request id and
 *               timestamp echoed).
 *       int (the request id): request k was written and published, but its
 *               response did not come within spin_ns nanoseconds of spinning, or
 *               came and failed a check; the caller makes a ticket of it and
 *               waits (or raises the protocol error) the general way.
 *
 *   call(client, function, payload=b"", *, timeout=...)  (the module's `call`)
 *       RingClient.call itself: a method descriptor the class takes as its `call`,
 *       so that `client.call(...)` enters C with no Python frame. It runs
 *       client._compiled.call_next(function, payload) where the client has a
 *       compiled Ring, and returns its tuple; anything else (False, None or a
 *       request id) goes to client._call_continue(function, payload, out[,
 *       timeout]), and a client without a Ring (pure Python) or a call with other
 *       arguments than these goes to client._call_python(*args, **kwargs), the
 *       Python method of the same signature (which also raises its TypeErrors), and
 *       so does a `timeout` other than None or a plain float or int >= 0: the Python
 *       method checks it (and refuses a bad one before anything is written).
 *
 * Memory order: the request bytes, then a release store of the request flag;
 * an acquire load of the response flag, then the response bytes (the device
 * pairs these with ld.acquire.sys / st.release.sys). Correct on any host CPU,
 * not only on x86-TSO.
 *
 * ThreadSanitizer (tools/sanitize.sh --thread) sees these atomics, but not the flag loads
 * and stores of the client's Python path (plain numpy accesses, ordered by x86-TSO: see the
 * ring's module docstring). A round trip done with a slot's response tells it so
 * (slot_released): the slot's next request, whichever path publishes it, comes after.
 *
 * The spin holds the GIL, as the Python spin it replaces does; it is bounded by
 * spin_ns (the caller's general path then waits with a backoff that sleeps). With
 * `release_gil` (HostDispatcher.client(): the consumer is a thread of this process that
 * needs the GIL for Python handlers) it spins without the GIL.
 */
#ifndef SKBUILD_CUDAQ_FASTCALL_H
#define SKBUILD_CUDAQ_FASTCALL_H

#ifndef SKBUILD_CUDAQ_FULL_API /* set by cmake/FastClient.cmake where there is no stable ABI */
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define REQUEST_MAGIC 0x43555152u
#define RESPONSE_MAGIC 0x43555153u
#define HEADER_SIZE 24u

typedef struct {
  PyObject_HEAD
  uint8_t *base;
  uint32_t num_slots;
  uint32_t slot_size;
  uint32_t max_payload;
  uint32_t *rx_flags;
  uint32_t *tx_flags;
  uint64_t *ids;
  uint8_t *tx_slots;
  /* call_next()'s state: the client's next request number and its count of
   * responses read, its tickets (a list, one item a slot), the last function and
   * its id, the spin bound. */
  unsigned long long next;
  unsigned long long collected;
  unsigned long long spin_ns;
  PyObject *pending;
  PyObject *last_function;
  uint32_t last_fid;
  int prefetch_response; /* 1: fetch the response's first line while spinning (the default) */
  int release_gil;       /* 1: spin without the GIL (a consumer of this process needs it) */
  /* shut(): `closing` tells a round trip spinning without the GIL to stop; `waiting` is 1
   * from before a round trip lets the GIL go until it is done with the ring's memory, the
   * GIL held again (both set and cleared with the GIL held; read by the other side) */
  int closing;
  int waiting;
} RingObject;

#if defined(__SANITIZE_THREAD__)
#define RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RING_TSAN 1
#endif
#endif
#ifdef RING_TSAN
void __tsan_release(void *addr);
#endif

/* The round trip is done with its slot's response (`rx_flag`: the slot's request flag). For
 * ThreadSanitizer only (nothing in other builds): a release of what it did in the slot to
 * whoever acquires that flag next -- the consumer, once the slot's next request is published.
 * This module publishes with a release store, which ThreadSanitizer sees; the client's
 * Python path with a plain numpy store (a release on x86-TSO), which it cannot. */
static inline void slot_released(uint32_t *rx_flag) {
#ifdef RING_TSAN
  __tsan_release(rx_flag);
#else
  (void)rx_flag;
#endif
}

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The benchmarks' clock reads of a round trip (Ring.call_next_stamped and
 * call_next_traced): CLOCK_MONOTONIC ns at these points, 0 where not reached. A
 * stamped call reads the clock at TRACE_WRITTEN and TRACE_SEEN only, a traced call at
 * every point; call() reads it at none. */
enum {
  TRACE_ENTRY,     /* call_next() entered */
  TRACE_CLAIMED,   /* the slot claimed, the request id taken */
  TRACE_WRITTEN,   /* before the request is written */
  TRACE_PUBLISHED, /* its flag stored */
  TRACE_SEEN,      /* the response flag seen */
  TRACE_CHECKED,   /* the response header read and checked */
  TRACE_BUILT,     /* the result objects built */
  TRACE_POINTS
};
typedef struct {
  uint64_t t[TRACE_POINTS];
  int every; /* 0: TRACE_WRITTEN and TRACE_SEEN only */
} trace_t;
#define TRACE(trace, point)                                                                     \
  do {                                                                                           \
    if ((trace) != NULL && ((trace)->every || (point) == TRACE_WRITTEN || (point) == TRACE_SEEN)) \
      (trace)->t[(point)] = now_ns();                                                            \
  } while (0)

/* ------------------------------------------------------------------------------------ */
/* Shared between the files (each documented where it is defined)                        */
/* ------------------------------------------------------------------------------------ */
/* round_trip.c */
PyObject *ring_call(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs);
PyObject *call_next(RingObject *self, PyObject *function, PyObject *payload, trace_t *trace);
PyObject *ring_call_next(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs);
PyObject *ring_call_next_stamped(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs);
PyObject *ring_call_next_traced(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs);
PyObject *ring_remember(PyObject *self_obj, PyObject *const *args, Py_ssize_t nargs);
/* ring.c */
extern PyType_Spec ring_spec;
/* client.c */
extern PyTypeObject *ring_type;
extern PyObject *str_compiled, *str_call_continue, *str_call_python;
extern PyMethodDef client_call_def;

#endif /* SKBUILD_CUDAQ_FASTCALL_H */
