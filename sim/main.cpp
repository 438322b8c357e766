/// ncclinsp-sim: simulates an N-node x G-GPU LLM training job driving an NCCL profiler plugin through the
/// real ABI (see sim/README.md for the workload, bandwidth model and fault injection).
///
/// Process model: the parent forks one child per node (re-exec of itself with a hidden --node-index), each
/// with its own NCCLINSP_NODE_NAME / NCCL_INSPECTOR_DUMP_DIR / NCCLINSP_CUDA_DRIVER; `--single-process`
/// runs every rank in one process. Per rank: a user thread (enqueue) and a proxy thread (KernelCh events at
/// the simulated GPU end time), connected by a small SPSC queue.

#include "nccl_driver.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#ifndef NCCLINSP_SIMCUDA_DEFAULT_PATH
#define NCCLINSP_SIMCUDA_DEFAULT_PATH ""
#endif

namespace {

using namespace ncclinsp::sim;
namespace fs = std::filesystem;
using u64 = std::uint64_t;

constexpr std::size_t mib = 1024 * 1024;

// ---- deterministic hashing -------------------------------------------------------------------------
constexpr u64 splitmix(u64 x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr u64 mix(u64 a, u64 b) noexcept { return splitmix(a ^ splitmix(b)); }
u64 hash_str(const std::string& s) noexcept {
  u64 h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return splitmix(h);
}
/// Uniform in [-1, 1].
double unit_jitter(u64 h) noexcept { return double(h >> 11) / double(1ull << 52) - 1.0; }

// ---- configuration ------------------------------------------------------------------------------
struct window {
  double t0 = 0, t1 = 0;
  bool active(double t) const noexcept { return t >= t0 && t < t1; }
};
struct net_degrade { double pct = 0; window w; };
struct slow_host { int node = 0; double pct = 0; window w; };
struct hang { int rank = 0; double t = 0; };

struct options {
  std::string plugin;
  int abi = 0;
  int nodes = 2, gpus = 4;
  double duration = 0;
  int steps = 0;
  double speed = 1;
  std::string out;
  std::string node_prefix = "node";
  std::string cuda_driver;
  std::string summary;
  bool prom = false;
  bool single_process = false;
  int node_index = -1;
  long long start_wall_ns = 0;
  bool purge_inflight = false;
  bool user_tags = false;
  bool sym_kernels = false;
  bool ce_colls = false;
  bool pxn = false;
  int mask_override = -1;
  bool verbose = false;
  u64 seed = 1;
  std::vector<net_degrade> degrades;
  std::vector<slow_host> slows;
  std::vector<hang> hangs;
};

bool parse_window(const std::string& s, window& w) {
  const auto dash = s.find('-');
  if (dash == std::string::npos) return false;
  try {
    w.t0 = std::stod(s.substr(0, dash));
    w.t1 = std::stod(s.substr(dash + 1));
  } catch (...) {
    return false;
  }
  return w.t1 > w.t0 && w.t0 >= 0;
}

// ---- workload model ---------------------------------------------------------------------------
enum class comm_kind : std::uint8_t { tp, fsdp, dp, pp };
constexpr const char* kind_name(comm_kind k) {
  switch (k) {
    case comm_kind::tp: return "tp";
    case comm_kind::fsdp: return "fsdp";
    case comm_kind::dp: return "dp";
    case comm_kind::pp: return "pp";
  }
  return "?";
}

constexpr double nvlink_busbw = 360e9;   // bytes/s
constexpr double network_busbw = 45e9;   // bytes/s per GPU
constexpr double nvlink_latency = 8e-6;  // s
constexpr double network_latency = 20e-6;
constexpr double jitter_frac = 0.02;
constexpr double nominal_tflops = 310.0;
constexpr double degraded_tflops = 268.0;  // at --net-degrade 50

struct sim_op {
  comm_kind comm;
  nccl_func func;
  nccl_dtype dtype;
  std::size_t bytes;  ///< per-rank payload bytes (AG: send, RS: recv, AR: buffer, P2P: message)
  const char* algo;
  const char* proto;
  std::uint8_t n_channels;
  int channel_lo = -1;
  std::uint64_t tag = 0;
  bool sym = false;
  bool ce = false;
  int p2p_dir = 0;  ///< +1 send to next node, -1 recv from previous node
};
struct sim_group {
  double compute_frac;  ///< share of the step's compute time before this group
  std::vector<sim_op> ops;
  bool first_step_only = false;
};

std::vector<sim_group> build_program(const options& o) {
  const std::size_t ag = 32 * mib, ar_tp = 32 * mib, ar_dp = 128 * mib;
  auto tag = [&](u64 t) { return o.user_tags ? t : 0; };
  std::vector<sim_group> g;
  g.push_back({0.0, {{comm_kind::fsdp, nccl_func::broadcast, nccl_dtype::bfloat16, 4096, "RING", "LL", 1, -1, tag(9)}}, true});
  g.push_back({0.10, {{comm_kind::fsdp, nccl_func::all_gather, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(1)},
                      {comm_kind::fsdp, nccl_func::all_gather, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(1)}}});
  g.push_back({0.15, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, ar_tp, "NVLS", "SIMPLE", 16, -1, tag(2)}}});
  {
    sim_op small{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, 1 * mib, "RING", "LL", 2, -1, tag(2)};
    small.sym = o.sym_kernels;
    g.push_back({0.15, {small}});
  }
  if (o.nodes > 1) {
    sim_op send{comm_kind::pp, nccl_func::send, nccl_dtype::bfloat16, 8 * mib, "", "", 2, -1};
    send.p2p_dir = +1;
    sim_op recv{comm_kind::pp, nccl_func::recv, nccl_dtype::bfloat16, 8 * mib, "", "", 2, -1};
    recv.p2p_dir = -1;
    g.push_back({0.05, {send, recv}});
  }
  g.push_back({0.25, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, ar_tp, "NVLS", "SIMPLE", 16, -1, tag(2)}}});
  g.push_back({0.15, {{comm_kind::fsdp, nccl_func::reduce_scatter, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(3)},
                      {comm_kind::fsdp, nccl_func::reduce_scatter, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(3)}}});
  if (o.nodes > 1)
    g.push_back({0.10, {{comm_kind::dp, nccl_func::all_reduce, nccl_dtype::float32, ar_dp, "TREE", "SIMPLE", 16, -1, tag(4)}}});
  g.push_back({0.05, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::uint8, 128 * 1024, "RING", "LL", 1, -1, tag(5)}}});
  if (o.ce_colls) {
    sim_op ce{comm_kind::tp, nccl_func::all_gather, nccl_dtype::bfloat16, 1 * mib, "", "", 0, -1, tag(6)};
    ce.ce = true;
    g.push_back({0.0, {ce}});
  }
  // Drop ops whose communicator would have one rank (NCCL emits nothing for nRanks == 1).
  for (auto& grp : g)
    std::erase_if(grp.ops, [&](const sim_op& op) {
      const int n = op.comm == comm_kind::tp ? o.gpus : op.comm == comm_kind::fsdp ? o.nodes * o.gpus : o.nodes;
      return n < 2;
    });
  std::erase_if(g, [](const sim_group& grp) { return grp.ops.empty(); });
  return g;
}

