#pragma once
/// ncclinsp-sim's job model: the workload (one training step), the faults, and the coupled timing of every
/// rank's collectives (see sim/README.md "Timing model" for the formulas and what the model leaves out).
///
/// Every rank (in whichever process) computes the whole job's timeline from the configuration and the seed
/// alone, so the ranks of one op agree on its timing without talking to each other.

#include "nccl_driver.hpp"

#include <ncclinsp/bandwidth.hpp>
#include <ncclinsp/model.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ncclinsp::sim::job {

using u64 = std::uint64_t;
inline constexpr std::size_t mib = 1024 * 1024;

// ---- deterministic hashing -------------------------------------------------------------------------
constexpr u64 splitmix(u64 x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr u64 mix(u64 a, u64 b) noexcept { return splitmix(a ^ splitmix(b)); }
inline u64 hash_str(const std::string& s) noexcept {
  u64 h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return splitmix(h);
}
/// Uniform in [-1, 1].
inline double unit_jitter(u64 h) noexcept { return double(h >> 11) / double(1ull << 52) - 1.0; }
/// Uniform in [0, 1).
inline double unit01(u64 h) noexcept { return double(h >> 11) / double(1ull << 53); }

// ---- configuration ------------------------------------------------------------------------------
struct window {
  double t0 = 0, t1 = 0;
  bool active(double t) const noexcept { return t >= t0 && t < t1; }
};
/// One injected fault. node/nic/rank: -1 where the kind has none.
enum class fault_kind : std::uint8_t { net_degrade, slow_host, slow_nic, straggler, nvlink_degrade };
constexpr const char* fault_name(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::net_degrade: return "net_degrade";
    case fault_kind::slow_host: return "slow_host";
    case fault_kind::slow_nic: return "slow_nic";
    case fault_kind::straggler: return "straggler";
    case fault_kind::nvlink_degrade: return "nvlink_degrade";
  }
  return "?";
}
struct fault {
  fault_kind kind = fault_kind::net_degrade;
  int node = -1, nic = -1, rank = -1;
  double pct = 0;  ///< bandwidth reduction in % (links)
  double ms = 0;   ///< launch delay (straggler)
  window w;
  bool random = false;  ///< chosen by --random-fault
};
struct hang { int rank = 0; double t = 0; };

struct options {
  std::string plugin;
  int abi = 0;
  int nodes = 2, gpus = 4, nics = 0;  ///< nics per node; 0 = one per GPU
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
  double launch_jitter_us = 5;  ///< each rank's launch time: + uniform [0, J) per op group
  double wobble_pct = 0;        ///< healthy fabric wobble: every NIC x (1 + W/100 sin(2 pi t / period))
  double wobble_period_s = 120;
  std::vector<fault> faults;
  std::vector<hang> hangs;
  int nic_count() const noexcept { return nics > 0 ? nics : gpus; }
  /// Simulated length of the run (for --steps: the nominal step time x steps, given by the caller).
  double end_time(double nominal_step_s) const noexcept { return duration > 0 ? duration : steps * nominal_step_s; }
};

/// --random-fault SEED: one fault of a random kind, culprit, size (10-50 %) and onset (20-50 % of the run),
/// lasting to the end of the run. Deterministic in (seed, job shape).
inline fault random_fault(u64 seed, const options& o, double run_s) {
  const int n_kinds = o.nodes > 1 ? 5 : 2;  // one node: only straggler and NVLink faults exist
  static constexpr fault_kind multi[] = {fault_kind::net_degrade, fault_kind::slow_host, fault_kind::slow_nic,
                                         fault_kind::straggler, fault_kind::nvlink_degrade};
  static constexpr fault_kind single[] = {fault_kind::straggler, fault_kind::nvlink_degrade};
  fault f;
  u64 h = mix(seed, 0xfa017);
  f.kind = o.nodes > 1 ? multi[h % 5] : single[h % u64(n_kinds)];
  h = splitmix(h);
  f.pct = 10.0 + double(h % 41);  // 10..50 %
  h = splitmix(h);
  f.w.t0 = run_s * (0.2 + 0.3 * unit01(h));
  f.w.t1 = std::max(run_s, f.w.t0) + 1e6;  // to the end
  h = splitmix(h);
  switch (f.kind) {
    case fault_kind::slow_host: case fault_kind::nvlink_degrade: f.node = int(h % u64(o.nodes)); break;
    case fault_kind::slow_nic:
      f.node = int(h % u64(o.nodes));
      f.nic = int(splitmix(h) % u64(o.nic_count()));
      break;
    case fault_kind::straggler:
      f.rank = int(h % u64(o.nodes * o.gpus));
      f.ms = 0;  // sized below against the step
      break;
    case fault_kind::net_degrade: break;
  }
  f.random = true;
  return f;
}

