#pragma once
/// ncclinsp-sim's configuration (`options`, one struct set by the command line) and its fault schedule:
/// fault windows and kinds, the rank faults (`--hang-rank`, `--stall-rank`, `--pause-rank`, `--kill-rank`),
/// and the `--random-fault` draw.
/// Thread-safety: plain data and pure functions.

#include "job_hash.hpp"
#include "nccl_release.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ncclinsp::sim::job {

// ---- configuration ------------------------------------------------------------------------------
struct window {
  double t0 = 0, t1 = 0;
  bool active(double t) const noexcept { return t >= t0 && t < t1; }
};
/// One injected fault. node/nic/rank: -1 where the kind has none.
enum class fault_kind : std::uint8_t { net_degrade, slow_host, slow_nic, straggler, nvlink_degrade };
constexpr const char* fault_name(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::net_degrade:
      return "net_degrade";
    case fault_kind::slow_host:
      return "slow_host";
    case fault_kind::slow_nic:
      return "slow_nic";
    case fault_kind::straggler:
      return "straggler";
    case fault_kind::nvlink_degrade:
      return "nvlink_degrade";
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
/// A fault of one rank's process, as NCCL's peers see it (sim/README.md "Hangs, stalls, pauses and kills"):
/// hang: its first op at/after t never completes (a fault inside the collective: every member in flight);
/// stall: it issues no NCCL op from t on (stuck in user code); pause: it issues none in [t, t + d) (a
/// checkpoint write), then carries on; kill: its process dies at t (one process per GPU).
enum class rank_fault_kind : std::uint8_t { hang, stall, pause, kill };
constexpr const char* rank_fault_name(rank_fault_kind k) noexcept {
  switch (k) {
    case rank_fault_kind::hang:
      return "hang";
    case rank_fault_kind::stall:
      return "stall";
    case rank_fault_kind::pause:
      return "pause";
    case rank_fault_kind::kill:
      return "kill";
  }
  return "?";
}
struct rank_fault {
  rank_fault_kind kind = rank_fault_kind::hang;
  int rank = 0;   ///< global rank
  double t = 0;   ///< onset, simulated s
  double d = -1;  ///< pause: its length, s; -1: to the end of the run
};

/// Real-world network noise on a healthy fabric (sim/README.md "Network noise"). All off by default.
/// Congestion bursts (--congestion): other jobs' traffic on shared links, one burst at a time.
/// Scope: every NIC (fabric), NIC k of every node (rail: one rail's leaf switch), or one NIC of one node
/// (nic: that node's link to its leaf).
enum class burst_scope : std::uint8_t { fabric, rail, nic, mixed };
constexpr const char* scope_name(burst_scope s) noexcept {
  return s == burst_scope::fabric ? "fabric"
         : s == burst_scope::rail ? "rail"
         : s == burst_scope::nic  ? "nic"
                                  : "mixed";
}
struct congestion {
  double gap_s = 0;  ///< mean quiet time between bursts (uniform [gap/2, 3 gap/2]); 0 = no bursts
  double len_s = 0;  ///< longest burst: each lasts uniform [len/2, len]
  double pct = 0;    ///< bandwidth reduction during a burst, %
  burst_scope scope = burst_scope::fabric;
};
/// One drawn burst: bandwidth x factor on its NICs during w (node/nic -1: every one).
struct burst {
  window w;
  double factor = 1;
  int node = -1, nic = -1;
};

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
  /// --nccl: the NCCL release reproduced (nccl_release.hpp); nullptr = the model (nccl_profile::of).
  const nccl_release* nccl = nullptr;
  bool serving = false;   ///< --workload serving: tensor-parallel decode (sim/serving.hpp)
  bool cases = false;     ///< --workload cases: examples/nccl_wrappers --cases on one rank (sim/cases_workload.hpp)
  bool alltoall = false;  ///< --workload alltoall: MoE expert-parallel all-to-all (sim/alltoall_workload.hpp)
  std::size_t a2a_bytes = 1 << 20;  ///< --a2a-bytes: one all-to-all chunk (bytes per peer, the rank itself too)
  double bad_timer = 0;             ///< --bad-timer: this share of peer ops carries a garbage KernelCh stop timer
  std::string trace;                ///< --trace FILE: every plugin call in the shared trace text (per process)
  bool cuda_graphs = false;         ///< tp AllReduce groups captured once, then replayed every step
  bool collnet = false;             ///< dp AllReduce through CollNet (SHARP): COLLNET_DIRECT
  bool nonblocking = false;         ///< non-blocking communicators: eager launches from an async group thread
  double abort_at = -1;             ///< every rank aborts at this simulated second (ops left open)
  int recv_restarts = 0;            ///< each recv ProxyStep re-started this many times
  int drop_kernel_ch = 0;           ///< the profiler thread fails to allocate every Nth KernelCh op (0: never)
  std::string truth;                ///< --truth FILE: kernels' true GPU time summed per rank, comm, function, size
  std::string truth_ops;            ///< --truth-ops FILE: one line per op (short runs)
  bool verbose = false;
  u64 seed = 1;
  double launch_jitter_us = 5;  ///< each rank's launch time: + uniform [0, J) per op group
  double wobble_pct = 0;        ///< healthy fabric wobble: every NIC x (1 + W/100 sin(2 pi t / period))
  double wobble_period_s = 120;
  std::vector<fault> faults;
  std::vector<rank_fault> rank_faults;  ///< --hang-rank, --stall-rank, --pause-rank, --kill-rank
  double net_stall_at = -1;             ///< --net-stall: network ops running at/after this second never complete
  bool process_per_gpu = false;         ///< one process per GPU (--process-per-gpu; --kill-rank implies it)
  int gpu_index = -1;                   ///< a per-GPU child's local GPU (hidden --gpu-index)
  // Network noise (all 0 = off, the default: the timeline is then exactly the noise-free one).
  std::vector<congestion> bursts_cfg;      ///< one per --congestion
  std::vector<std::vector<burst>> bursts;  ///< per --congestion, drawn from the seed (draw_bursts), by onset
  double tail_frac = 0;                    ///< --heavy-tail: this share of op instances runs 2..tail_max x slower
  double tail_max = 10;
  double op_noise_pct = 0;   ///< --op-noise: per-op transfer time x lognormal (sigma PCT %) instead of +-2 % uniform
  double pause_every_s = 0;  ///< --pause: every this many seconds of job time ...
  double pause_len_s = 0;    ///< ... every rank stops issuing collectives for this long (checkpoint)
  double warmup_s = 0;       ///< --warmup: links start pct % slower, back to nominal linearly by warmup_s
  double warmup_pct = 0;
  bool noisy() const noexcept {
    return !bursts.empty() || tail_frac > 0 || (pause_every_s > 0 && pause_len_s > 0) || warmup_s > 0 ||
           op_noise_pct > 0;
  }
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
    case fault_kind::slow_host:
    case fault_kind::nvlink_degrade:
      f.node = int(h % u64(o.nodes));
      break;
    case fault_kind::slow_nic:
      f.node = int(h % u64(o.nodes));
      f.nic = int(splitmix(h) % u64(o.nic_count()));
      break;
    case fault_kind::straggler:
      f.rank = int(h % u64(o.nodes * o.gpus));
      f.ms = 0;  // sized below against the step
      break;
    case fault_kind::net_degrade:
      break;
  }
  f.random = true;
  return f;
}