int comm_size(const options& o, comm_kind k) {
  switch (k) {
    case comm_kind::tp: return o.gpus;
    case comm_kind::fsdp: return o.nodes * o.gpus;
    case comm_kind::dp: case comm_kind::pp: return o.nodes;
  }
  return 1;
}
bool comm_network(const options& o, comm_kind k) { return k != comm_kind::tp && o.nodes > 1; }

/// nccl-tests: S (the "size") and the bus factor.
struct traffic { double size_bytes; double factor; };
traffic traffic_of(const sim_op& op, int n) {
  switch (op.func) {
    case nccl_func::all_reduce: return {double(op.bytes), 2.0 * (n - 1) / n};
    case nccl_func::all_gather: case nccl_func::reduce_scatter: return {double(op.bytes) * n, double(n - 1) / n};
    default: return {double(op.bytes), 1.0};
  }
}

struct model {
  const options& o;
  std::vector<sim_group> program;
  double compute_s = 0;       // per step
  double flop_per_step = 0;   // per GPU
  double nominal_step_s = 0;

  explicit model(const options& opt) : o(opt), program(build_program(opt)) {
    double e_net_xfer = 0, e_total = 0;
    for (const auto& g : program) {
      if (g.first_step_only) continue;
      for (const auto& op : g.ops) {
        if (op.ce) continue;
        const double d = op_duration_max(op, -1.0);
        e_total += d;
        if (comm_network(o, op.comm)) e_net_xfer += d - network_latency;
      }
    }
    // Calibration: halving network busbw adds ~e_net_xfer; make that the 310 -> 268 drop.
    double t0 = e_net_xfer > 0 ? e_net_xfer / (nominal_tflops / degraded_tflops - 1.0) : e_total * 5;
    if (t0 < e_total * 1.3) t0 = e_total * 1.3;  // keep compute dominant even without network comms
    nominal_step_s = t0;
    compute_s = t0 - e_total;
    flop_per_step = nominal_tflops * 1e12 * t0;
  }

  double base_busbw(comm_kind k) const { return comm_network(o, k) ? network_busbw : nvlink_busbw; }
  double latency(comm_kind k) const { return comm_network(o, k) ? network_latency : nvlink_latency; }

  /// Bus-bandwidth factor of a rank on `node` at sim time t (1 = nominal). node < 0: the job's worst.
  double bw_factor(comm_kind k, int node, double t) const {
    if (!comm_network(o, k)) return 1.0;
    double f = 1.0;
    for (const auto& d : o.degrades)
      if (d.w.active(t)) f *= 1.0 - d.pct / 100.0;
    for (const auto& s : o.slows)
      if (s.w.active(t)) f *= (node < 0 || node == s.node) ? 1.0 - s.pct / 100.0 : 1.0 - s.pct / 400.0;
    return std::max(f, 0.01);
  }