// ---- workload ---------------------------------------------------------------------------------
enum class comm_kind : std::uint8_t { tp, fsdp, dp, pp };
inline constexpr int n_comm_kinds = 4;
constexpr const char* kind_name(comm_kind k) {
  switch (k) {
    case comm_kind::tp: return "tp";
    case comm_kind::fsdp: return "fsdp";
    case comm_kind::dp: return "dp";
    case comm_kind::pp: return "pp";
  }
  return "?";
}

inline constexpr double nvlink_busbw = 360e9;   // bytes/s
inline constexpr double network_busbw = 45e9;   // bytes/s per GPU
inline constexpr double nvlink_latency = 8e-6;  // s
inline constexpr double network_latency = 20e-6;
inline constexpr double jitter_frac = 0.02;
inline constexpr double nominal_tflops = 310.0;
inline constexpr double degraded_tflops = 268.0;  // at --net-degrade 50
inline constexpr std::size_t max_channels = 16;
inline constexpr int chunk_bytes = 1 << 19;       // NCCL step size (SIMPLE, 4 MiB buffer / 8 steps)

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

inline int comm_size(const options& o, comm_kind k) {
  switch (k) {
    case comm_kind::tp: return o.gpus;
    case comm_kind::fsdp: return o.nodes * o.gpus;
    case comm_kind::dp: case comm_kind::pp: return o.nodes;
  }
  return 1;
}
inline bool comm_network(const options& o, comm_kind k) { return k != comm_kind::tp && o.nodes > 1; }

inline std::vector<sim_group> build_program(const options& o) {
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
  for (auto& grp : g) std::erase_if(grp.ops, [&](const sim_op& op) { return comm_size(o, op.comm) < 2; });
  std::erase_if(g, [](const sim_group& grp) { return grp.ops.empty(); });
  return g;
}

/// nccl-tests: S (the "size") and the bus factor, the library's (ncclinsp/bandwidth.hpp), so the
/// simulated time and the plugin's bandwidth use one formula.
struct traffic { double size_bytes; double factor; };
inline traffic traffic_of(const sim_op& op, int n) {
  const ncclinsp::func f = ncclinsp::parse_func(func_name(op.func));
  return {ncclinsp::traffic_bytes(f, op.bytes, n), ncclinsp::bus_factor(f, n)};
}

