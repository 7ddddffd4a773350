/* The thread life cycle shared by Loop and Feeder (see life_t in internal.h), the error
 * texts a thread shares with its owner, and sleeping and naming a thread. */
#include "internal.h"

void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

void name_thread(const char *name) {
#ifdef __linux__
  pthread_setname_np(pthread_self(), name);
#else
  (void)name;
#endif
}

/* A thread that may sleep wakes on time: the default timer slack adds ~50 us a sleep. */
void tight_timer_slack(void) {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
}

/* fork() copies a life, not its thread. Bumped in the child of every fork() (pthread_atfork,
 * registered once by the module): a life made in an earlier generation belongs to threads of
 * the parent (see life_forked). */
unsigned long fork_generation;
void on_fork_child(void) { ++fork_generation; }

static void life_sync_init(life_t *l) {
  pthread_mutex_init(&l->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cv, &attr);
  pthread_condattr_destroy(&attr);
  l->generation = fork_generation;
}

void life_init(life_t *l) {
  life_sync_init(l);
  l->state = STATE_IDLE;
  l->stop = 0;
  l->thread_ref = NULL;
}

/* In the child of a fork(), a life of the parent's: its thread does not exist here, so the
 * life is idle again (else stop() would wait for it in vain and a Feeder's dealloc for ever),
 * its mutex and condition variable made anew (a thread of the parent may have held them at
 * the fork), and the thread's reference to its object dropped (only calls from Python, with
 * the GIL, find a life of an earlier generation: the parent's threads are not here). The
 * exception: the fork was made by the life's own thread (from a handler), which goes on. */
static void life_forked(life_t *l) {
  if (l->generation == fork_generation)
    return;
  life_sync_init(l);
  if (l->state == STATE_IDLE || pthread_equal(pthread_self(), l->thread))
    return;
  PyObject *ref = l->thread_ref;
  l->state = STATE_IDLE;
  l->stop = 0;
  l->thread_ref = NULL;
  Py_XDECREF(ref);
}

void life_lock(life_t *l) {
  life_forked(l);
  pthread_mutex_lock(&l->mu);
}

void life_destroy(life_t *l) {
  life_forked(l);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
}

void life_set(life_t *l, int state) {
  life_lock(l);
  l->state = state;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

int life_state(life_t *l) {
  life_lock(l);
  const int s = l->state;
  pthread_mutex_unlock(&l->mu);
  return s;
}

/* Waits (without the GIL: call it between Py_BEGIN/END_ALLOW_THREADS) until the state is
 * not `while_state`, at most `timeout` seconds (< 0: no limit); returns the state. */
int life_wait(life_t *l, int while_state, double timeout) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  if (!(timeout < 1e9)) /* infinite, NaN or decades: no limit (and no overflow below) */
    timeout = -1.0;
  if (timeout >= 0) {
    const double whole = (double)(long long)timeout;
    until.tv_sec += (time_t)whole;
    until.tv_nsec += (long)((timeout - whole) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec += 1;
      until.tv_nsec -= 1000000000L;
    }
  }
  life_lock(l);
  while (l->state == while_state) {
    if (timeout < 0) {
      pthread_cond_wait(&l->cv, &l->mu);
    } else if (pthread_cond_timedwait(&l->cv, &l->mu, &until) == ETIMEDOUT) {
      break;
    }
  }
  const int s = l->state;
  pthread_mutex_unlock(&l->mu);
  return s;
}

/* Start fn(arg) on a detached thread of `l` and wait, without the GIL, until it has left
 * STATE_STARTING. -1 with OSError set (the state back to STATE_IDLE) if it cannot start. */
int life_launch(life_t *l, void *(*fn)(void *), void *arg) {
  STORE_RLX(&l->stop, 0);
  life_set(l, STATE_STARTING);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int rc = pthread_create(&l->thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    life_set(l, STATE_IDLE);
    errno = rc;
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  Py_BEGIN_ALLOW_THREADS
  life_wait(l, STATE_STARTING, -1.0);
  Py_END_ALLOW_THREADS
  return 0;
}

/* An error text shared by a thread and its owner (under the life's mutex). */
void set_text(life_t *l, char *text, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  life_lock(l);
  memcpy(text, buf, sizeof buf);
  pthread_mutex_unlock(&l->mu);
}

/* The loop's last error (last_handler_error): what its handler calls and graph workers
 * report, set under the life's mutex like every shared text. */
void record_error(LoopObject *self, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_text(&self->life, self->last_error, "%s", buf);
}

PyObject *get_text(life_t *l, const char *text) {
  char buf[ERROR_TEXT];
  life_lock(l);
  memcpy(buf, text, sizeof buf);
  pthread_mutex_unlock(&l->mu);
  buf[ERROR_TEXT - 1] = '\0';
  if (buf[0] == '\0')
    Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}


/* stop(timeout) -> True once the thread is gone (or was never there), False if it still
 * runs after `timeout` seconds (its handler has not returned); timeout < 0: no limit. */
PyObject *life_stop(life_t *l, PyObject *arg) {
  const double timeout = PyFloat_AsDouble(arg);
  if (timeout == -1.0 && PyErr_Occurred())
    return NULL;
  STORE_RLX(&l->stop, 1);
  if (life_state(l) == STATE_IDLE)
    Py_RETURN_TRUE;
  if (pthread_equal(pthread_self(), l->thread)) /* from a handler: it stops after it */
    Py_RETURN_TRUE;
  int state;
  Py_BEGIN_ALLOW_THREADS
  state = life_wait(l, STATE_RUNNING, timeout);
  if (state == STATE_STARTING)
    state = life_wait(l, STATE_STARTING, -1.0) == STATE_IDLE ? STATE_IDLE : STATE_RUNNING;
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(state == STATE_IDLE);
}