  double op_duration(const sim_op& op, double factor, double jitter) const {
    const traffic tr = traffic_of(op, comm_size(o, op.comm));
    return latency(op.comm) + tr.size_bytes * tr.factor / (base_busbw(op.comm) * factor) * (1.0 + jitter);
  }
  /// Synchronised duration (everyone waits for the slowest rank, jitter upper bound).
  double op_duration_max(const sim_op& op, double t) const {
    return op_duration(op, t < 0 ? 1.0 : bw_factor(op.comm, -1, t), jitter_frac);
  }
  /// Expected busbw as the plugin measures it (bus bytes / kernel time), no jitter.
  double busbw_gbs(const sim_op& op, double factor) const {
    const traffic tr = traffic_of(op, comm_size(o, op.comm));
    return tr.size_bytes * tr.factor / op_duration(op, factor, 0.0) / 1e9;
  }
  /// Compute time of a step (+-0.5% noise per step).
  double step_compute(u64 step) const { return compute_s * (1.0 + 0.005 * unit_jitter(mix(o.seed, step))); }
  /// Share of the compute not placed before a group (runs after the last group).
  double tail_compute_frac() const {
    double f = 0;
    for (const auto& g : program) f += g.compute_frac;
    return std::max(0.0, 1.0 - f);
  }
  /// Step time starting at sim time t (all ranks synchronised). Same schedule as the rank threads use.
  double step_time(double t, u64 step) const {
    const double c = step_compute(step);
    double cur = t;
    for (const auto& g : program) {
      if (g.first_step_only && step != 0) continue;
      cur += c * g.compute_frac;
      for (const auto& op : g.ops)
        if (!op.ce) cur += op_duration_max(op, cur);
    }
    return cur + c * tail_compute_frac() - t;
  }
};

// ---- SPSC queue user thread -> proxy thread --------------------------------------------------
struct proxy_item {
  pending_op op;
  int comm = 0;
  u64 start_ns = 0, stop_ns = 0;  // simulated ns
  bool start_only = false;
  bool pxn = false;
  bool quit = false;
};

class spsc_queue {
 public:
  bool push(const proxy_item& it) {
    const std::size_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) == cap) return false;
    buf_[h % cap] = it;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  bool pop(proxy_item& it) {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_.load(std::memory_order_acquire)) return false;
    it = buf_[t % cap];
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

 private:
  static constexpr std::size_t cap = 256;
  std::array<proxy_item, cap> buf_{};
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

// ---- simulated CUDA driver ------------------------------------------------------------------
using set_device_fn = void (*)(int, const unsigned char*);
set_device_fn g_set_device = nullptr;

void gpu_uuid(int node, int gpu, unsigned char out[16]) {
  const u64 a = mix(0x6e63636c696e7370ull, u64(node) * 4096 + u64(gpu));
  const u64 b = splitmix(a);
  std::memcpy(out, &a, 8);
  std::memcpy(out + 8, &b, 8);
  out[6] = static_cast<unsigned char>((out[6] & 0x0F) | 0x40);  // looks like a v4 UUID
  out[8] = static_cast<unsigned char>((out[8] & 0x3F) | 0x80);
}
void bind_device(int node, int gpu) {
  if (!g_set_device) return;
  unsigned char uuid[16];
  gpu_uuid(node, gpu, uuid);
  g_set_device(gpu, uuid);
}

// ---- timing ----------------------------------------------------------------------------------
u64 realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return u64(ts.tv_sec) * 1000000000ull + u64(ts.tv_nsec);
}

struct clock_map {
  u64 base_ns = 0;  // realtime ns at sim t = 0 (also the GPU timer base)
  double speed = 1;
  /// Wait until the wall time corresponding to sim time t (no-op at speed 0). Returns false if `stop`.
  void wait_until(double t, const std::atomic<bool>& stop) const {
    if (speed <= 0) return;
    const u64 target = base_ns + u64(t / speed * 1e9);
    while (!stop.load(std::memory_order_relaxed)) {
      const u64 now = realtime_ns();
      if (now >= target) return;
      const u64 left = target - now;
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<u64>(left, 50'000'000)));
    }
  }
  u64 gpu_ns(double t) const { return base_ns + u64(t * 1e9); }
};

// ---- one rank -----------------------------------------------------------------------------
struct rank_state {
  int node = 0, local = 0, global = 0;
  std::vector<std::unique_ptr<comm_driver>> comms;  // indexed by comm_kind
  spsc_queue q;
  std::atomic<u64> steps{0};
  std::atomic<double> tflops{0.0};
  std::atomic<bool> proxy_done{false};
};

struct node_runner {
  const options& o;
  const model& m;
  const plugin_library& lib;
  clock_map clk;
  std::vector<std::unique_ptr<rank_state>> ranks;
  std::atomic<bool> stop{false};
  std::string node_label(int node) const { return o.node_prefix + std::to_string(node); }

  comm_config make_comm(const rank_state& r, comm_kind k) const {
    comm_config c;
    c.mask_override = o.mask_override;
    switch (k) {
      case comm_kind::tp:
        c.name = "tp";
        c.comm_hash = mix(hash_str("tp"), u64(r.node));
        c.n_nodes = 1; c.n_ranks = o.gpus; c.rank = r.local;
        break;
      case comm_kind::fsdp:
        c.name = "fsdp";
        c.comm_hash = hash_str("fsdp");
        c.n_nodes = o.nodes; c.n_ranks = o.nodes * o.gpus; c.rank = r.global;
        break;
      case comm_kind::dp:
        c.name = "dp" + std::to_string(r.local);
        c.comm_hash = mix(hash_str("dp"), u64(r.local));
        c.n_nodes = o.nodes; c.n_ranks = o.nodes; c.rank = r.node;
        break;
      case comm_kind::pp:
        c.name = "pp" + std::to_string(r.local);
        c.comm_hash = mix(hash_str("pp"), u64(r.local));
        c.n_nodes = o.nodes; c.n_ranks = o.nodes; c.rank = r.node;
        break;
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);  // different seeds → different "jobs"
    return c;
  }