// ---- timing model -------------------------------------------------------------------------------
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
        const double d = duration(op, 1.0, jitter_frac);
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
  double jitter_s() const { return o.launch_jitter_us * 1e-6; }

  // -- links ---------------------------------------------------------------------------------------
  /// Bandwidth factor (1 = nominal) of NIC `nic` of `node` at time t: wobble x fabric x host x that NIC.
  double net_link(int node, int nic, double t) const {
    double f = 1.0;  // the wobble only when asked for: this runs for every edge of every op of every rank
    if (o.wobble_pct > 0) f += o.wobble_pct / 100.0 * std::sin(2.0 * 3.141592653589793 * t / std::max(o.wobble_period_s, 1.0));
    for (const auto& x : o.faults) {
      if (!x.w.active(t)) continue;
      if (x.kind == fault_kind::net_degrade || (x.kind == fault_kind::slow_host && x.node == node) ||
          (x.kind == fault_kind::slow_nic && x.node == node && x.nic == nic))
        f *= 1.0 - x.pct / 100.0;
    }
    return f;
  }
  /// NVLink bandwidth factor of `node` at time t.
  double nvl_link(int node, double t) const {
    double f = 1.0;
    for (const auto& x : o.faults)
      if (x.kind == fault_kind::nvlink_degrade && x.node == node && x.w.active(t)) f *= 1.0 - x.pct / 100.0;
    return f;
  }
  /// Rail of channel `ch`: collectives over all GPUs of a node spread their channels over the node's NICs;
  /// one-GPU-per-node communicators (dp, pp) use the NICs nearest to their GPU.
  int nic_of(comm_kind k, int local, int ch) const {
    const int nics = o.nic_count();
    if (k == comm_kind::fsdp) return ch % nics;
    const int per = std::max(1, nics / o.gpus);
    return (local * nics / o.gpus + ch % per) % nics;
  }
  /// Pace of channel `ch` of an op on communicator kind k (GPU `local` for dp/pp) spanning nodes
  /// [n0, n1], as a factor of base_busbw(k): the slowest edge of that channel's ring/tree/pair.
  double channel_factor(comm_kind k, int local, int n0, int n1, int ch, double t) const {
    double f = 1e9;
    if (comm_network(o, k)) {
      const int nic = nic_of(k, local, ch);
      for (int n = n0; n <= n1; ++n) f = std::min(f, net_link(n, nic, t));
      if (k == comm_kind::fsdp && o.gpus > 1)  // intra-node ring edges ride NVLink
        for (int n = n0; n <= n1; ++n) f = std::min(f, nvl_link(n, t) * nvlink_busbw / network_busbw);
    } else {
      for (int n = n0; n <= n1; ++n) f = std::min(f, nvl_link(n, t));
    }
    return std::max(f, 0.01);
  }
  /// Launch delay of a global rank at time t (--straggler).
  double straggle(int rank, double t) const {
    double d = 0;
    for (const auto& x : o.faults)
      if (x.kind == fault_kind::straggler && x.rank == rank && x.w.active(t)) d += x.ms / 1e3;
    return d;
  }

  /// Transfer time of one channel's share at pace `factor`, latency included (nccl-tests formula).
  double duration(const sim_op& op, double factor, double jitter) const {
    const traffic tr = traffic_of(op, comm_size(o, op.comm));
    return latency(op.comm) + tr.size_bytes * tr.factor / (base_busbw(op.comm) * factor) * (1.0 + jitter);
  }
  /// Expected wait inside the kernel of a rank that is not the last to arrive, for the first op of a group
  /// (n ranks, launch offsets uniform in [0, J)): E[max] - E[own] = J (n-1) / (2 (n+1)).
  double expected_wait(const sim_op& op, bool first_of_group) const {
    if (!first_of_group) return 0;
    const int n = op.p2p_dir ? 2 : comm_size(o, op.comm);
    return jitter_s() * (n - 1) / (2.0 * (n + 1));
  }
  /// Expected busbw as the plugin measures it (bus bytes / this rank's kernel time), no jitter.
  double busbw_gbs(const sim_op& op, double factor, bool first_of_group) const {
    const traffic tr = traffic_of(op, comm_size(o, op.comm));
    return tr.size_bytes * tr.factor / (duration(op, factor, 0.0) + expected_wait(op, first_of_group)) / 1e9;
  }
  /// The job's worst channel pace for comm kind k at time t (every instance, every channel).
  double worst_factor(comm_kind k, int n_channels, double t) const {
    double f = 1e9;
    const int locals = k == comm_kind::dp || k == comm_kind::pp ? o.gpus : 1;
    const int nodes = k == comm_kind::tp ? o.nodes : 1;
    for (int l = 0; l < locals; ++l)
      for (int n = 0; n < nodes; ++n)
        for (int ch = 0; ch < std::max(1, n_channels); ++ch)
          f = std::min(f, k == comm_kind::tp ? channel_factor(k, l, n, n, ch, t)
                                             : channel_factor(k, l, 0, o.nodes - 1, ch, t));
    return f;
  }
  /// Compute time of a step (+-0.5% noise per step, common to all ranks).
  double step_compute(u64 step) const { return compute_s * (1.0 + 0.005 * unit_jitter(mix(o.seed, step))); }
  /// Share of the compute not placed before a group (runs after the last group).
  double tail_compute_frac() const {
    double f = 0;
    for (const auto& g : program) f += g.compute_frac;
    return std::max(0.0, 1.0 - f);
  }
  /// Expected step time at time t (no jitter; the slowest channel of every op; straggler delays).
  double expected_step(double t) const {
    double s = compute_s, delay = 0;
    for (int r = 0; r < o.nodes * o.gpus; ++r) delay = std::max(delay, straggle(r, t));
    for (const auto& g : program) {
      if (g.first_step_only) continue;
      s += delay + jitter_s() / 2;
      for (const auto& op : g.ops)
        if (!op.ce) s += duration(op, worst_factor(op.comm, op.n_channels, t), 0.0);
    }
    return s;
  }
};

