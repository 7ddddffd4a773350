/* Feeder: the UDP transport of the host path (UdpFeeder in udp.py), a producer of one ring.
 * A second transport is a file of its own beside this one, using the same ring view
 * (ring_from), wire header (read_header/write_header) and thread life cycle (life_t). */
#include "internal.h"

/* ------------------------------------------------------------------------------------ */
/* Feeder: UDP datagrams in, ring requests out, answers back (UdpFeeder)                   */
/* ------------------------------------------------------------------------------------ */
/* With requests in flight and no answer ready, the feeder watches the oldest one's response
 * flag this long before its next receive call: an answer is then sent as soon as it is
 * published instead of after a recvmmsg (a system call, ~0.5 us) that found nothing. */
#define FEEDER_ANSWER_SPIN_NS 10000ull
#define FEEDER_BUFFERS (4u << 20) /* receive buffers of one batch, at most */
/* The backlog (backlog.c): datagrams held while the ring is full, at most this many and
 * FEEDER_HELD_BYTES of them (about what the socket's own 4 MiB buffer holds). */
#define FEEDER_HELD 4096u
#define FEEDER_HELD_BYTES (16u << 20)

typedef struct {
  uint32_t peer_id; /* the peer's request id, put back into the answer */
  uint32_t ring_id; /* the id the request got in the ring */
  uint64_t timestamp;
  struct sockaddr_storage addr;
  socklen_t addr_len;
} inflight_t;

/* The counters of UdpFeeder (udp.py): every datagram received is forwarded, rejected
 * (answered by the feeder), dropped (shorter than a header), one of the two drops that are
 * never answered (the response magic; the feeder's own address), shed (a request the
 * backlog had no room for: see backlog.c), or held in the backlog for now. */
enum {
  C_RECEIVED,
  C_FORWARDED,
  C_ANSWERED,
  C_REJECTED,
  C_DROPPED,
  C_DROPPED_RESPONSES,
  C_DROPPED_OWN_ADDRESS,
  C_SEND_ERRORS,
  C_PROTOCOL_ERRORS,
  C_SHED,
  C_COUNT
};
static const char *const counter_names[C_COUNT] = {
    "received",          "forwarded",           "answered",    "rejected",        "dropped",
    "dropped_responses", "dropped_own_address", "send_errors", "protocol_errors", "shed",
};

typedef struct {
  PyObject_HEAD
  ring_t ring;
  PyObject *owner;
  int fd;
  life_t life;
  int life_ready;
  unsigned long long next; /* the producer's next request number */
  unsigned long long done; /* the oldest request not answered yet */
  unsigned long long idle_sleep_ns;
  unsigned long long answer_spin_ns; /* FEEDER_ANSWER_SPIN_NS (read at start()) */
  unsigned long long counters[C_COUNT];
  inflight_t *inflight; /* one per slot */
  struct sockaddr_storage self_addr;
  socklen_t self_len;
  uint32_t batch, buffer_size;
  uint8_t *buffers; /* batch * buffer_size */
  struct mmsghdr *rmsgs, *smsgs;
  struct iovec *riov, *siov; /* 1 a receive, 2 a send */
  struct sockaddr_storage *raddrs;
  uint8_t *sheads; /* 24 bytes a send */
  backlog_t backlog; /* requests received while the ring was full (the thread's only) */
  uint32_t held;     /* backlog.count, as counters() reads it (relaxed atomic) */
  int backlog_ready;
  char error[ERROR_TEXT];
} FeederObject;