  void push(rank_state& r, const proxy_item& it) {
    while (!r.q.push(it)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  std::optional<double> hang_time(int global) const {
    std::optional<double> t;
    for (const auto& h : o.hangs)
      if (h.rank == global && (!t || h.t < *t)) t = h.t;
    return t;
  }

  void user_thread(rank_state& r) {
    bind_device(r.node, r.local);
    const auto hang_at = hang_time(r.global);
    double t = 0;
    std::vector<op_desc> descs;
    std::vector<pending_op> pend;
    std::vector<sim_op> ops;
    descs.reserve(8);
    pend.resize(8);
    bool hung = false;
    for (u64 step = 0; !stop.load(); ++step) {
      if (o.steps > 0 ? step >= u64(o.steps) : t >= o.duration) break;
      const double step_len = m.step_time(t, step);
      const double compute = m.step_compute(step);
      double cur = t;
      for (const auto& g : m.program) {
        if (g.first_step_only && step != 0) continue;
        cur += compute * g.compute_frac;
        ops.clear();
        for (const auto& op : g.ops) {
          if (op.comm == comm_kind::pp && ((op.p2p_dir > 0 && r.node == o.nodes - 1) || (op.p2p_dir < 0 && r.node == 0)))
            continue;  // pipeline ends
          ops.push_back(op);
        }
        if (ops.empty()) continue;
        // Ops of a group go to their communicator; all ops of a sim group share one communicator.
        comm_driver& c = *r.comms[std::size_t(ops.front().comm)];
        descs.clear();
        for (const auto& op : ops) {
          op_desc d;
          d.kind = op.ce ? op_kind::ce_coll : (op.p2p_dir ? op_kind::p2p : op_kind::coll);
          d.func = op.func;
          d.dtype = op.dtype;
          d.count = op.bytes / dtype_size(op.dtype);
          d.algo = op.algo;
          d.proto = op.proto;
          d.n_channels = op.n_channels;
          d.channel_lo = op.channel_lo;
          d.user_tag = op.tag;
          d.kernel_variant = op.sym ? "AllReduce_AGxLL_R" : nullptr;
          d.send_buff = reinterpret_cast<const void*>(0x7f0000000000ull + (u64(r.global) << 32));
          d.recv_buff = reinterpret_cast<void*>(0x7f0000000000ull + (u64(r.global) << 32) + (1ull << 31));
          if (op.p2p_dir) {
            d.peer = r.node + op.p2p_dir;  // pp rank = node index
            d.channel_lo = 2 + 4 * (r.local % 4) + (op.p2p_dir > 0 ? 0 : 2);  // P2P channels are not 0-based
          }
          descs.push_back(d);
        }
        clk.wait_until(cur, stop);
        if (stop.load()) break;
        if (hang_at && cur >= *hang_at) {
          // The op starts (Coll start + KernelCh start) and never completes; the rank issues nothing more.
          c.enqueue(std::span<const op_desc>(descs.data(), 1), std::span<pending_op>(pend.data(), 1));
          proxy_item it;
          it.op = pend[0];
          it.comm = int(ops.front().comm);
          it.start_ns = clk.gpu_ns(cur);
          it.start_only = true;
          push(r, it);
          hung = true;
          break;
        }
        c.enqueue(std::span<const op_desc>(descs), std::span<pending_op>(pend.data(), descs.size()));
        for (std::size_t i = 0; i < ops.size(); ++i) {
          const double f = m.bw_factor(ops[i].comm, r.node, cur);
          const double j = jitter_frac * unit_jitter(mix(mix(o.seed, step), mix(u64(r.global), u64(&g - m.program.data()) * 16 + i)));
          const double d = m.op_duration(ops[i], f, j);
          proxy_item it;
          it.op = pend[i];
          it.comm = int(ops[i].comm);
          it.start_ns = clk.gpu_ns(cur);
          it.stop_ns = clk.gpu_ns(cur + d);
          it.pxn = o.pxn && i == 0 && comm_network(o, ops[i].comm);
          push(r, it);
          if (!ops[i].ce) cur += m.op_duration_max(ops[i], cur);  // synchronised: the slowest rank
        }
      }
      if (hung) break;
      t += step_len;
      clk.wait_until(t, stop);
      r.tflops.store(m.flop_per_step / step_len / 1e12);
      r.steps.fetch_add(1);
    }
    if (o.purge_inflight && !hung) {
      // NCCL 2.31: ops still in flight at comm destroy are purged without callbacks (KernelCh start, no stop).
      for (comm_kind k : {comm_kind::fsdp, comm_kind::tp}) {
        if (!r.comms[std::size_t(k)]) continue;
        op_desc d;
        d.func = nccl_func::all_reduce;
        d.count = mib;
        d.n_channels = 2;
        proxy_item it;
        it.op = r.comms[std::size_t(k)]->enqueue(d);
        it.comm = int(k);
        it.start_ns = clk.gpu_ns(t);
        it.start_only = true;
        push(r, it);
      }
    }
    proxy_item q;
    q.quit = true;
    push(r, q);
  }

  void proxy_thread(rank_state& r) {
    bind_device(r.node, r.local);
    proxy_item it;
    kernel_time times[64];
    for (;;) {
      if (!r.q.pop(it)) {
        std::this_thread::sleep_for(std::chrono::microseconds(o.speed > 0 ? 200 : 20));
        continue;
      }
      if (it.quit) break;
      comm_driver& c = *r.comms[std::size_t(it.comm)];
      if (it.start_only) {
        clk.wait_until(double(it.start_ns - clk.base_ns) / 1e9, stop);
        c.start_only(it.op, it.start_ns);
        continue;
      }
      clk.wait_until(double(it.stop_ns - clk.base_ns) / 1e9, stop);
      const int n = std::min<int>(it.op.n_channels, 64);
      for (int ch = 0; ch < n; ++ch) {
        const u64 h = mix(it.start_ns, u64(ch));
        times[ch].start_ns = it.start_ns + (h % 700);
        times[ch].stop_ns = it.stop_ns - ((h >> 20) % 700);
      }
      c.complete(it.op, std::span<const kernel_time>(times, std::size_t(n > 0 ? n : 1)));
      if (it.pxn) c.foreign_proxy_op(pid_t(::getpid() + 100000), 0, 0, 0);
    }
    r.proxy_done.store(true);
  }

  void write_prom(const std::string& dir) const {
    if (dir.empty()) return;
    std::ostringstream s;
    s << "# HELP ncclinsp_sim_step_tflops Throughput of the rank's last simulated training step, TFLOP/s per GPU.\n"
         "# TYPE ncclinsp_sim_step_tflops gauge\n";
    for (const auto& r : ranks)
      s << "ncclinsp_sim_step_tflops{node=\"" << node_label(r->node) << "\",rank=\"" << r->global << "\"} "
        << r->tflops.load() << "\n";
    s << "# HELP ncclinsp_sim_steps_total Simulated training steps completed by the rank.\n"
         "# TYPE ncclinsp_sim_steps_total counter\n";
    for (const auto& r : ranks)
      s << "ncclinsp_sim_steps_total{node=\"" << node_label(r->node) << "\",rank=\"" << r->global << "\"} "
        << r->steps.load() << "\n";
    const fs::path final_path = fs::path(dir) / "ncclinsp_sim.prom";
    const fs::path tmp = fs::path(dir) / ".ncclinsp_sim.prom.tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << s.str();
      if (!f) return;
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
  }

  int run(const std::vector<int>& nodes, const std::string& prom_dir) {
    for (int node : nodes)
      for (int l = 0; l < o.gpus; ++l) {
        auto r = std::make_unique<rank_state>();
        r->node = node;
        r->local = l;
        r->global = node * o.gpus + l;
        r->comms.resize(4);
        ranks.push_back(std::move(r));
      }
    // Communicator init runs on each rank's own thread (concurrently, like ncclCommInitRank per GPU).
    {
      std::vector<std::thread> init;
      for (auto& rp : ranks)
        init.emplace_back([this, r = rp.get()] {
          bind_device(r->node, r->local);
          for (comm_kind k : {comm_kind::tp, comm_kind::fsdp, comm_kind::dp, comm_kind::pp}) {
            if (comm_size(o, k) < 2) continue;
            r->comms[std::size_t(k)] = std::make_unique<comm_driver>(lib, make_comm(*r, k));
          }
        });
      for (auto& t : init) t.join();
    }
    std::vector<std::thread> threads;
    for (auto& rp : ranks) {
      threads.emplace_back([this, r = rp.get()] { proxy_thread(*r); });
      threads.emplace_back([this, r = rp.get()] { user_thread(*r); });
    }
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread writer([&] {
      std::unique_lock lk(mu);
      while (!done) {
        write_prom(prom_dir);
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return done; });
      }
    });
    for (auto& t : threads) t.join();
    {
      std::lock_guard lk(mu);
      done = true;
    }
    cv.notify_all();
    writer.join();
    write_prom(prom_dir);
    // ncclCommDestroy: finalize every communicator (destroy order: last created first).
    for (auto& r : ranks)
      for (auto it = r->comms.rbegin(); it != r->comms.rend(); ++it)
        if (*it) (*it)->finalize();
    for (auto& r : ranks) r->comms.clear();
    return 0;
  }
};

