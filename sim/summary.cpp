/// ncclinsp-sim's `--summary` JSON writer (summary.hpp).

#include "summary.hpp"

#include "scenario_summary.hpp"

#include "job_model.hpp"
#include "nccl_driver.hpp"

#include <ncclinsp/format/json_writer.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

namespace {

/// The summary's layout: ", " and ": " between items; numbers as an ostream writes them (%.6g).
constexpr ncclinsp::format::json_style summary_style{", ", ": "};
constexpr int summary_precision = 6;

void fault_json(ncclinsp::format::json_writer& j, const options& o, const fault& f) {
  j.begin_object().key("kind").value(fault_name(f.kind));
  if (f.node >= 0) j.key("node").value(f.node).key("node_name").value(o.node_prefix + std::to_string(f.node));
  if (f.nic >= 0) j.key("nic").value(f.nic);
  if (f.rank >= 0)
    j.key("rank")
        .value(f.rank)
        .key("node")
        .value(f.rank / o.gpus)
        .key("node_name")
        .value(o.node_prefix + std::to_string(f.rank / o.gpus))
        .key("ms")
        .general(f.ms, summary_precision);
  else
    j.key("pct").general(f.pct, summary_precision);
  j.key("t0")
      .general(f.w.t0, summary_precision)
      .key("t1")
      .general(f.w.t1, summary_precision)
      .key("random")
      .value(f.random)
      .end_object();
}

/// The busbw the plugin should measure (bus bytes / kernel time, summed over ranks and ops, as a rate) per
/// comm x collective x size, from `steps` steps of the same timeline with `faults` active all the time.
std::map<std::string, double> measured_busbw(const options& base, const std::vector<fault>& faults, int steps) {
  options o = base;
  o.faults = faults;
  for (auto& f : o.faults) f.w = window{0, 1e300};
  o.rank_faults.clear();
  o.net_stall_at = -1;
  o.bursts.clear();  // the expected figures are noise-free
  o.tail_frac = o.pause_every_s = o.warmup_s = o.op_noise_pct = 0;
  const model m(o);
  timeline tl(m);
  std::map<std::string, std::pair<double, double>> acc;
  for (int s = 0; s < steps; ++s) {
    tl.step(u64(s));
    for (int r = 0; r < tl.ranks(); ++r)
      for (const rank_op& ro : tl.ops(r)) {
        const sim_op& op = m.program[std::size_t(ro.group)].ops[std::size_t(ro.op)];
        if (op.ce || ro.hung) continue;
        const traffic tr = traffic_of(op, comm_size(o, op.comm));
        double stop = ro.start;
        for (std::size_t c = 0; c < std::min<std::size_t>(op.n_channels, max_channels); ++c)
          stop = std::max(stop, ro.ch_stop[c]);
        auto& a = acc[std::string(kind_name(op.comm)) + func_name(op.func) + std::to_string(op.bytes)];
        a.first += tr.size_bytes * tr.factor / 1e9;  // as a rate over a window: sum(bytes) / sum(time)
        a.second += stop - ro.start;
      }
  }
  std::map<std::string, double> out;
  for (const auto& [k, v] : acc) out[k] = v.first / v.second;
  return out;
}

}  // namespace

