#pragma once
/// ncclinsp-sim's bandwidth model (physics, sim/README.md "Timing model"): link factors per node, NIC and
/// NVLink under the fault schedule, an op's duration at a channel's pace, expected busbw and step time.
/// Thread-safety: const after construction.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "workload.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

namespace ncclinsp::sim::job {

// ---- timing model -------------------------------------------------------------------------------
struct model {
  const options& o;
  std::vector<sim_group> program;
  double compute_s = 0;      // per step
  double flop_per_step = 0;  // per GPU
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
    if (o.wobble_pct > 0)
      f += o.wobble_pct / 100.0 * std::sin(2.0 * 3.141592653589793 * t / std::max(o.wobble_period_s, 1.0));
    for (const auto& x : o.faults) {
      if (!x.w.active(t)) continue;
      if (x.kind == fault_kind::net_degrade || (x.kind == fault_kind::slow_host && x.node == node) ||
          (x.kind == fault_kind::slow_nic && x.node == node && x.nic == nic))
        f *= 1.0 - x.pct / 100.0;
    }
    if (!o.bursts.empty()) f *= burst_factor(node, nic, t);
    if (o.warmup_s > 0) f *= warmup_factor(t);
    return f;
  }
  /// Congestion bursts active on NIC `nic` of `node` at t: each --congestion's bursts are sorted by onset
  /// and never overlap one another; bursts of different --congestion options multiply.
  double burst_factor(int node, int nic, double t) const {
    double f = 1.0;
    for (const auto& draw : o.bursts) {
      const auto it =
          std::upper_bound(draw.begin(), draw.end(), t, [](double x, const burst& b) { return x < b.w.t0; });
      if (it == draw.begin()) continue;
      const burst& b = *(it - 1);
      if (b.w.active(t) && (b.node < 0 || b.node == node) && (b.nic < 0 || b.nic == nic)) f *= b.factor;
    }
    return f;
  }
  /// Job start: every link pct % slower at t = 0, nominal again linearly by warmup_s (connection setup,
  /// memory registration, clocks ramping up).
  double warmup_factor(double t) const {
    return t >= o.warmup_s ? 1.0 : 1.0 - o.warmup_pct / 100.0 * (1.0 - std::max(t, 0.0) / o.warmup_s);
  }
  /// Heavy-tailed per-op slowdown (--heavy-tail): a share tail_frac of op instances (OS jitter, a
  /// retransmit, an ECC scrub) take 2..tail_max x their transfer time, log-uniform; 1 for the others.
  double tail_factor(u64 h) const {
    if (o.tail_frac <= 0 || unit01(h) >= o.tail_frac) return 1.0;
    return 2.0 * std::pow(std::max(o.tail_max, 2.0) / 2.0, unit01(splitmix(h)));
  }
  /// An op instance's relative transfer-time noise, the same on every rank (a collective's ranks run
  /// in lockstep): uniform in +-jitter_frac, or with --op-noise lognormal, median 1, sigma op_noise_pct %
  /// (Box-Muller from two hashes): a longer tail to the slow side than to the fast one.
  double op_jitter(u64 h) const {
    if (o.op_noise_pct <= 0) return jitter_frac * unit_jitter(h);
    const double u1 = 1.0 - unit01(h), u2 = unit01(splitmix(h));  // u1 in (0, 1]
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    return std::exp(o.op_noise_pct / 100.0 * z) - 1.0;
  }
  /// NVLink bandwidth factor of `node` at time t.
  double nvl_link(int node, double t) const {
    double f = 1.0;
    for (const auto& x : o.faults)
      if (x.kind == fault_kind::nvlink_degrade && x.node == node && x.w.active(t)) f *= 1.0 - x.pct / 100.0;
    if (o.warmup_s > 0) f *= warmup_factor(t);
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
          f = std::min(
              f, k == comm_kind::tp ? channel_factor(k, l, n, n, ch, t) : channel_factor(k, l, 0, o.nodes - 1, ch, t));
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

}  // namespace ncclinsp::sim::job