static int feeder_init(PyObject *self_obj, PyObject *args, PyObject *kwds) {
  FeederObject *self = (FeederObject *)self_obj;
  int fd = -1;
  unsigned long long address = 0;
  unsigned int num_slots = 0, slot_size = 0;
  PyObject *owner = NULL;
  static char *kwlist[] = {"fd", "address", "num_slots", "slot_size", "owner", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "iKIIO", kwlist, &fd, &address, &num_slots,
                                   &slot_size, &owner))
    return -1;
  if (self->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Feeder: already initialised");
    return -1;
  }
  if (fd < 0) {
    PyErr_SetString(PyExc_ValueError, "Feeder: not a socket");
    return -1;
  }
  if (ring_from(&self->ring, address, num_slots, slot_size, "Feeder") < 0)
    return -1;
  self->fd = fd;
  self->buffer_size = slot_size < 65536u ? slot_size + 1 : 65536u; /* +1: "longer than a slot" */
  uint32_t batch = FEEDER_BUFFERS / self->buffer_size;
  batch = batch < 1 ? 1 : batch;
  batch = batch > FEEDER_BATCH ? FEEDER_BATCH : batch;
  self->batch = batch;
  self->answer_spin_ns = FEEDER_ANSWER_SPIN_NS;
  self->inflight = PyMem_Calloc(num_slots, sizeof(inflight_t));
  self->buffers = PyMem_Malloc((size_t)batch * self->buffer_size);
  self->rmsgs = PyMem_Calloc(batch, sizeof(struct mmsghdr));
  self->smsgs = PyMem_Calloc(batch, sizeof(struct mmsghdr));
  self->riov = PyMem_Calloc(batch, sizeof(struct iovec));
  self->siov = PyMem_Calloc(2 * (size_t)batch, sizeof(struct iovec));
  self->raddrs = PyMem_Calloc(batch, sizeof(struct sockaddr_storage));
  self->sheads = PyMem_Calloc(batch, HEADER_SIZE);
  if (!self->inflight || !self->buffers || !self->rmsgs || !self->smsgs || !self->riov ||
      !self->siov || !self->raddrs || !self->sheads) {
    PyErr_NoMemory();
    return -1;
  }
  uint32_t held = FEEDER_HELD_BYTES / self->buffer_size;
  held = held > FEEDER_HELD ? FEEDER_HELD : held;
  self->backlog_ready = 1;
  if (backlog_init(&self->backlog, held, self->buffer_size) < 0) {
    PyErr_NoMemory();
    return -1;
  }
  Py_INCREF(owner);
  self->owner = owner;
  life_init(&self->life);
  self->life_ready = 1;
  return 0;
}

static int is_loopback(const struct sockaddr_storage *a) {
  if (a->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
  if (a->ss_family == AF_INET6) {
    const struct in6_addr *ip = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(ip) || (IN6_IS_ADDR_V4MAPPED(ip) && ip->s6_addr[12] == 127);
  }
  return 0;
}

/* Whether `from` is the feeder's own address: its address and port, or, bound to every
 * interface, its port on a loopback address (its other addresses are caught by the
 * response-magic rule: the feeder only ever sends answers). */
static int is_self(const FeederObject *f, const struct sockaddr_storage *from) {
  if (from->ss_family != f->self_addr.ss_family)
    return 0;
  if (from->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)from;
    const struct sockaddr_in *s = (const struct sockaddr_in *)&f->self_addr;
    if (a->sin_port != s->sin_port)
      return 0;
    return a->sin_addr.s_addr == s->sin_addr.s_addr ||
           (s->sin_addr.s_addr == htonl(INADDR_ANY) && is_loopback(from));
  }
  if (from->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)from;
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&f->self_addr;
    if (a->sin6_port != s->sin6_port)
      return 0;
    return memcmp(&a->sin6_addr, &s->sin6_addr, sizeof s->sin6_addr) == 0 ||
           (IN6_IS_ADDR_UNSPECIFIED(&s->sin6_addr) && is_loopback(from));
  }
  return 0;
}

static int recv_batch(int fd, struct mmsghdr *msgs, unsigned int n) {
#ifdef __linux__
  return recvmmsg(fd, msgs, n, MSG_DONTWAIT, NULL);
#else
  unsigned int got = 0;
  for (; got < n; ++got) {
    ssize_t r = recvmsg(fd, &msgs[got].msg_hdr, MSG_DONTWAIT);
    if (r < 0)
      return got ? (int)got : -1;
    msgs[got].msg_len = (unsigned int)r;
  }
  return (int)got;
#endif
}