// ---- coupled timeline -------------------------------------------------------------------------
/// One op of one rank in one step.
struct rank_op {
  int group = 0, op = 0;  ///< indices into model::program
  double start = 0;       ///< this rank's kernel start (its own arrival), s
  double end = 0;         ///< the op's common end (slowest channel), s
  double t0 = 0;          ///< the op's data flow start (its last member's arrival), s
  std::array<double, max_channels> ch_end{};   ///< each channel's common end, s
  std::array<double, max_channels> ch_stop{};  ///< this rank's KernelCh stop per channel index
  bool hung = false;      ///< started, never completes
};

/// Every rank's ops of one step, computed for the whole job:
///  * arrival_r = own timeline (end of its previous op) + compute + uniform [0, J) + straggler delay;
///  * an op (per communicator instance; P2P per pair) starts its data flow when its last member arrives and
///    each channel ends after latency + bytes / (busbw x that channel's slowest edge); the op ends with its
///    slowest channel; the next op of a group starts at that end;
///  * KernelCh start = own arrival, KernelCh stop = the channel's common end + up to one hop (link latency);
///  * a hung op (the --hang-rank rank's first op at/after T, or any op with an already-blocked member)
///    starts on every member that arrives and never completes; those ranks issue nothing more.
class timeline {
 public:
  explicit timeline(const model& m)
      : m_(m), n_(m.o.nodes * m.o.gpus), cur_(std::size_t(n_), 0.0), arr_(std::size_t(n_), 0.0),
        blocked_(std::size_t(n_), 0), ops_(std::size_t(n_)),
        arrivals_(m.program.size(), std::vector<double>(std::size_t(n_), 0.0)) {}

  int ranks() const noexcept { return n_; }
  bool blocked(int r) const noexcept { return blocked_[std::size_t(r)] != 0; }
  double now(int r) const noexcept { return cur_[std::size_t(r)]; }
  const std::vector<rank_op>& ops(int r) const noexcept { return ops_[std::size_t(r)]; }
  /// Rank r's launch time of group g in the last step (valid where r took part in g).
  double arrival(int g, int r) const noexcept { return arrivals_[std::size_t(g)][std::size_t(r)]; }
  const model& the_model() const noexcept { return m_; }
  /// The job's clock, the same for every rank: the earliest unblocked rank's time (the latest if all blocked).
  double job_now() const noexcept {
    double lo = 1e300, hi = 0;
    for (int r = 0; r < n_; ++r) {
      hi = std::max(hi, cur_[std::size_t(r)]);
      if (!blocked(r)) lo = std::min(lo, cur_[std::size_t(r)]);
    }
    return lo < 1e300 ? lo : hi;
  }