// ---- summary ----------------------------------------------------------------------------------
std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
      continue;
    }
    o += c;
  }
  return o;
}

void write_summary(const options& o, const model& m, const std::string& path) {
  std::ostringstream j;
  j.precision(6);
  j << "{\n  \"config\": {\"plugin\": \"" << json_escape(o.plugin) << "\", \"abi\": " << o.abi << ", \"nodes\": " << o.nodes
    << ", \"gpus\": " << o.gpus << ", \"duration_s\": " << o.duration << ", \"steps\": " << o.steps
    << ", \"speed\": " << o.speed << ", \"node_prefix\": \"" << json_escape(o.node_prefix) << "\", \"seed\": " << o.seed
    << ", \"nvlink_busbw_gbs\": " << nvlink_busbw / 1e9 << ", \"network_busbw_gbs\": " << network_busbw / 1e9
    << ", \"nominal_step_s\": " << m.nominal_step_s << ", \"compute_s\": " << m.compute_s
    << ", \"flop_per_step_per_gpu\": " << m.flop_per_step << "},\n";
  j << "  \"faults\": {\"net_degrade\": [";
  for (std::size_t i = 0; i < o.degrades.size(); ++i)
    j << (i ? ", " : "") << "{\"pct\": " << o.degrades[i].pct << ", \"t0\": " << o.degrades[i].w.t0 << ", \"t1\": " << o.degrades[i].w.t1 << "}";
  j << "], \"slow_host\": [";
  for (std::size_t i = 0; i < o.slows.size(); ++i)
    j << (i ? ", " : "") << "{\"node\": " << o.slows[i].node << ", \"node_name\": \"" << json_escape(o.node_prefix + std::to_string(o.slows[i].node))
      << "\", \"pct\": " << o.slows[i].pct << ", \"t0\": " << o.slows[i].w.t0 << ", \"t1\": " << o.slows[i].w.t1 << "}";
  j << "], \"hang_rank\": [";
  for (std::size_t i = 0; i < o.hangs.size(); ++i)
    j << (i ? ", " : "") << "{\"rank\": " << o.hangs[i].rank << ", \"t\": " << o.hangs[i].t << "}";
  j << "]},\n  \"busbw\": [\n";
  bool first = true;
  std::vector<std::string> seen;
  for (const auto& g : m.program)
    for (const auto& op : g.ops) {
      if (op.ce) continue;
      const std::string key = std::string(kind_name(op.comm)) + func_name(op.func) + std::to_string(op.bytes);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      const int n = comm_size(o, op.comm);
      j << (first ? "" : ",\n") << "    {\"comm\": \"" << kind_name(op.comm) << "\", \"collective\": \"" << func_name(op.func)
        << "\", \"nranks\": " << n << ", \"n_nodes\": " << (comm_network(o, op.comm) ? o.nodes : 1)
        << ", \"network\": " << (comm_network(o, op.comm) ? "true" : "false") << ", \"bytes_per_rank\": " << op.bytes
        << ", \"algo\": \"" << (op.sym ? "AGxLL_R" : op.algo) << "\", \"proto\": \"" << (op.sym ? "" : op.proto)
        << "\", \"n_channels\": " << int(op.n_channels) << ", \"model_busbw_gbs\": " << m.base_busbw(op.comm) / 1e9
        << ", \"nominal_busbw_gbs\": " << m.busbw_gbs(op, 1.0) << ", \"degraded\": [";
      bool f2 = true;
      for (const auto& d : o.degrades) {
        const double fac = comm_network(o, op.comm) ? 1.0 - d.pct / 100.0 : 1.0;
        j << (f2 ? "" : ", ") << "{\"fault\": \"net_degrade\", \"t0\": " << d.w.t0 << ", \"t1\": " << d.w.t1
          << ", \"busbw_gbs\": " << m.busbw_gbs(op, fac) << "}";
        f2 = false;
      }
      for (const auto& s : o.slows) {
        const bool net = comm_network(o, op.comm);
        j << (f2 ? "" : ", ") << "{\"fault\": \"slow_host\", \"node\": " << s.node << ", \"t0\": " << s.w.t0 << ", \"t1\": " << s.w.t1
          << ", \"slow_node_busbw_gbs\": " << m.busbw_gbs(op, net ? 1.0 - s.pct / 100.0 : 1.0)
          << ", \"other_nodes_busbw_gbs\": " << m.busbw_gbs(op, net ? 1.0 - s.pct / 400.0 : 1.0) << "}";
        f2 = false;
      }
      j << "]}";
      first = false;
    }
  j << "\n  ],\n  \"phases\": [\n";
  std::vector<double> cuts{0.0};
  for (const auto& d : o.degrades) { cuts.push_back(d.w.t0); cuts.push_back(d.w.t1); }
  for (const auto& s : o.slows) { cuts.push_back(s.w.t0); cuts.push_back(s.w.t1); }
  const double end = o.duration > 0 ? o.duration : o.steps * m.nominal_step_s;
  cuts.push_back(std::max(end, 0.0));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  first = true;
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] >= end) break;
    const double mid = (cuts[i] + cuts[i + 1]) / 2;
    double st = m.compute_s;
    for (const auto& g : m.program)
      if (!g.first_step_only)
        for (const auto& op : g.ops)
          if (!op.ce) st += m.op_duration_max(op, mid);
    std::string active;
    for (const auto& d : o.degrades) if (d.w.active(mid)) active += std::string(active.empty() ? "" : ",") + "net_degrade";
    for (const auto& s : o.slows) if (s.w.active(mid)) active += std::string(active.empty() ? "" : ",") + "slow_host";
    j << (first ? "" : ",\n") << "    {\"t0\": " << cuts[i] << ", \"t1\": " << cuts[i + 1] << ", \"faults\": \""
      << (active.empty() ? "none" : active) << "\", \"step_s\": " << st << ", \"tflops\": " << m.flop_per_step / st / 1e12 << "}";
    first = false;
  }
  j << "\n  ]\n}\n";
  std::ofstream f(path, std::ios::trunc);
  f << j.str();
  if (!f) std::fprintf(stderr, "ncclinsp-sim: cannot write the summary to %s\n", path.c_str());
}

