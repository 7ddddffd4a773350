/* A shared ring segment truncated under the process. A ring in a shared-memory segment
 * (/dev/shm) is a mapping of a file that any process of the same user may shrink
 * (ftruncate): the next access of the pages past its new end raises SIGBUS, which would
 * kill the server without a word, in whichever thread touched the ring (the serving
 * thread, the feeder, a handler). watch_segment(name, address, size) installs, once, a
 * SIGBUS handler that recognises a fault inside a watched segment and ends the process
 * with one line naming the segment on stderr and exit status 1 (the test server's status
 * for a failure while serving); a SIGBUS anywhere else goes on to the handler that was
 * there before (or the default action). The memory's contents cannot be trusted any more
 * once shrunk, so there is nothing to survive into: the line says what happened and where.
 *
 * The handler reads only the table below, written under the GIL and published entry by
 * entry (the `size` last, with a release store; the handler acquires it), and calls only
 * write() and _exit(), both async-signal-safe. */
#include "internal.h"

#include <signal.h>
#include <unistd.h>

#define MAX_SEGMENTS 16
#define SEGMENT_LINE 256

typedef struct {
  uintptr_t address;
  size_t size; /* 0: a free entry (atomic) */
  char line[SEGMENT_LINE];
  size_t line_len;
} segment_t;

static segment_t segments[MAX_SEGMENTS];
static struct sigaction previous;
static int installed;

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  const uintptr_t at = (uintptr_t)info->si_addr;
  for (int i = 0; i < MAX_SEGMENTS; ++i) {
    const size_t size = __atomic_load_n(&segments[i].size, __ATOMIC_ACQUIRE);
    if (size != 0 && at - segments[i].address < size) {
      ssize_t unused = write(STDERR_FILENO, segments[i].line, segments[i].line_len);
      (void)unused;
      _exit(1);
    }
  }
  /* not ours: as if this handler had never been installed */
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != NULL) {
      previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
             previous.sa_handler != NULL) {
    previous.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL); /* the fault happens again on return: the default action */
}

/* watch_segment(name, address, size) -> bool: a SIGBUS inside [address, address + size) ends
 * the process with one line naming `name` (see above); False: MAX_SEGMENTS are watched
 * already, and this one is not. */
PyObject *native_watch_segment(PyObject *mod, PyObject *args) {
  (void)mod;
  const char *name;
  unsigned long long address, size;
  if (!PyArg_ParseTuple(args, "sKK", &name, &address, &size))
    return NULL;
  if (address == 0 || size == 0) {
    PyErr_SetString(PyExc_ValueError, "watch_segment: a null address or an empty segment");
    return NULL;
  }
  int free_entry = -1;
  for (int i = 0; i < MAX_SEGMENTS && free_entry < 0; ++i)
    if (__atomic_load_n(&segments[i].size, __ATOMIC_RELAXED) == 0)
      free_entry = i;
  if (free_entry < 0) /* MAX_SEGMENTS mapped at once: this one is not watched */
    Py_RETURN_FALSE;
  if (!installed) {
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_sigbus;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&act.sa_mask);
    if (sigaction(SIGBUS, &act, &previous) != 0)
      return PyErr_SetFromErrno(PyExc_OSError);
    installed = 1;
  }
  segment_t *s = &segments[free_entry];
  const int n = snprintf(s->line, sizeof s->line,
                         "skbuild-cudaq: the shared ring segment %s was truncated by another "
                         "process while in use (SIGBUS): stopping\n",
                         name);
  s->line_len = n < 0 ? 0 : ((size_t)n < sizeof s->line ? (size_t)n : sizeof s->line - 1);
  if (s->line_len > 0 && s->line[s->line_len - 1] != '\n')
    s->line[s->line_len - 1] = '\n'; /* cut short: still one line */
  s->address = (uintptr_t)address;
  __atomic_store_n(&s->size, (size_t)size, __ATOMIC_RELEASE);
  Py_RETURN_TRUE;
}

/* unwatch_segment(address): the segment at `address` is no longer watched (it is unmapped). */
PyObject *native_unwatch_segment(PyObject *mod, PyObject *arg) {
  (void)mod;
  const unsigned long long address = PyLong_AsUnsignedLongLong(arg);
  if (address == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  for (int i = 0; i < MAX_SEGMENTS; ++i)
    if (__atomic_load_n(&segments[i].size, __ATOMIC_RELAXED) != 0 &&
        segments[i].address == (uintptr_t)address)
      __atomic_store_n(&segments[i].size, (size_t)0, __ATOMIC_RELEASE);
  Py_RETURN_NONE;
}