  /// Advance every unblocked rank by one training step.
  void step(u64 s) {
    const options& o = m_.o;
    for (auto& v : ops_) v.clear();
    const double c = m_.step_compute(s);
    for (std::size_t gi = 0; gi < m_.program.size(); ++gi) {
      const sim_group& g = m_.program[gi];
      if (g.first_step_only && s != 0) continue;
      for (int r = 0; r < n_; ++r) {
        if (blocked(r)) continue;
        const double t = cur_[std::size_t(r)] + c * g.compute_frac;
        arr_[std::size_t(r)] = t + m_.jitter_s() * unit01(mix(mix(o.seed, s), u64(gi) * 65536 + u64(r))) + m_.straggle(r, t);
      }
      arrivals_[gi] = arr_;
      const bool ce_only = std::all_of(g.ops.begin(), g.ops.end(), [](const sim_op& op) { return op.ce; });
      const comm_kind k = g.ops.front().comm;
      if (ce_only) {
        for (int r = 0; r < n_; ++r)
          if (!blocked(r)) {
            rank_op ro;
            ro.group = int(gi);
            ro.start = ro.end = arr_[std::size_t(r)];
            ops_[std::size_t(r)].push_back(ro);
          }
      } else if (k == comm_kind::pp) {
        run_p2p(s, gi);
      } else {
        for (const auto& members : instances(k)) run_coll(s, gi, members);
      }
      // Ranks outside every instance of this group (none today) just did their compute.
      for (int r = 0; r < n_; ++r)
        if (!blocked(r)) cur_[std::size_t(r)] = std::max(cur_[std::size_t(r)], arr_[std::size_t(r)]);
    }
    for (int r = 0; r < n_; ++r)
      if (!blocked(r)) cur_[std::size_t(r)] += c * m_.tail_compute_frac();
  }