// ---- process management -----------------------------------------------------------------------
std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string default_cuda_driver() {
  const std::string exe = self_exe();
  if (!exe.empty()) {
    const fs::path p = fs::path(exe).parent_path() / "libncclinsp-simcuda.so";
    if (fs::exists(p)) return p.string();
  }
  return NCCLINSP_SIMCUDA_DEFAULT_PATH;
}

int run_nodes(const options& o, const std::vector<int>& nodes, const std::string& prom_dir, u64 base_ns) {
  if (!o.cuda_driver.empty()) {
    if (void* h = ::dlopen(o.cuda_driver.c_str(), RTLD_NOW | RTLD_LOCAL))
      g_set_device = reinterpret_cast<set_device_fn>(::dlsym(h, "ncclinsp_simcuda_set_device"));
    if (!g_set_device) std::fprintf(stderr, "ncclinsp-sim: warning: cannot use simulated CUDA driver %s\n", o.cuda_driver.c_str());
  }
  plugin_library lib(o.plugin, o.abi);
  if (!lib.ok()) {
    std::fprintf(stderr, "ncclinsp-sim: %s\n", lib.error().c_str());
    return 2;
  }
  if (o.verbose) std::fprintf(stderr, "ncclinsp-sim: loaded %s (v%d) from %s\n", lib.name(), lib.abi(), o.plugin.c_str());
  model m(o);
  node_runner nr{o, m, lib, clock_map{base_ns, o.speed}, {}, {}};
  if (!prom_dir.empty()) fs::create_directories(prom_dir);
  return nr.run(nodes, prom_dir);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"ncclinsp-sim: simulated multi-node LLM training job driving an NCCL profiler plugin"};
  app.add_option("--plugin", o.plugin, "profiler plugin .so")->required();
  app.add_option("--abi", o.abi, "profiler ABI: 0 = newest exported, 4..7")->check(CLI::IsMember({0, 4, 5, 6, 7}));
  app.add_option("--nodes", o.nodes, "simulated nodes")->check(CLI::Range(1, 4096));
  app.add_option("--gpus", o.gpus, "GPUs per node")->check(CLI::Range(1, 16));
  auto* dur = app.add_option("--duration", o.duration, "simulated seconds to run")->check(CLI::NonNegativeNumber);
  auto* stp = app.add_option("--steps", o.steps, "training steps to run")->check(CLI::NonNegativeNumber);
  dur->excludes(stp);
  app.add_option("--speed", o.speed, "1 = real time, 10 = 10x faster, 0 = as fast as possible")->check(CLI::NonNegativeNumber);
  app.add_option("--out", o.out, "output directory (per node: DIR/<node>/)");
  app.add_option("--node-prefix", o.node_prefix, "node name prefix (node<k>)");
  app.add_option("--cuda-driver", o.cuda_driver, "simulated CUDA driver .so (default: libncclinsp-simcuda.so next to the binary)");
  app.add_option("--summary", o.summary, "write a JSON summary of the model and the injected faults");
  app.add_flag("--prom", o.prom, "set NCCL_INSPECTOR_ENABLE=1, PROM_DUMP=1, DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 unless set");
  app.add_flag("--single-process", o.single_process, "run every node's ranks in this process (no fork)");
  app.add_flag("--purge-inflight", o.purge_inflight, "at the end leave KernelCh events started and never stopped (NCCL 2.31)");
  app.add_flag("--user-tags", o.user_tags, "v7: tag collectives with per-phase user tags");
  app.add_flag("--sym-kernels", o.sym_kernels, "v7: run the small tp AllReduce as a symmetric kernel (with kernel phases)");
  app.add_flag("--ce-collectives", o.ce_colls, "v6+: add a copy-engine AllGather on tp");
  app.add_flag("--pxn", o.pxn, "emit a foreign-pid (PXN) ProxyOp after each network op");
  app.add_option("--mask-override", o.mask_override, "RAS: after each init set the global mask to this value (e.g. 65535)");
  app.add_option("--seed", o.seed, "jitter / hash seed");
  app.add_flag("-v,--verbose", o.verbose, "print the plugin's INFO logs");
  std::vector<std::string> degr, slow, hangs;
  app.add_option("--net-degrade", degr, "PCT@T0-T1: network busbw x (1-PCT/100) for comms with n_nodes>1");
  app.add_option("--slow-host", slow, "NODE:PCT@T0-T1: that node's network busbw reduced by PCT");
  app.add_option("--hang-rank", hangs, "R@T: global rank R hangs at simulated time T");
  app.add_option("--node-index", o.node_index)->group("");
  app.add_option("--start-wall-ns", o.start_wall_ns)->group("");
  CLI11_PARSE(app, argc, argv);

  for (const auto& s : degr) {
    net_degrade d;
    const auto at = s.find('@');
    if (at == std::string::npos || !parse_window(s.substr(at + 1), d.w)) return std::fprintf(stderr, "bad --net-degrade %s\n", s.c_str()), 1;
    d.pct = std::atof(s.substr(0, at).c_str());
    if (d.pct < 0 || d.pct >= 100) return std::fprintf(stderr, "bad --net-degrade percentage %s\n", s.c_str()), 1;
    o.degrades.push_back(d);
  }
  for (const auto& s : slow) {
    slow_host h;
    const auto colon = s.find(':'), at = s.find('@');
    if (colon == std::string::npos || at == std::string::npos || at < colon || !parse_window(s.substr(at + 1), h.w))
      return std::fprintf(stderr, "bad --slow-host %s\n", s.c_str()), 1;
    // NODE is an index or a node name (<prefix><index>, e.g. node1).
    std::string node = s.substr(0, colon);
    if (node.rfind(o.node_prefix, 0) == 0 && node.size() > o.node_prefix.size()) node = node.substr(o.node_prefix.size());
    if (node.empty() || node.find_first_not_of("0123456789") != std::string::npos)
      return std::fprintf(stderr, "bad --slow-host %s: NODE must be an index or %s<index>\n", s.c_str(), o.node_prefix.c_str()), 1;
    h.node = std::atoi(node.c_str());
    h.pct = std::atof(s.substr(colon + 1, at - colon - 1).c_str());
    if (h.node < 0 || h.node >= o.nodes || h.pct < 0 || h.pct >= 100) return std::fprintf(stderr, "bad --slow-host %s\n", s.c_str()), 1;
    o.slows.push_back(h);
  }
  for (const auto& s : hangs) {
    hang h;
    const auto at = s.find('@');
    if (at == std::string::npos) return std::fprintf(stderr, "bad --hang-rank %s\n", s.c_str()), 1;
    h.rank = std::atoi(s.substr(0, at).c_str());
    h.t = std::atof(s.substr(at + 1).c_str());
    if (h.rank < 0 || h.rank >= o.nodes * o.gpus) return std::fprintf(stderr, "bad --hang-rank %s\n", s.c_str()), 1;
    o.hangs.push_back(h);
  }
  if (o.duration <= 0 && o.steps <= 0) o.duration = 60;
  logger_verbose().store(o.verbose);
  if (o.cuda_driver.empty()) o.cuda_driver = default_cuda_driver();
  if (o.prom) {
    ::setenv("NCCL_INSPECTOR_ENABLE", "1", 0);
    ::setenv("NCCL_INSPECTOR_PROM_DUMP", "1", 0);
    ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1000000", 0);
  }
  if (!o.cuda_driver.empty()) ::setenv("NCCLINSP_CUDA_DRIVER", o.cuda_driver.c_str(), 1);

  // Child: one node.
  if (o.node_index >= 0) {
    const std::string dir = o.out.empty() ? std::string() : (fs::path(o.out) / (o.node_prefix + std::to_string(o.node_index))).string();
    return run_nodes(o, {o.node_index}, dir, u64(o.start_wall_ns ? o.start_wall_ns : (long long)realtime_ns()));
  }

  if (!o.summary.empty()) {
    model m(o);
    std::error_code ec;
    if (const auto parent = fs::path(o.summary).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
    write_summary(o, m, o.summary);
  }
  const u64 base = realtime_ns() + (o.single_process ? 0 : 300'000'000ull);  // children start aligned

  if (o.single_process) {
    if (!o.out.empty()) {
      fs::create_directories(o.out);
      ::setenv("NCCL_INSPECTOR_DUMP_DIR", o.out.c_str(), 0);
    }
    std::vector<int> nodes(std::size_t(o.nodes));
    for (int k = 0; k < o.nodes; ++k) nodes[std::size_t(k)] = k;
    return run_nodes(o, nodes, o.out, base);
  }

  const std::string exe = self_exe();
  if (exe.empty()) return std::fprintf(stderr, "ncclinsp-sim: cannot find /proc/self/exe\n"), 1;
  std::vector<pid_t> children;
  for (int k = 0; k < o.nodes; ++k) {
    const std::string name = o.node_prefix + std::to_string(k);
    std::string dump;
    if (!o.out.empty()) {
      dump = (fs::path(o.out) / name).string();
      fs::create_directories(dump);
    }
    const pid_t pid = ::fork();
    if (pid < 0) return std::perror("fork"), 1;
    if (pid == 0) {
      ::setenv("NCCLINSP_NODE_NAME", name.c_str(), 1);
      if (!dump.empty()) ::setenv("NCCL_INSPECTOR_DUMP_DIR", dump.c_str(), 1);
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--node-index");
      args.push_back(std::to_string(k));
      args.push_back("--start-wall-ns");
      args.push_back(std::to_string(base));
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv(exe.c_str(), cargs.data());
      std::perror("execv");
      ::_exit(127);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (std::size_t k = 0; k < children.size(); ++k) {
    int status = 0;
    if (::waitpid(children[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "ncclinsp-sim: node %zu failed (status %#x)\n", k, status);
      ++failed;
    }
  }
  return failed ? 1 : 0;
}
