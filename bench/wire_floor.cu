// The floors of bench/wire.py in plain C++ (CUDA for the GPU floor), adapted from the team's
// UDP probe. 64-byte datagrams (a 24-byte request header + 40 bytes), loopback.
//
//   echo N T F W    UDP echo: a server thread (recvfrom spinning, +1 per byte, sendto) and a
//                   client thread (blocking recv): the socket path's floor
//   gpu N T F W     UDP + GPU ring: the server thread puts each datagram into a mapped pinned
//                   slot and raises a flag, a persistent one-thread kernel answers (+1 per
//                   byte), the thread spins on the answer flag and sends it back: the device
//                   path's floor (built with nvcc only)
//   client HOST PORT FID N T F W
//                   the same client against another server (the test server): requests of
//                   function id FID whose answers must be +1 per argument byte, with the
//                   request id and timestamp echoed and status 0
//
// N round trips one at a time after W of warm-up, then T requests with at most F in flight.
// One JSON line: p50_us, p90_us, p99_us, mean_us, max_us, n, rps (the pipelined run's
// requests a second), lost (pipelined answers that never came).
//
// Built with -DWIRE_HANDLER_MODULE (Python's headers, skbuild-cudaq's include directory) it is
// the extension module `wire_handlers` instead: the native host handlers rpc_increment and echo
// for the test server's --module=wire_handlers and bench/wire.py's in-process rows, and the
// two-thread ring ping-pong floor (wire_ring_floor_start/stop, through ctypes): a C thread that
// echoes each request of a ring in the layout of skbuild_cudaq.realtime.ring, nothing else.
#include <cstdint>
#include <cstring>

#ifdef WIRE_HANDLER_MODULE
#include <Python.h>
#include <atomic>
#include <pthread.h>
#include <cudaq/realtime/host_handler.h>

static struct { uint8_t *base; uint32_t n, size; std::atomic<int> stop; pthread_t thread; } ring;

static void *ring_floor(void *) {
  uint8_t *rx = ring.base, *tx = ring.base + (size_t)ring.n * ring.size;
  uint32_t *rx_flags = (uint32_t *)(tx + (size_t)ring.n * ring.size), *tx_flags = rx_flags + ring.n;
  for (uint64_t k = 0;; ++k) {
    const uint32_t slot = (uint32_t)(k % ring.n), seq = (uint32_t)(k / ring.n + 1);
    while (__atomic_load_n(&rx_flags[slot], __ATOMIC_ACQUIRE) != seq)
      if (ring.stop.load(std::memory_order_relaxed)) return nullptr;
    const uint8_t *q = rx + (size_t)slot * ring.size; uint8_t *r = tx + (size_t)slot * ring.size;
    uint32_t h[4]; std::memcpy(h, q, 16);
    const uint32_t len = h[2] <= ring.size - 24 ? h[2] : 0, out[4] = {0x43555153u, 0, len, h[3]};
    std::memcpy(r, out, 16); std::memcpy(r + 16, q + 16, 8); std::memcpy(r + 24, q + 24, len);
    __atomic_store_n(&tx_flags[slot], seq, __ATOMIC_RELEASE);
  }
}
extern "C" __attribute__((visibility("default"))) int wire_ring_floor_start(uint8_t *base, uint32_t n, uint32_t size) {
  ring.base = base; ring.n = n; ring.size = size; ring.stop = 0;
  return pthread_create(&ring.thread, nullptr, ring_floor, nullptr);
}
extern "C" __attribute__((visibility("default"))) void wire_ring_floor_stop() { ring.stop = 1; pthread_join(ring.thread, nullptr); }