 private:
  std::optional<double> hang_time(int r) const {
    std::optional<double> t;
    for (const auto& h : m_.o.hangs)
      if (h.rank == r && (!t || h.t < *t)) t = h.t;
    return t;
  }
  bool hangs_now(int r) const {
    const auto t = hang_time(r);
    return t && arr_[std::size_t(r)] >= *t;
  }
  std::vector<std::vector<int>> instances(comm_kind k) const {
    const int N = m_.o.nodes, G = m_.o.gpus;
    std::vector<std::vector<int>> v;
    if (k == comm_kind::tp) {
      for (int n = 0; n < N; ++n) {
        v.emplace_back();
        for (int l = 0; l < G; ++l) v.back().push_back(n * G + l);
      }
    } else if (k == comm_kind::fsdp) {
      v.emplace_back();
      for (int r = 0; r < N * G; ++r) v.back().push_back(r);
    } else {
      for (int l = 0; l < G; ++l) {
        v.emplace_back();
        for (int n = 0; n < N; ++n) v.back().push_back(n * G + l);
      }
    }
    return v;
  }
  /// Per-channel ends of op `op` whose data flow starts at t0 on the nodes [n0, n1] (GPU `local`).
  void channel_ends(u64 s, std::size_t gi, std::size_t oi, int local, int n0, int n1, double t0, u64 inst,
                    std::array<double, max_channels>& ends, double& end) const {
    const sim_op& op = m_.program[gi].ops[oi];
    const double j = jitter_frac * unit_jitter(mix(mix(m_.o.seed, s), mix(u64(gi) * 16 + oi, inst)));
    const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
    const int ch_lo = op.channel_lo >= 0 ? op.channel_lo : 0;
    end = t0;
    for (int c = 0; c < nch; ++c) {
      const double f = m_.channel_factor(op.comm, local, n0, n1, ch_lo + c, t0);
      ends[std::size_t(c)] = t0 + m_.duration(op, f, j);
      end = std::max(end, ends[std::size_t(c)]);
    }
  }
  void stops_for(int r, u64 s, std::size_t gi, const sim_op& op, rank_op& ro) const {
    const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
    for (int c = 0; c < nch; ++c) {
      const double hop = m_.latency(op.comm) * unit01(mix(mix(m_.o.seed, s), u64(r) * 4096 + gi * 64 + u64(c)));
      ro.ch_stop[std::size_t(c)] += hop;
    }
  }
  void run_coll(u64 s, std::size_t gi, const std::vector<int>& members) {
    const sim_group& g = m_.program[gi];
    bool hung = false;
    double t0 = 0;
    for (int r : members) {
      if (blocked(r) || hangs_now(r)) hung = true;
      else t0 = std::max(t0, arr_[std::size_t(r)]);
    }
    const int local = m_.o.gpus > 0 ? members.front() % m_.o.gpus : 0;
    const int n0 = members.front() / m_.o.gpus, n1 = members.back() / m_.o.gpus;
    if (hung) {
      for (int r : members) {
        if (blocked(r)) continue;
        for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
          rank_op ro;
          ro.group = int(gi);
          ro.op = int(oi);
          ro.start = arr_[std::size_t(r)];
          ro.hung = true;
          ops_[std::size_t(r)].push_back(ro);
        }
      }
      for (int r : members) blocked_[std::size_t(r)] = 1;
      return;
    }
    for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
      const sim_op& op = g.ops[oi];
      std::array<double, max_channels> ends{};
      double end = t0;
      if (!op.ce) channel_ends(s, gi, oi, local, n0, n1, t0, u64(members.front()), ends, end);
      for (int r : members) {
        rank_op ro;
        ro.group = int(gi);
        ro.op = int(oi);
        ro.start = oi == 0 ? arr_[std::size_t(r)] : t0;
        ro.end = end;
        ro.t0 = t0;
        ro.ch_end = ends;
        ro.ch_stop = ends;
        if (!op.ce) stops_for(r, s, gi, op, ro);
        ops_[std::size_t(r)].push_back(ro);
      }
      t0 = end;
    }
    for (int r : members) cur_[std::size_t(r)] = t0;
  }
  /// pp: rank (node k, GPU l) sends to (k+1, l) and receives from (k-1, l) in one group; each pair is coupled.
  void run_p2p(u64 s, std::size_t gi) {
    const sim_group& g = m_.program[gi];
    const int N = m_.o.nodes, G = m_.o.gpus;
    std::vector<char> newly(std::size_t(n_), 0);
    std::vector<double> done(std::size_t(n_), 0.0);
    for (int r = 0; r < n_; ++r) done[std::size_t(r)] = arr_[std::size_t(r)];
    for (int l = 0; l < G; ++l)
      for (int k = 0; k + 1 < N; ++k) {
        const int a = k * G + l, b = (k + 1) * G + l;
        if (blocked(a) && blocked(b)) continue;
        const bool hung = blocked(a) || blocked(b) || hangs_now(a) || hangs_now(b);
        const double t0 = std::max(blocked(a) ? 0.0 : arr_[std::size_t(a)], blocked(b) ? 0.0 : arr_[std::size_t(b)]);
        for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
          const sim_op& op = g.ops[oi];
          const int r = op.p2p_dir > 0 ? a : b;  // the send runs on a, the matching recv on b
          if (blocked(r)) continue;
          rank_op ro;
          ro.group = int(gi);
          ro.op = int(oi);
          ro.start = arr_[std::size_t(r)];
          if (hung) {
            ro.hung = true;
            newly[std::size_t(r)] = 1;
          } else {
            channel_ends(s, gi, oi, l, k, k + 1, t0, u64(a), ro.ch_stop, ro.end);
            ro.t0 = t0;
            ro.ch_end = ro.ch_stop;
            stops_for(r, s, gi, op, ro);
            done[std::size_t(r)] = std::max(done[std::size_t(r)], ro.end);
          }
          ops_[std::size_t(r)].push_back(ro);
        }
      }
    // A rank's group ends when both its Send and its Recv are done; program order (Send before Recv).
    for (auto& v : ops_)
      std::stable_sort(v.begin(), v.end(), [](const rank_op& x, const rank_op& y) {
        return x.group != y.group ? x.group < y.group : x.op < y.op;
      });
    for (int r = 0; r < n_; ++r) {
      if (newly[std::size_t(r)]) blocked_[std::size_t(r)] = 1;
      else if (!blocked(r)) cur_[std::size_t(r)] = done[std::size_t(r)];
    }
  }

  const model& m_;
  int n_;
  std::vector<double> cur_, arr_;
  std::vector<char> blocked_;
  std::vector<std::vector<rank_op>> ops_;
  std::vector<std::vector<double>> arrivals_;
};

// ---- proxy steps ---------------------------------------------------------------------------------
/// One network connection of an op on one rank: direction, peer (global rank, and its rank in the comm),
/// and the nodes at both ends of the wire.
struct connection { bool is_send; int peer_global; int peer_comm_rank; int channel; };

