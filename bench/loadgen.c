/* Native load generator for the host ring (bench/common.py compiles it with gcc at bench time;
 * the benchmarks call it through ctypes), so that the host side is not the bottleneck of a round
 * trip or of throughput. It writes the ring layout of DEVELOPING.md directly: request k goes to
 * slot k % num_slots with sequence k / num_slots + 1; the request bytes are written first, then
 * rx_flags[slot] = seq (release); the response is complete once tx_flags[slot] == seq
 * (acquire). `*next` is the ring's request counter, kept by the caller across calls (0 after a
 * reset). Times come from clock_gettime(CLOCK_MONOTONIC) (vDSO, ~20 ns). Every wait has a
 * deadline. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#define REQ_MAGIC 0x43555152u
#define RESP_MAGIC 0x43555153u
#define HEADER 24u
#define TIMEOUT_NS 5000000000ull

typedef struct {
  uint8_t *rx, *tx;
  volatile uint32_t *rx_flags, *tx_flags;
  uint32_t num_slots, slot_size;
} ring_t;

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ring_t ring_of(uint8_t *base, uint32_t num_slots, uint32_t slot_size) {
  ring_t r;
  size_t slots = (size_t)num_slots * slot_size;
  r.rx = base;
  r.tx = base + slots;
  r.rx_flags = (volatile uint32_t *)(base + 2 * slots);
  r.tx_flags = (volatile uint32_t *)(base + 2 * slots + 4u * num_slots);
  r.num_slots = num_slots;
  r.slot_size = slot_size;
  return r;
}

static inline void submit(const ring_t *r, uint64_t k, uint32_t function_id, const uint8_t *args,
                          uint32_t arg_len) {
  uint32_t slot = (uint32_t)(k % r->num_slots);
  uint32_t seq = (uint32_t)(k / r->num_slots + 1);
  uint8_t *p = r->rx + (size_t)slot * r->slot_size;
  uint32_t head[4] = {REQ_MAGIC, function_id, arg_len, (uint32_t)k};
  uint64_t ptp = k;
  memcpy(p, head, 16);
  memcpy(p + 16, &ptp, 8);
  memcpy(p + HEADER, args, arg_len);
  __atomic_store_n(&r->rx_flags[slot], seq, __ATOMIC_RELEASE);
}

/* Waits for the response to request k; 0 ok, -1 timeout, -2 bad response. */
static inline int await(const ring_t *r, uint64_t k, uint32_t arg_len, int check) {
  uint32_t slot = (uint32_t)(k % r->num_slots);
  uint32_t seq = (uint32_t)(k / r->num_slots + 1);
  uint64_t spins = 0, deadline = 0;
  while (__atomic_load_n(&r->tx_flags[slot], __ATOMIC_ACQUIRE) != seq) {
    if ((++spins & 0xffff) == 0) {
      uint64_t t = now_ns();
      if (deadline == 0)
        deadline = t + TIMEOUT_NS;
      else if (t > deadline)
        return -1;
    }
  }
  if (check) {
    const uint8_t *p = r->tx + (size_t)slot * r->slot_size;
    uint32_t head[4];
    memcpy(head, p, 16);
    if (head[0] != RESP_MAGIC || head[1] != 0 || head[2] != arg_len || head[3] != (uint32_t)k)
      return -2;
  }
  return 0;
}

/* Serial round trips: one request in flight; out_ns[i] = round trip of request i (from before
 * its bytes are written to when its response flag is seen; the response is checked after the
 * clock stops). With max_gap_ns, a pause drawn uniformly from [0, max_gap_ns] (xorshift, fixed
 * seed; not timed) comes before each request, so that requests arrive at every phase of the
 * consumer's poll loop instead of at the one a back-to-back ping-pong locks into (a poll of
 * mapped host memory samples the flag once per PCIe round trip). */
int lg_latency(uint8_t *base, uint32_t num_slots, uint32_t slot_size, uint32_t function_id,
               const uint8_t *args, uint32_t arg_len, uint64_t count, uint64_t max_gap_ns,
               uint64_t *next, double *out_ns) {
  ring_t r = ring_of(base, num_slots, slot_size);
  uint64_t k = *next, x = 0x9e3779b97f4a7c15ull;
  for (uint64_t i = 0; i < count; ++i, ++k) {
    if (max_gap_ns) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const uint64_t until = now_ns() + x % (max_gap_ns + 1);
      while (now_ns() < until) {
      }
    }
    uint64_t t0 = now_ns();
    submit(&r, k, function_id, args, arg_len);
    int rc = await(&r, k, arg_len, 0);
    uint64_t t1 = now_ns();
    if (rc != 0) {
      *next = k;
      return rc;
    }
    out_ns[i] = (double)(t1 - t0);
    if (await(&r, k, arg_len, 1) != 0) { /* checked outside the timed part */
      *next = k + 1;
      return -2;
    }
  }
  *next = k;
  return 0;
}

/* `count` requests with up to `in_flight` outstanding (<= num_slots); *seconds = wall time. */
int lg_throughput(uint8_t *base, uint32_t num_slots, uint32_t slot_size, uint32_t function_id,
                  const uint8_t *args, uint32_t arg_len, uint64_t count, uint32_t in_flight,
                  uint64_t *next, double *seconds) {
  ring_t r = ring_of(base, num_slots, slot_size);
  if (in_flight == 0 || in_flight > num_slots)
    return -3;
  uint64_t first = *next, sent = first, done = first, end = first + count;
  uint64_t t0 = now_ns();
  while (done < end) {
    while (sent < end && sent - done < in_flight) {
      submit(&r, sent, function_id, args, arg_len);
      ++sent;
    }
    int rc = await(&r, done, arg_len, 1);
    if (rc != 0) {
      *next = sent;
      return rc;
    }
    ++done;
  }
  *seconds = (double)(now_ns() - t0) * 1e-9;
  *next = sent;
  return 0;
}