static int rpc_increment(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                         uint32_t *result_len) {
  if (arg_len > max_len) return 1;
  for (uint32_t i = 0; i < arg_len; ++i)
    static_cast<uint8_t *>(result)[i] = static_cast<uint8_t>(static_cast<const uint8_t *>(args)[i] + 1);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(rpc_increment);

static int echo(const void *args, uint32_t arg_len, void *result, uint32_t max_len,
                uint32_t *result_len) {
  if (arg_len > max_len) return 1;
  std::memcpy(result, args, arg_len);
  *result_len = arg_len;
  return 0;
}
CUDAQ_REALTIME_EXPORT_HOST_FUNCTION(echo);

static PyModuleDef wire_handlers_def = {PyModuleDef_HEAD_INIT, "wire_handlers", nullptr, -1,
                                        nullptr, nullptr, nullptr, nullptr, nullptr};
PyMODINIT_FUNC PyInit_wire_handlers() { return PyModule_Create(&wire_handlers_def); }

#else  // the floors
#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <thread>
#include <unistd.h>
#include <vector>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); std::exit(1); } } while (0)

struct Box { volatile uint32_t rx_flag; uint32_t pad0[15]; uint8_t rx[64]; volatile uint32_t tx_flag; uint32_t pad1[15]; uint8_t tx[64]; volatile int stop; };

__device__ __forceinline__ uint32_t ld_acq(const volatile uint32_t *p) { uint32_t v; asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void st_rel(volatile uint32_t *p, uint32_t v) { asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }

__global__ void echo_kernel(Box *b) {
  uint32_t seq = 0;
  while (true) {
    uint32_t f;
    while ((f = ld_acq(&b->rx_flag)) == seq) { if (*(volatile int *)&b->stop) return; }
    seq = f;
    for (int i = 0; i < 64; ++i) b->tx[i] = b->rx[i] + 1;
    st_rel(&b->tx_flag, seq);
  }
}
#endif

namespace {
constexpr int kDatagram = 64;

double now_us() { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int udp_bound(sockaddr_in *addr) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), big = 4 << 20;
  sockaddr_in a{}; a.sin_family = AF_INET; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || bind(s, (sockaddr *)&a, sizeof a) != 0) { std::perror("bind"); std::exit(1); }
  setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  socklen_t l = sizeof a; getsockname(s, (sockaddr *)&a, &l); *addr = a; return s;
}

// Request i: magic, function id, 40 argument bytes, request id i, timestamp 7000 + i, then 40
// argument bytes that depend on i.
void make_request(uint8_t *msg, uint32_t fid, uint32_t i) {
  const uint32_t head[4] = {0x43555152u, fid, 40u, i}; const uint64_t ts = 7000u + i;
  std::memcpy(msg, head, 16); std::memcpy(msg + 16, &ts, 8);
  for (int k = 24; k < kDatagram; ++k) msg[k] = static_cast<uint8_t>(i + k);
}

// Whether `in` (r bytes) answers request i: every argument byte + 1 and, from a project server
// (not raw), status 0, 40 bytes, the request id and the timestamp echoed.
bool answers(const uint8_t *in, ssize_t r, uint32_t i, bool raw) {
  uint8_t msg[kDatagram]; make_request(msg, 0, i);
  if (r != kDatagram) return false;
  for (int k = 24; k < kDatagram; ++k) if (in[k] != static_cast<uint8_t>(msg[k] + 1)) return false;
  if (raw) return true;
  int32_t st; uint32_t len, rid; uint64_t ts;
  std::memcpy(&st, in + 4, 4); std::memcpy(&len, in + 8, 4); std::memcpy(&rid, in + 12, 4); std::memcpy(&ts, in + 16, 8);
  return st == 0 && len == 40 && rid == i && ts == 7000u + i;
}

struct Result { std::vector<double> t; double rps = 0; long lost = 0; };

// n serial round trips after `warmup`, then `total` pipelined with `in_flight`.
Result client(int cs, const sockaddr_in &server, uint32_t fid, bool raw, int n, int total, int in_flight, int warmup) {
  Result res; res.t.reserve(n);
  uint8_t msg[kDatagram], in[2048];
  timeval limit{10, 0};  // a serial answer that does not come within 10 s fails the run
  setsockopt(cs, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  for (int i = 0; i < n + warmup; ++i) {
    make_request(msg, fid, (uint32_t)i);
    const double t0 = now_us();
    sendto(cs, msg, kDatagram, 0, (const sockaddr *)&server, sizeof server);
    const ssize_t r = recv(cs, in, sizeof in, 0);
    const double t1 = now_us();
    if (!answers(in, r, (uint32_t)i, raw)) { std::fprintf(stderr, "wrong answer to request %d (%zd bytes)\n", i, r); std::exit(1); }
    if (i >= warmup) res.t.push_back(t1 - t0);
  }
  timeval tv{1, 0};  // a pipelined answer that does not come within 1 s is lost
  setsockopt(cs, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const uint32_t base = (uint32_t)(n + warmup);
  int sent = 0, got = 0;
  const double t0 = now_us();
  while (got < total) {
    while (sent < total && sent - got < in_flight) {
      make_request(msg, fid, base + (uint32_t)sent++);
      sendto(cs, msg, kDatagram, 0, (const sockaddr *)&server, sizeof server);
    }
    const ssize_t r = recv(cs, in, sizeof in, 0);
    if (r < 0) break;
    uint32_t rid; std::memcpy(&rid, in + 12, 4);
    if (!raw && !answers(in, r, rid, raw)) { std::fprintf(stderr, "wrong pipelined answer\n"); std::exit(1); }
    ++got;
  }
  res.rps = got / ((now_us() - t0) * 1e-6); res.lost = sent - got;
  return res;
}

void report(Result r) {
  std::sort(r.t.begin(), r.t.end());
  const size_t n = r.t.size(); double sum = 0;
  for (double x : r.t) sum += x;
  std::printf("{\"p50_us\": %.4f, \"p90_us\": %.4f, \"p99_us\": %.4f, \"mean_us\": %.4f, \"max_us\": %.4f, "
              "\"n\": %zu, \"rps\": %.1f, \"lost\": %ld}\n",
              r.t[n / 2], r.t[n * 9 / 10], r.t[n * 99 / 100], sum / n, r.t[n - 1], n, r.rps, r.lost);
}

// A floor: its own server thread (with `gpu`, and kernel) and the client.
void floor_run(bool gpu, int n, int total, int in_flight, int warmup) {
  sockaddr_in saddr, caddr; const int ss = udp_bound(&saddr), cs = udp_bound(&caddr);
#ifdef __CUDACC__
  Box *b = nullptr;
  if (gpu) {
    CK(cudaHostAlloc(&b, sizeof(Box), cudaHostAllocMapped)); std::memset(b, 0, sizeof(Box));
    Box *db; CK(cudaHostGetDevicePointer(&db, b, 0)); echo_kernel<<<1, 1>>>(db); CK(cudaGetLastError());
  }
#else
  if (gpu) { std::fprintf(stderr, "the GPU floor needs a build with nvcc\n"); std::exit(2); }
#endif
  std::atomic<bool> done{false};
  std::thread server([&] {
    uint8_t buf[2048]; sockaddr_in from; socklen_t fl; uint32_t seq = 0; (void)seq;
    while (!done.load(std::memory_order_relaxed)) {
      fl = sizeof from;
      const ssize_t r = recvfrom(ss, buf, sizeof buf, MSG_DONTWAIT, (sockaddr *)&from, &fl);
      if (r <= 0) continue;
#ifdef __CUDACC__
      if (gpu) {
        std::memcpy(b->rx, buf, 64); ++seq; std::atomic_thread_fence(std::memory_order_release); b->rx_flag = seq;
        while (b->tx_flag != seq) {}
        std::atomic_thread_fence(std::memory_order_acquire); std::memcpy(buf, b->tx, 64);
      } else
#endif
        for (int i = 0; i < 64; ++i) buf[i] += 1;
      sendto(ss, buf, r, 0, (sockaddr *)&from, fl);
    }
  });
  Result res = client(cs, saddr, 0, true, n, total, in_flight, warmup);
  done = true; server.join();
#ifdef __CUDACC__
  if (gpu) { b->stop = 1; CK(cudaDeviceSynchronize()); CK(cudaFreeHost(b)); }
#endif
  close(ss); close(cs);
  report(std::move(res));
}
}  // namespace

int main(int argc, char **argv) {
  if (argc == 6 && (!std::strcmp(argv[1], "echo") || !std::strcmp(argv[1], "gpu"))) {
    floor_run(!std::strcmp(argv[1], "gpu"), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
    return 0;
  }
  if (argc == 9 && !std::strcmp(argv[1], "client")) {
    sockaddr_in caddr, sa{}; const int cs = udp_bound(&caddr);
    sa.sin_family = AF_INET; sa.sin_port = htons((uint16_t)std::atoi(argv[3])); inet_pton(AF_INET, argv[2], &sa.sin_addr);
    report(client(cs, sa, (uint32_t)std::strtoul(argv[4], nullptr, 0), false, std::atoi(argv[5]), std::atoi(argv[6]),
                  std::atoi(argv[7]), std::atoi(argv[8])));
    close(cs);
    return 0;
  }
  std::fprintf(stderr, "usage: %s echo|gpu N T F W | client HOST PORT FID N T F W\n", argv[0]);
  return 2;
}
#endif