/// This rank's network connections for op `op` (NCCL creates ProxyOps for network transports only):
/// fsdp ring channel c crosses nodes at the GPU next to its NIC (c mod K): that GPU receives from the previous
/// node and sends to the next; dp (tree, modelled as a ring over nodes) and pp cross on every channel.
inline int connections(const model& m, const sim_op& op, int rank, connection* out, int cap) {
  const options& o = m.o;
  if (!comm_network(o, op.comm)) return 0;
  const int G = o.gpus, N = o.nodes, node = rank / G, local = rank % G;
  const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
  int n = 0;
  auto push = [&](bool send, int peer_node, int c) {
    const int pg = peer_node * G + local;
    if (n < cap) out[n++] = connection{send, pg, op.comm == comm_kind::fsdp ? pg : peer_node, c};
  };
  for (int c = 0; c < nch; ++c) {
    if (op.comm == comm_kind::fsdp) {
      const int K = o.nic_count();
      if (m.nic_of(op.comm, local, c) * G / K != local) continue;
    }
    if (op.comm == comm_kind::pp) {
      push(op.p2p_dir > 0, node + op.p2p_dir, c);
      continue;
    }
    push(true, (node + 1) % N, c);
    push(false, (node + N - 1) % N, c);
  }
  return n;
}

/// Step times of one connection (seconds). The op's channel data flows from t0 at the pace of its slowest edge
/// (d per step, ending at the channel's end); this edge moves a step in x = d * pace / edge_factor <= d:
///  send: posted at launch (all steps fit NCCL_STEPS); GPU has step k's chunk at a_s (k = 0) or when the
///        ring's pace delivers it (T_k - x); the isend is accepted once the receiver has arrived and the wire is
///        free; network completion x later;
///  recv: posted at launch; data arrives when the sender's step completes; no GDR flush; the GPU consumes it
///        within a small fraction of a step (not before this rank arrived).
struct step_s { double post, ready, sent, done; };
inline int step_times(const model& m, const sim_op& op, const rank_op& ro, int channel, int self, int peer, bool is_send,
                      double a_self, double a_peer, step_s* out, std::size_t& step_bytes) {
  const options& o = m.o;
  const traffic tr = traffic_of(op, comm_size(o, op.comm));
  const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
  const double wire = tr.size_bytes * tr.factor / nch;
  const int n = std::clamp(int((wire + chunk_bytes - 1) / chunk_bytes), 1, max_proxy_steps);
  step_bytes = std::size_t(wire / n);
  const int G = o.gpus, local = self % G;
  const int src = (is_send ? self : peer) / G, dst = (is_send ? peer : self) / G;
  const int ch = (op.channel_lo >= 0 ? op.channel_lo : 0) + channel;
  const int nic = m.nic_of(op.comm, local, ch);
  const double t0 = ro.t0, L = m.latency(op.comm);
  const double d = std::max(0.0, ro.ch_end[std::size_t(channel)] - t0 - L) / n;
  // The channel's pace (slowest edge) and this edge's own speed, at the op's start.
  const int n0 = op.comm == comm_kind::pp ? std::min(src, dst) : 0;
  const int n1 = op.comm == comm_kind::pp ? std::max(src, dst) : o.nodes - 1;
  const double pace = m.channel_factor(op.comm, local, n0, n1, ch, t0);
  const double edge = std::max(0.01, std::min(m.net_link(src, nic, t0), m.net_link(dst, nic, t0)));
  const double x = d * std::min(1.0, pace / edge);
  const double a_s = is_send ? a_self : a_peer, a_r = is_send ? a_peer : a_self;
  double prev_done = 0, prev_consumed = 0;
  for (int k = 0; k < n; ++k) {
    const double tk = t0 + L + (k + 1) * d;  // the ring's pace delivers step k here
    const double ready = k == 0 ? a_s : std::max(a_s, tk - x);
    const double sent = std::max({ready, a_r, prev_done});
    const double done = sent + x;
    prev_done = done;
    if (is_send) {
      out[k] = step_s{a_s, ready, sent, done};
    } else {
      const double got = std::max(a_r, done);
      const double consumed = std::max({got + 0.02 * d, prev_consumed, a_r});
      prev_consumed = consumed;
      out[k] = step_s{a_r, got, got, consumed};
    }
  }
  return n;
}

}  // namespace ncclinsp::sim::job