/* Sends msgs[0..n); a message the socket refuses is counted and skipped. */
static void send_batch(FeederObject *f, struct mmsghdr *msgs, unsigned int n) {
  unsigned int sent = 0;
  while (sent < n) {
#ifdef __linux__
    const int r = sendmmsg(f->fd, msgs + sent, n - sent, MSG_DONTWAIT);
#else
    const int r = sendmsg(f->fd, &msgs[sent].msg_hdr, MSG_DONTWAIT) < 0 ? -1 : 1;
#endif
    if (r > 0) {
      sent += (unsigned int)r;
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else {
      BUMP(&f->counters[C_SEND_ERRORS]); /* e.g. a full send buffer, an unreachable peer */
      sent += 1;
    }
  }
}

static void feeder_fail(FeederObject *f, const char *fmt, ...) {
  char buf[ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  set_text(&f->life, f->error, "%s", buf);
  STORE_RLX(&f->life.stop, 1);
}

/* Sends every answer that is ready, in ring order; returns how many requests it finished. */
static unsigned int feeder_answers(FeederObject *f) {
  ring_t *r = &f->ring;
  unsigned int finished = 0, n = 0;
  while (f->done < f->next) {
    const uint64_t k = f->done;
    const uint32_t slot = slot_of(r, k);
    if (LOAD_ACQ(&r->tx_flags[slot]) != seq_of(r, k))
      break;
    inflight_t *in = &f->inflight[slot];
    const uint8_t *resp = r->tx + (size_t)slot * r->slot_size;
    header_t h;
    read_header(resp, &h); /* magic, status, result_len, request id, timestamp */
    f->done = k + 1;
    ++finished;
    if (h.magic != RESPONSE_MAGIC || h.arg_len > r->max_payload || h.request_id != in->ring_id ||
        h.timestamp != in->timestamp) {
      BUMP(&f->counters[C_PROTOCOL_ERRORS]); /* not the answer to what was sent: dropped */
      continue;
    }
    uint8_t *head = f->sheads + (size_t)n * HEADER_SIZE;
    write_header(head, RESPONSE_MAGIC, (int32_t)h.function_id, h.arg_len, in->peer_id,
                 h.timestamp);
    struct iovec *iov = &f->siov[2 * (size_t)n];
    iov[0].iov_base = head;
    iov[0].iov_len = HEADER_SIZE;
    iov[1].iov_base = (void *)(resp + HEADER_SIZE);
    iov[1].iov_len = h.arg_len;
    struct msghdr *m = &f->smsgs[n].msg_hdr;
    memset(m, 0, sizeof *m);
    m->msg_name = &in->addr;
    m->msg_namelen = in->addr_len;
    m->msg_iov = iov;
    m->msg_iovlen = h.arg_len ? 2 : 1;
    BUMP(&f->counters[C_ANSWERED]); /* counted before the peer can see it */
    if (++n == f->batch) {
      send_batch(f, f->smsgs, n);
      n = 0;
    }
  }
  if (n)
    send_batch(f, f->smsgs, n);
  return finished;
}

/* How many of the next `want` requests may go into their slots now (the claim of
 * skbuild_cudaq.realtime.ring: both flags of a slot at seq - 1). -1: the ring broke the
 * protocol (the feeder stops with the reason). */
static int feeder_claimable(FeederObject *f, uint32_t want) {
  ring_t *r = &f->ring;
  for (uint32_t i = 0; i < want; ++i) {
    const uint64_t k = f->next + i;
    const uint32_t slot = slot_of(r, k), prev = seq_of(r, k) - 1;
    const uint32_t rx = LOAD_ACQ(&r->rx_flags[slot]), tx = LOAD_ACQ(&r->tx_flags[slot]);
    if (rx != prev) {
      feeder_fail(f,
                  "slot %u: request flag %u, expected %u: another producer wrote to the ring "
                  "(one producer at a time: the feeder's ring client is the feeder's)",
                  slot, rx, prev);
      return -1;
    }
    if (tx == prev)
      continue;
    if (tx == prev - 1) /* an earlier client's request, not answered yet: wait for it */
      return (int)i;
    feeder_fail(f,
                "slot %u: response flag %u while its request flag is %u: a response nobody "
                "asked for (two producers on one ring, or a consumer out of step)",
                slot, tx, prev);
    return -1;
  }
  return (int)want;
}

/* Forwards the valid request `data` (from `addr`) into the ring's next slot: the header
 * with the ring's own request id, the arguments without padding. The slot's claim is checked
 * again right before (it was when the round began, but a datagram received since may have
 * been sent after another producer wrote there): 1 forwarded; 0 the slot is not free yet
 * (nothing written); -1 the ring broke the protocol (the feeder stops with the reason). */
static int forward(FeederObject *f, const uint8_t *data, const struct sockaddr_storage *addr,
                   socklen_t addr_len) {
  const int claimable = feeder_claimable(f, 1);
  if (claimable <= 0)
    return claimable;
  ring_t *r = &f->ring;
  header_t h;
  read_header(data, &h);
  const uint64_t k = f->next;
  const uint32_t slot = slot_of(r, k);
  const uint64_t id64 = r->ids[0];
  r->ids[0] = id64 + 1;
  inflight_t *in = &f->inflight[slot];
  in->peer_id = h.request_id;
  in->ring_id = (uint32_t)id64;
  in->timestamp = h.timestamp;
  memcpy(&in->addr, addr, sizeof in->addr);
  in->addr_len = addr_len;
  uint8_t *req = r->rx + (size_t)slot * r->slot_size;
  write_header(req, h.magic, (int32_t)h.function_id, h.arg_len, in->ring_id, h.timestamp);
  memcpy(req + HEADER_SIZE, data + HEADER_SIZE, h.arg_len);
  BUMP(&f->counters[C_FORWARDED]);
  f->next = k + 1;
  STORE_REL(&r->rx_flags[slot], seq_of(r, k));
  return 1;
}

/* Handles a batch of `n` received datagrams: forwards (into at most *can claimed slots),
 * holds, sheds, answers or drops each. */
static void feeder_datagrams(FeederObject *f, unsigned int n, int *can) {
  ring_t *r = &f->ring;
  unsigned int replies = 0;
  for (unsigned int i = 0; i < n; ++i) {
    const struct msghdr *m = &f->rmsgs[i].msg_hdr;
    const uint8_t *data = f->buffers + (size_t)i * f->buffer_size;
    const uint32_t size = f->rmsgs[i].msg_len;
    const int truncated = (m->msg_flags & MSG_TRUNC) != 0;
    BUMP(&f->counters[C_RECEIVED]);
    if (is_self(f, &f->raddrs[i])) { /* nothing of the feeder's own can be a request */
      BUMP(&f->counters[C_DROPPED_OWN_ADDRESS]);
      continue;
    }
    if (size < HEADER_SIZE) { /* no header: no answer possible */
      BUMP(&f->counters[C_DROPPED]);
      continue;
    }
    header_t h;
    read_header(data, &h);
    if (h.magic == RESPONSE_MAGIC) { /* an answer is never answered: no loops between servers */
      BUMP(&f->counters[C_DROPPED_RESPONSES]);
      continue;
    }
    if (truncated || size > r->slot_size || size - HEADER_SIZE < h.arg_len) {
      BUMP(&f->counters[C_REJECTED]);
      uint8_t *head = f->sheads + (size_t)replies * HEADER_SIZE;
      write_header(head, RESPONSE_MAGIC,
                   h.magic != REQUEST_MAGIC ? STATUS_BAD_MAGIC : STATUS_ARGS_TOO_LONG, 0,
                   h.request_id, h.timestamp);
      struct iovec *iov = &f->siov[2 * (size_t)replies];
      iov->iov_base = head;
      iov->iov_len = HEADER_SIZE;
      struct msghdr *sm = &f->smsgs[replies].msg_hdr;
      memset(sm, 0, sizeof *sm);
      sm->msg_name = &f->raddrs[i];
      sm->msg_namelen = m->msg_namelen;
      sm->msg_iov = iov;
      sm->msg_iovlen = 1;
      ++replies;
      continue;
    }
    /* A request: into the ring while it has a claimed slot and nothing waits before it,
     * else held in the backlog (or shed, when it is full) */
    const int forwarded =
        *can > 0 && f->backlog.count == 0 ? forward(f, data, &f->raddrs[i], m->msg_namelen) : 0;
    if (forwarded < 0)
      break; /* the feeder stops */
    if (forwarded) {
      --*can;
      continue;
    }
    *can = 0; /* (the slot was not free after all: what follows waits too) */
    if (backlog_admit(&f->backlog, data, size, &f->raddrs[i], m->msg_namelen))
      BUMP(&f->counters[C_SHED]);
  }
  STORE_RLX(&f->held, f->backlog.count);
  if (replies)
    send_batch(f, f->smsgs, replies);
}

/* Forwards what the backlog holds, the sources in turn, into at most *can claimed slots. */
static int forward_held(FeederObject *f, int *can) {
  int forwarded = 0;
  const uint8_t *data;
  for (const held_t *h; *can > 0 && (h = backlog_next(&f->backlog, &data)) != NULL; --*can) {
    if (forward(f, data, &h->addr, h->addr_len) <= 0) {
      *can = 0; /* not free after all (or the feeder stops): it stays held */
      break;
    }
    backlog_pop(&f->backlog);
    forwarded = 1;
  }
  STORE_RLX(&f->held, f->backlog.count);
  return forwarded;
}

/* One receive call of up to a batch of datagrams into the receive buffers: how many came
 * (-1 with errno set). */
static int receive(FeederObject *f) {
  for (uint32_t i = 0; i < f->batch; ++i) {
    f->riov[i].iov_base = f->buffers + (size_t)i * f->buffer_size;
    f->riov[i].iov_len = f->buffer_size;
    struct msghdr *m = &f->rmsgs[i].msg_hdr;
    memset(m, 0, sizeof *m);
    m->msg_name = &f->raddrs[i];
    m->msg_namelen = sizeof f->raddrs[i];
    m->msg_iov = &f->riov[i];
    m->msg_iovlen = 1;
  }
  return recv_batch(f->fd, f->rmsgs, f->batch);
}

static void *feeder_thread(void *arg) {
  FeederObject *f = (FeederObject *)arg;
  ring_t *r = &f->ring;
  name_thread("cudaq-udp-feed");
  const uint64_t idle_sleep = f->idle_sleep_ns, answer_spin = f->answer_spin_ns;
  if (idle_sleep)
    tight_timer_slack();
  life_set(&f->life, STATE_RUNNING);
  uint64_t idle_start = 0;
  while (!LOAD_RLX(&f->life.stop)) {
    int progressed = feeder_answers(f) != 0;
    if (!progressed && f->done < f->next && answer_spin) {
      const uint64_t k = f->done;
      const uint32_t *flag = &r->tx_flags[slot_of(r, k)], seq = seq_of(r, k);
      uint64_t until = 0;
      for (uint32_t spins = 1; LOAD_ACQ(flag) != seq; ++spins) {
        if ((spins & 63u) == 0) {
          const uint64_t t = now_ns();
          if (until == 0)
            until = t + answer_spin;
          else if (t >= until || LOAD_RLX(&f->life.stop))
            break;
        }
      }
      progressed = feeder_answers(f) != 0;
    }
    const uint32_t free_slots = r->num_slots - (uint32_t)(f->next - f->done);
    int can = 0; /* slots claimed for this round */
    if (free_slots) {
      const uint32_t want = free_slots < f->batch ? free_slots : f->batch;
      can = feeder_claimable(f, want);
      if (can < 0)
        break;
    }
    progressed |= forward_held(f, &can); /* what waits goes first */
    /* The socket is drained a batch at a time whether or not the ring has room: what does
     * not fit waits in the backlog, and a full backlog sheds fairly (backlog.c). */
    const int got = receive(f);
    if (got > 0) {
      feeder_datagrams(f, (unsigned int)got, &can);
      progressed = 1;
    } else if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
               errno != ECONNREFUSED && errno != EHOSTUNREACH && errno != ENETUNREACH) {
      feeder_fail(f, "cannot receive from the socket: %s", strerror(errno));
      break;
    }
    if (progressed) {
      idle_start = 0;
    } else if (idle_sleep && f->next == f->done) {
      /* nothing in flight: after a while, wait on the socket instead of spinning */
      const uint64_t t = now_ns();
      if (idle_start == 0) {
        idle_start = t;
      } else if (t - idle_start >= IDLE_SPIN_NS) {
        struct pollfd p = {f->fd, POLLIN, 0};
        const uint64_t ms = idle_sleep / 1000000ull;
        poll(&p, 1, ms == 0 ? 1 : (ms > 10 ? 10 : (int)ms));
      }
    }
  }
  life_set(&f->life, STATE_IDLE);
  return NULL;
}

/* start(next) -> bool: start at request number `next` of the ring (the ring client's
 * position); requests still in flight from before are kept when it is the feeder's own. */
static PyObject *feeder_start(PyObject *self_obj, PyObject *arg) {
  FeederObject *f = (FeederObject *)self_obj;
  if (!f->life_ready) {
    PyErr_SetString(PyExc_RuntimeError, "Feeder: not initialised");
    return NULL;
  }
  const unsigned long long next = PyLong_AsUnsignedLongLong(arg);
  if (next == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  if (life_state(&f->life) != STATE_IDLE)
    Py_RETURN_FALSE;
  if (next != f->next) /* the ring client was used since: what was in flight is not ours */
    f->done = f->next = next;
  f->self_len = sizeof f->self_addr;
  if (getsockname(f->fd, (struct sockaddr *)&f->self_addr, &f->self_len) != 0)
    return PyErr_SetFromErrno(PyExc_OSError);
  f->error[0] = '\0';
  /* No reference for the thread: it never touches Python; the dealloc stops and waits. */
  if (life_launch(&f->life, feeder_thread, f) < 0)
    return NULL;
  Py_RETURN_TRUE;
}

static PyObject *feeder_stop(PyObject *self_obj, PyObject *arg) {
  return life_stop(&((FeederObject *)self_obj)->life, arg);
}

static PyObject *feeder_counters(PyObject *self_obj, PyObject *unused) {
  (void)unused;
  FeederObject *f = (FeederObject *)self_obj;
  PyObject *d = PyDict_New();
  if (d == NULL)
    return NULL;
  for (int i = 0; i <= C_COUNT; ++i) { /* and the datagrams held in the backlog now */
    PyObject *v = PyLong_FromUnsignedLongLong(i < C_COUNT ? LOAD_RLX(&f->counters[i])
                                                          : (unsigned long long)LOAD_RLX(&f->held));
    if (v == NULL || PyDict_SetItemString(d, i < C_COUNT ? counter_names[i] : "held", v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(d);
      return NULL;
    }
    Py_DECREF(v);
  }
  return d;
}

static PyObject *feeder_get_running(PyObject *self_obj, void *closure) {
  (void)closure;
  FeederObject *f = (FeederObject *)self_obj;
  return PyBool_FromLong(f->life_ready && life_state(&f->life) != STATE_IDLE);
}

static PyObject *feeder_get_error(PyObject *self_obj, void *closure) {
  (void)closure;
  FeederObject *f = (FeederObject *)self_obj;
  if (!f->life_ready)
    Py_RETURN_NONE;
  return get_text(&f->life, f->error);
}

static void feeder_dealloc(PyObject *self_obj) {
  FeederObject *f = (FeederObject *)self_obj;
  if (f->life_ready) {
    /* The thread never takes the GIL: wait for it here, then nothing uses the ring. */
    STORE_RLX(&f->life.stop, 1);
    Py_BEGIN_ALLOW_THREADS
    while (life_wait(&f->life, STATE_STARTING, -1.0) != STATE_IDLE)
      life_wait(&f->life, STATE_RUNNING, -1.0);
    Py_END_ALLOW_THREADS
    life_destroy(&f->life);
  }
  Py_CLEAR(f->owner);
  PyMem_Free(f->inflight);
  PyMem_Free(f->buffers);
  PyMem_Free(f->rmsgs);
  PyMem_Free(f->smsgs);
  PyMem_Free(f->riov);
  PyMem_Free(f->siov);
  PyMem_Free(f->raddrs);
  PyMem_Free(f->sheads);
  if (f->backlog_ready)
    backlog_free(&f->backlog);
  PyTypeObject *tp = Py_TYPE(self_obj);
  freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  tp_free(self_obj);
  Py_DECREF(tp);
}

static PyMethodDef feeder_methods[] = {
    {"start", feeder_start, METH_O, "start(next) -> bool: start the feeder thread at request next"},
    {"stop", feeder_stop, METH_O, "stop(timeout) -> bool: whether the thread is gone"},
    {"counters", feeder_counters, METH_NOARGS, "counters() -> dict of the feeder's counters"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef feeder_members[] = {
    {"next", T_ULONGLONG, offsetof(FeederObject, next), READONLY,
     "the producer's next request number"},
    {"done", T_ULONGLONG, offsetof(FeederObject, done), READONLY,
     "the oldest request not answered yet"},
    {"batch", T_UINT, offsetof(FeederObject, batch), READONLY,
     "datagrams a recvmmsg/sendmmsg takes at most"},
    {"idle_sleep_ns", T_ULONGLONG, offsetof(FeederObject, idle_sleep_ns), 0,
     "0: spin while serving; else wait on the socket when idle (read at start())"},
    {"answer_spin_ns", T_ULONGLONG, offsetof(FeederObject, answer_spin_ns), 0,
     "how long to watch for an answer before the next receive call (read at start())"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef feeder_getset[] = {
    {"running", feeder_get_running, NULL, "whether the feeder thread runs", NULL},
    {"error", feeder_get_error, NULL, "why the thread stopped on its own, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot feeder_slots[] = {
    {Py_tp_doc, (void *)"Feeder(fd, address, num_slots, slot_size, owner): a UDP socket "
                        "feeding one ring (UdpFeeder)."},
    {Py_tp_init, (void *)feeder_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)feeder_dealloc},
    {Py_tp_methods, (void *)feeder_methods},
    {Py_tp_members, (void *)feeder_members},
    {Py_tp_getset, (void *)feeder_getset},
    {0, NULL},
};

PyType_Spec feeder_spec = {
    "skbuild_cudaq.realtime.host._native.Feeder",
    sizeof(FeederObject),
    0,
    Py_TPFLAGS_DEFAULT,
    feeder_slots,
};
