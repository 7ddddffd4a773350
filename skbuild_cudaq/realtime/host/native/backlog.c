/* The datagrams a transport holds while the ring is full (backlog_t in internal.h), served
 * fairly, and the fair shedding of what does not fit. A transport drains its socket in
 * batches whether or not the ring has room, so that the socket's own queue (first come,
 * first served, the newest dropped by the kernel when full, whoever sent it) never decides
 * who is served; what it cannot forward yet waits here, per source in arrival order. The
 * ring's free slots go to the sources in turn (round robin: one datagram a source a turn),
 * so a client with one request at a time waits for one turn of the sources, not behind a
 * flood. When the backlog is full, the source holding the most datagrams in it (the
 * arriving one counted) loses its newest (longest queue drop): a flood from a few sources
 * sheds its own requests. Sources are told apart by a 64-bit hash of address family, port
 * and address (a collision only merges two sources' shares). Called by one thread only (the
 * transport's); nothing here is shared. */
#include "internal.h"

#define NONE UINT32_MAX

/* FNV-1a over the family, the port and the address of `a` (the rest of the storage is
 * not part of the source). */
static uint64_t source_key(const struct sockaddr_storage *a) {
  const uint8_t *p = NULL;
  size_t n = 0;
  uint16_t port = 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)a;
    p = (const uint8_t *)&in->sin_addr;
    n = sizeof in->sin_addr;
    port = in->sin_port;
  } else if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)a;
    p = (const uint8_t *)&in6->sin6_addr;
    n = sizeof in6->sin6_addr;
    port = in6->sin6_port;
  }
  uint64_t h = 1469598103934665603ull;
  const uint32_t head = ((uint32_t)a->ss_family << 16) | port;
  for (int i = 0; i < 4; ++i)
    h = (h ^ ((head >> (8 * i)) & 0xFFu)) * 1099511628211ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int backlog_init(backlog_t *b, uint32_t capacity, uint32_t buffer_size) {
  memset(b, 0, sizeof *b);
  b->capacity = capacity;
  b->buffer_size = buffer_size;
  b->held = PyMem_Calloc(capacity ? capacity : 1, sizeof(held_t));
  b->sources = PyMem_Calloc(capacity ? capacity : 1, sizeof(source_t));
  b->data = PyMem_Malloc(((size_t)capacity ? capacity : 1) * buffer_size);
  if (b->held == NULL || b->sources == NULL || b->data == NULL)
    return -1;
  for (uint32_t i = 0; i < capacity; ++i)
    b->held[i].next = i + 1 < capacity ? i + 1 : NONE;
  b->free_list = capacity ? 0 : NONE;
  return 0;
}

void backlog_free(backlog_t *b) {
  PyMem_Free(b->held);
  PyMem_Free(b->sources);
  PyMem_Free(b->data);
  b->held = NULL;
  b->sources = NULL;
  b->data = NULL;
}

/* The index of the source of `key` in the table, or num_sources if it holds nothing. */
static uint32_t source_index(const backlog_t *b, uint64_t key) {
  uint32_t i = 0;
  while (i < b->num_sources && b->sources[i].key != key)
    ++i;
  return i;
}

/* Takes entry i (of source s) out of its source's list and frees it; a source left with
 * nothing leaves the table (the last one takes its place, the turn stays in range). */
static void remove_held(backlog_t *b, uint32_t s, uint32_t i) {
  source_t *src = &b->sources[s];
  held_t *h = &b->held[i];
  if (h->prev != NONE)
    b->held[h->prev].next = h->next;
  else
    src->head = h->next;
  if (h->next != NONE)
    b->held[h->next].prev = h->prev;
  else
    src->tail = h->prev;
  h->next = b->free_list;
  b->free_list = i;
  b->count--;
  if (--src->count == 0) {
    b->sources[s] = b->sources[--b->num_sources];
    if (b->turn >= b->num_sources)
      b->turn = 0;
  }
}

/* Frees room for one datagram of `key` in a full backlog: the newest datagram of the source
 * holding the most (`key`'s own arriving one counted) is shed. 1: room made; 0: the arriving
 * datagram is the one to shed. */
static int make_room(backlog_t *b, uint64_t key) {
  uint32_t longest = NONE, own = 0;
  for (uint32_t s = 0; s < b->num_sources; ++s) {
    if (b->sources[s].key == key)
      own = b->sources[s].count;
    if (longest == NONE || b->sources[s].count > b->sources[longest].count)
      longest = s;
  }
  if (longest == NONE || own + 1 >= b->sources[longest].count)
    return 0; /* the arriving datagram's source holds (with it) the most */
  remove_held(b, longest, b->sources[longest].tail);
  return 1;
}

int backlog_admit(backlog_t *b, const uint8_t *data, uint32_t len,
                  const struct sockaddr_storage *addr, socklen_t addr_len) {
  if (b->capacity == 0 || len > b->buffer_size)
    return 1;
  const uint64_t key = source_key(addr);
  int shed = 0;
  if (b->count == b->capacity) {
    if (!make_room(b, key))
      return 1; /* the arriving datagram is the one shed */
    shed = 1;
  }
  uint32_t s = source_index(b, key);
  if (s == b->num_sources) { /* a new source: its turn comes after those waiting */
    source_t *src = &b->sources[b->num_sources++];
    src->key = key;
    src->count = 0;
    src->head = src->tail = NONE;
  }
  source_t *src = &b->sources[s];
  const uint32_t i = b->free_list;
  held_t *h = &b->held[i];
  b->free_list = h->next;
  h->key = key;
  h->len = len;
  memcpy(&h->addr, addr, sizeof h->addr);
  h->addr_len = addr_len;
  memcpy(b->data + (size_t)i * b->buffer_size, data, len);
  h->prev = src->tail;
  h->next = NONE;
  if (src->tail != NONE)
    b->held[src->tail].next = i;
  else
    src->head = i;
  src->tail = i;
  src->count++;
  b->count++;
  return shed;
}

const held_t *backlog_next(const backlog_t *b, const uint8_t **data) {
  if (b->count == 0) /* the turn's source holds one at least */
    return NULL;
  const uint32_t i = b->sources[b->turn].head;
  *data = b->data + (size_t)i * b->buffer_size;
  return &b->held[i];
}

void backlog_pop(backlog_t *b) {
  if (b->count == 0)
    return;
  const uint32_t s = b->turn;
  const uint32_t left = b->sources[s].count - 1;
  remove_held(b, s, b->sources[s].head);
  if (left != 0) /* else the table's last source took this place: its turn is now */
    b->turn = (s + 1) % b->num_sources;
}