void write_summary(const options& o, const model& m, const std::string& path) {
  constexpr int sim_steps = 40;
  const auto nominal = measured_busbw(o, {}, sim_steps);
  std::vector<std::map<std::string, double>> per_fault;
  for (const auto& f : o.faults) per_fault.push_back(measured_busbw(o, {f}, sim_steps));
  std::string out;
  ncclinsp::format::json_writer j(out, summary_style);
  auto num = [&](std::string_view k, double v) { j.key(k).general(v, summary_precision); };
  j.begin_object({"\n  ", "\n"});  // one top-level member a line
  j.key("config").begin_object().key("plugin").value(o.plugin).key("abi").value(o.abi).key("nodes").value(o.nodes);
  j.key("gpus").value(o.gpus).key("nics").value(o.nic_count());
  num("duration_s", o.duration);
  j.key("steps").value(o.steps);
  num("speed", o.speed);
  j.key("node_prefix").value(o.node_prefix).key("seed").value(o.seed);
  num("launch_jitter_us", o.launch_jitter_us);
  num("wobble_pct", o.wobble_pct);
  num("wobble_period_s", o.wobble_period_s);
  num("nvlink_busbw_gbs", nvlink_busbw / 1e9);
  num("network_busbw_gbs", network_busbw / 1e9);
  num("nominal_step_s", m.nominal_step_s);
  num("compute_s", m.compute_s);
  num("flop_per_step_per_gpu", m.flop_per_step);
  j.end_object();
  if (o.noisy()) {  // only when asked for: a run without noise writes what it always wrote
    j.key("noise").begin_object();
    j.key("congestion").begin_array();
    for (const auto& c : o.bursts_cfg) {
      j.begin_object();
      num("gap_s", c.gap_s);
      num("len_s", c.len_s);
      num("pct", c.pct);
      j.key("scope").value(scope_name(c.scope)).end_object();
    }
    j.end_array();
    num("heavy_tail_frac", o.tail_frac);
    num("heavy_tail_max", o.tail_max);
    num("op_noise_pct", o.op_noise_pct);
    num("pause_every_s", o.pause_every_s);
    num("pause_len_s", o.pause_len_s);
    num("warmup_s", o.warmup_s);
    num("warmup_pct", o.warmup_pct);
    j.key("bursts").begin_array();
    for (std::size_t i = 0; i < o.bursts.size(); ++i)
      for (const auto& b : o.bursts[i]) {
        j.begin_object();
        j.key("congestion").value(int(i));
        num("t0", b.w.t0);
        num("t1", b.w.t1);
        num("pct", 100.0 * (1.0 - b.factor));
        j.key("node").value(b.node).key("nic").value(b.nic).end_object();
      }
    j.end_array().end_object();
  }
  // Per kind (the old keys net_degrade / slow_host / hang_rank kept), plus one list of every fault.
  j.key("faults").begin_object();
  for (fault_kind k : {fault_kind::net_degrade, fault_kind::slow_host, fault_kind::slow_nic, fault_kind::straggler,
                       fault_kind::nvlink_degrade}) {
    j.key(fault_name(k)).begin_array();
    for (const auto& f : o.faults)
      if (f.kind == k) fault_json(j, o, f);
    j.end_array();
  }
  j.key("hang_rank").begin_array();
  for (const auto& h : o.rank_faults) {
    if (h.kind != rank_fault_kind::hang) continue;
    j.begin_object().key("rank").value(h.rank);
    num("t", h.t);
    j.end_object();
  }
  j.end_array().key("all").begin_array();
  for (const auto& f : o.faults) fault_json(j, o, f);
  j.end_array().end_object();
  write_scenarios(j, o, m, summary_precision);
  const auto rf = std::find_if(o.faults.begin(), o.faults.end(), [](const fault& f) { return f.random; });
  j.key("random_fault");
  if (rf == o.faults.end())
    j.null();
  else
    fault_json(j, o, *rf);
  j.key("busbw").begin_array({"\n    ", "\n  "});
  std::vector<std::string> seen;
  for (const auto& g : m.program)
    for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
      const sim_op& op = g.ops[oi];
      if (op.ce) continue;
      const std::string key = std::string(kind_name(op.comm)) + func_name(op.func) + std::to_string(op.bytes);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      const int n = comm_size(o, op.comm);
      const bool first_of_group = oi == 0 || op.p2p_dir != 0;
      j.begin_object()
          .key("comm")
          .value(kind_name(op.comm))
          .key("collective")
          .value(func_name(op.func))
          .key("nranks")
          .value(n);
      j.key("n_nodes").value(comm_network(o, op.comm) ? o.nodes : 1).key("network").value(comm_network(o, op.comm));
      j.key("bytes_per_rank")
          .value(op.bytes)
          .key("algo")
          .value(op.sym ? "AGxLL_R" : op.algo)
          .key("proto")
          .value(op.sym ? "" : op.proto);
      j.key("n_channels").value(int(op.n_channels));
      num("model_busbw_gbs", m.base_busbw(op.comm) / 1e9);
      num("link_busbw_gbs", m.busbw_gbs(op, 1.0, false));
      num("expected_wait_busbw_gbs", m.busbw_gbs(op, 1.0, first_of_group));
      num("nominal_busbw_gbs", nominal.at(key));
      // Simulated with that fault alone, averaged over every rank (all ranks of an op share its pace).
      j.key("degraded").begin_array();
      for (std::size_t fi = 0; fi < o.faults.size(); ++fi) {
        const fault& f = o.faults[fi];
        const auto it = per_fault[fi].find(key);
        j.begin_object().key("fault").value(fault_name(f.kind));
        num("t0", f.w.t0);
        num("t1", f.w.t1);
        num("busbw_gbs", it == per_fault[fi].end() ? 0.0 : it->second);
        j.end_object();
      }
      j.end_array().end_object();
    }
  j.end_array().key("phases").begin_array({"\n    ", "\n  "});
  std::vector<double> cuts{0.0};
  for (const auto& f : o.faults) {
    cuts.push_back(f.w.t0);
    cuts.push_back(f.w.t1);
  }
  const double end = o.end_time(m.nominal_step_s);
  cuts.push_back(std::max(end, 0.0));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] >= end) break;
    const double t1 = std::min(cuts[i + 1], end);
    const double mid = (cuts[i] + t1) / 2;
    const double st = m.expected_step(mid);
    std::string active;
    for (const auto& f : o.faults)
      if (f.w.active(mid) && active.find(fault_name(f.kind)) == std::string::npos)
        active += std::string(active.empty() ? "" : ",") + fault_name(f.kind);
    j.begin_object();
    num("t0", cuts[i]);
    num("t1", t1);
    j.key("faults").value(active.empty() ? "none" : active);
    num("step_s", st);
    num("tflops", m.flop_per_step / st / 1e12);
    j.end_object();
  }
  j.end_array().end_object();
  out += '\n';
  std::ofstream f(path, std::ios::trunc);
  f << out;
  if (!f) std::fprintf(stderr, "ncclinsp-sim: cannot write the summary to %s\n", path.c_str());
}

}  // namespace ncclinsp::sim::app