/// The congestion bursts of one --congestion (`index`) over a run of `run_s` simulated seconds: quiet gaps
/// uniform [gap/2, 3 gap/2] (a neighbour job's traffic comes back about periodically; bursts of one draw
/// never overlap nor follow each other closely), lengths uniform [len/2, len]; the scope (mixed: fabric,
/// rail or nic, a third each) and its NIC drawn per burst. Deterministic in (seed, index, job shape).
inline std::vector<burst> draw_bursts(const congestion& c, std::size_t index, const options& o, double run_s) {
  std::vector<burst> v;
  if (c.gap_s <= 0 || c.len_s <= 0 || c.pct <= 0) return v;
  u64 h = mix(mix(o.seed, 0xb0257), u64(index));
  for (double t = 0;;) {
    h = splitmix(h);
    t += c.gap_s * (0.5 + unit01(h));
    if (t >= run_s) break;
    burst b;
    h = splitmix(h);
    b.w = window{t, t + c.len_s * (0.5 + 0.5 * unit01(h))};
    b.factor = 1.0 - c.pct / 100.0;
    h = splitmix(h);
    const burst_scope scope = c.scope == burst_scope::mixed ? burst_scope(splitmix(h ^ 0x5c0be) % 3) : c.scope;
    if (scope != burst_scope::fabric) b.nic = int(h % u64(o.nic_count()));
    if (scope == burst_scope::nic) b.node = int(splitmix(h) % u64(o.nodes));
    v.push_back(b);
    t = b.w.t1;  // bursts of one draw never overlap
  }
  return v;
}

}  // namespace ncclinsp::sim::job
