/// ncclinsp-sim's command line (cli.hpp).

#include "cli.hpp"

#include "job_model.hpp"

#include <CLI/CLI.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

namespace {

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

}  // namespace

std::optional<int> parse_command_line(int argc, char** argv, options& o) {
  CLI::App app{"ncclinsp-sim: simulated multi-node LLM training job driving an NCCL profiler plugin"};
  app.add_option("--plugin", o.plugin, "profiler plugin .so")->required();
  std::vector<int> abi_choices{0};
  abi_choices.insert(abi_choices.end(), ncclinsp::abi::versions.begin(), ncclinsp::abi::versions.end());
  app.add_option("--abi", o.abi,
                 "profiler ABI: 0 = newest exported, " + std::to_string(ncclinsp::abi::oldest) + ".." +
                     std::to_string(ncclinsp::abi::newest))
      ->check(CLI::IsMember(abi_choices));
  app.add_option("--nodes", o.nodes, "simulated nodes")->check(CLI::Range(1, 4096));
  app.add_option("--gpus", o.gpus, "GPUs per node")->check(CLI::Range(1, 16));
  auto* dur = app.add_option("--duration", o.duration, "simulated seconds to run")->check(CLI::NonNegativeNumber);
  auto* stp = app.add_option("--steps", o.steps, "training steps to run")->check(CLI::NonNegativeNumber);
  dur->excludes(stp);
  app.add_option("--speed", o.speed, "1 = real time, 10 = 10x faster, 0 = as fast as possible")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--out", o.out, "output directory (per node: DIR/<node>/)");
  app.add_option("--node-prefix", o.node_prefix, "node name prefix (node<k>)");
  app.add_option("--cuda-driver", o.cuda_driver,
                 "simulated CUDA driver .so (default: libncclinsp-simcuda.so next to the binary)");
  app.add_option("--summary", o.summary, "write a JSON summary of the model and the injected faults");
  app.add_flag("--prom", o.prom,
               "set NCCL_INSPECTOR_ENABLE=1, PROM_DUMP=1, DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 unless set");
  app.add_flag("--single-process", o.single_process, "run every node's ranks in this process (no fork)");
  app.add_flag("--purge-inflight", o.purge_inflight,
               "at the end leave KernelCh events started and never stopped (NCCL 2.31)");
  app.add_flag("--user-tags", o.user_tags, "v7: tag collectives with per-phase user tags");
  app.add_flag("--sym-kernels", o.sym_kernels,
               "v7: run the small tp AllReduce as a symmetric kernel (with kernel phases)");
  app.add_flag("--ce-collectives", o.ce_colls, "v6+: add a copy-engine AllGather on tp");
  app.add_flag("--pxn", o.pxn, "emit a foreign-pid (PXN) ProxyOp after each network op");
  app.add_option("--mask-override", o.mask_override,
                 "RAS: after each init set the global mask to this value (e.g. 65535)");
  std::string nccl;
  app.add_option("--nccl", nccl,
                 "NCCL release reproduced: 2.27, 2.28, 2.30 (also 2.29), 2.31.2 (also 2.31); its profiler table "
                 "unless --abi says otherwise, and its behaviours (sim/README.md)");
  std::string workload = "training";
  app.add_option("--workload", workload,
                 "training (default), serving (tensor-parallel decode, CUDA graphs), cases (examples/nccl_wrappers "
                 "--cases on a one-rank communicator), alltoall (MoE expert parallelism: per step one group of "
                 "Send+Recv to every rank, itself included)")
      ->check(CLI::IsMember({"training", "serving", "cases", "alltoall"}));
  app.add_option("--a2a-bytes", o.a2a_bytes, "alltoall: bytes of one chunk (per peer, the rank itself too)")
      ->check(CLI::Range(std::size_t(4), std::size_t(1) << 32));
  app.add_option("--bad-timer", o.bad_timer,
                 "FRAC: this share of the peer ops carries a garbage KernelCh stop timer (~584 years after its start)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--trace", o.trace,
                 "write every call into the plugin's table as shared trace text (forked nodes: FILE.<node>)");
  app.add_flag("--cuda-graphs", o.cuda_graphs,
               "tp AllReduce captured in a CUDA graph at its first step, replayed after");
  app.add_flag("--collnet", o.collnet, "dp AllReduce through CollNet (SHARP), algo COLLNET_DIRECT");
  app.add_flag("--nonblocking", o.nonblocking, "non-blocking communicators: eager launches from an async group thread");
  app.add_option("--abort-at", o.abort_at, "every rank aborts its communicators at this simulated second")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--recv-step-restarts", o.recv_restarts, "each recv ProxyStep is re-started N times first")
      ->check(CLI::Range(0, 16));
  app.add_option("--drop-kernel-ch", o.drop_kernel_ch,
                 "NCCL's profiler thread fails to allocate every Nth KernelCh op: its KernelCh never come "
                 "(a release with that behaviour: --nccl 2.31.2)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--truth", o.truth, "write the kernels' true GPU time per rank, comm, function and size (JSON lines)");
  app.add_option("--truth-ops", o.truth_ops, "write every op's true GPU span (JSON lines; short runs)");
  app.add_option("--seed", o.seed, "jitter / hash seed");
  app.add_flag("-v,--verbose", o.verbose, "print the plugin's INFO logs");
  std::vector<std::string> degr, slow, nic, strag, nvl, hangs;
  std::optional<u64> random_seed;
  app.add_option("--nics", o.nics, "NICs per node (default: one per GPU); channels are spread over them")
      ->check(CLI::Range(0, 64));
  app.add_option("--launch-jitter-us", o.launch_jitter_us,
                 "each rank launches each op group up to this much later (uniform)")
      ->check(CLI::NonNegativeNumber);
  std::string wobble;
  app.add_option(
      "--wobble", wobble,
      "PCT[:PERIOD_S]: healthy fabric wobble, every NIC x (1 + PCT/100 sin(2 pi t / PERIOD_S)), period 120 s");
  std::vector<std::string> congestion_s;
  std::string tail_s, pause_s, warmup_s;
  app.add_option("--congestion", congestion_s,
                 "GAP_S:LEN_S:PCT[:fabric|rail|nic|mixed]: congestion bursts, quiet gaps uniform [GAP_S/2, 3 GAP_S/2], "
                 "each uniform [LEN_S/2, LEN_S] long, bandwidth x (1-PCT/100) on every NIC, one rail, one NIC or any "
                 "of the three (drawn per burst); repeatable");
  app.add_option("--heavy-tail", tail_s, "FRAC[:MAX]: this share of ops runs 2..MAX (10) x slower, log-uniform");
  app.add_option("--op-noise", o.op_noise_pct,
                 "PCT: each op's transfer time x a lognormal factor (median 1, sigma PCT %) instead of +-2 % uniform")
      ->check(CLI::Range(0.0, 50.0));
  app.add_option("--pause", pause_s, "EVERY_S:LEN_S: every EVERY_S s of job time no collective runs for LEN_S s");
  app.add_option("--warmup", warmup_s, "S:PCT: links PCT % slower at the start, nominal again linearly by S s");
  app.add_option("--net-degrade", degr, "PCT@T0-T1: the fabric: every NIC's bandwidth x (1-PCT/100)");
  app.add_option("--slow-host", slow, "NODE:PCT@T0-T1: all NICs of that node (index or name) at (1-PCT/100)");
  app.add_option("--slow-nic", nic, "NODE:NIC:PCT@T0-T1: one NIC of that node at (1-PCT/100)");
  app.add_option("--straggler", strag, "RANK:MS@T0-T1: that global rank launches every op MS later");
  app.add_option("--nvlink-degrade", nvl, "NODE:PCT@T0-T1: that node's NVLink bandwidth x (1-PCT/100)");
  app.add_option("--random-fault", random_seed, "SEED: one fault of a random kind, culprit, size (10-50%) and onset");
  app.add_option("--hang-rank", hangs,
                 "R@T: global rank R's first op at/after T never completes; its peers block in it");
  std::vector<std::string> stalls, pauses, kills;
  app.add_option("--stall-rank", stalls, "R@T: global rank R issues no NCCL op from T on; its peers block waiting");
  app.add_option("--pause-rank", pauses, "R@T:D: global rank R issues no NCCL op for D s from T (a checkpoint)");
  app.add_option("--kill-rank", kills, "R@T: global rank R's process dies at T (implies --process-per-gpu)");
  app.add_option("--net-stall", o.net_stall_at, "T: network ops running at/after T never complete")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--process-per-gpu", o.process_per_gpu, "one process per GPU (as torchrun), not one per node");
  app.add_option("--gpu-index", o.gpu_index)->group("");
  app.add_option("--node-index", o.node_index)->group("");
  app.add_option("--start-wall-ns", o.start_wall_ns)->group("");
  CLI11_PARSE(app, argc, argv);

  // "A:B:PCT@T0-T1": the fields before '@' split at ':'; want = how many.
  auto parse_fault = [&](const std::string& flag, const std::string& s, std::size_t want, std::vector<std::string>& f,
                         window& w) {
    const auto at = s.find('@');
    f.clear();
    if (at == std::string::npos || !parse_window(s.substr(at + 1), w)) return false;
    std::string head = s.substr(0, at);
    for (std::size_t p; (p = head.find(':')) != std::string::npos; head = head.substr(p + 1))
      f.push_back(head.substr(0, p));
    f.push_back(head);
    if (f.size() != want) return std::fprintf(stderr, "bad %s %s\n", flag.c_str(), s.c_str()), false;
    return true;
  };
  auto number = [](const std::string& s, double lo, double hi, double& v) {
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    return !s.empty() && end && *end == 0 && v >= lo && v < hi;
  };
  // NODE is an index or a node name (<prefix><index>, e.g. node1).
  auto node_of = [&](std::string n, int& v) {
    if (n.rfind(o.node_prefix, 0) == 0 && n.size() > o.node_prefix.size()) n = n.substr(o.node_prefix.size());
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::atoi(n.c_str());
    return v >= 0 && v < o.nodes;
  };
  // "A:B[:C...]" as numbers; the count must be within [lo_n, hi_n].
  auto numbers = [](const std::string& s, std::size_t lo_n, std::size_t hi_n, std::vector<double>& v,
                    std::string* word = nullptr) {
    v.clear();
    std::string rest = s;
    for (;;) {
      const auto p = rest.find(':');
      const std::string f = rest.substr(0, p);
      char* end = nullptr;
      const double x = std::strtod(f.c_str(), &end);
      if (!f.empty() && end && *end == 0 && std::isfinite(x))
        v.push_back(x);
      else if (word && p == std::string::npos && v.size() >= lo_n)
        *word = f;
      else
        return false;
      if (p == std::string::npos) break;
      rest = rest.substr(p + 1);
    }
    return v.size() >= lo_n && v.size() <= hi_n;
  };
  std::vector<double> nv;
  if (!wobble.empty()) {
    if (!numbers(wobble, 1, 2, nv) || nv[0] < 0 || nv[0] >= 50 || (nv.size() == 2 && nv[1] < 1))
      return std::fprintf(stderr, "bad --wobble %s (PCT[:PERIOD_S], 0 <= PCT < 50, PERIOD_S >= 1)\n", wobble.c_str()),
             2;
    o.wobble_pct = nv[0];
    if (nv.size() == 2) o.wobble_period_s = nv[1];
  }
  for (const auto& c : congestion_s) {
    std::string scope = "fabric";
    if (!numbers(c, 3, 3, nv, &scope) || nv[0] <= 0 || nv[1] <= 0 || nv[2] <= 0 || nv[2] >= 100 ||
        (scope != "fabric" && scope != "rail" && scope != "nic" && scope != "mixed"))
      return std::fprintf(
                 stderr,
                 "bad --congestion %s (GAP_S:LEN_S:PCT[:fabric|rail|nic|mixed], GAP_S, LEN_S > 0, 0 < PCT < 100)\n",
                 c.c_str()),
             2;
    o.bursts_cfg.push_back({nv[0], nv[1], nv[2],
                            scope == "rail"    ? burst_scope::rail
                            : scope == "nic"   ? burst_scope::nic
                            : scope == "mixed" ? burst_scope::mixed
                                               : burst_scope::fabric});
  }
  if (!tail_s.empty()) {
    if (!numbers(tail_s, 1, 2, nv) || nv[0] <= 0 || nv[0] > 1 || (nv.size() == 2 && nv[1] < 2))
      return std::fprintf(stderr, "bad --heavy-tail %s (FRAC[:MAX], 0 < FRAC <= 1, MAX >= 2)\n", tail_s.c_str()), 2;
    o.tail_frac = nv[0];
    if (nv.size() == 2) o.tail_max = nv[1];
  }
  if (!pause_s.empty()) {
    if (!numbers(pause_s, 2, 2, nv) || nv[0] <= 0 || nv[1] <= 0 || nv[1] >= nv[0])
      return std::fprintf(stderr, "bad --pause %s (EVERY_S:LEN_S, 0 < LEN_S < EVERY_S)\n", pause_s.c_str()), 2;
    o.pause_every_s = nv[0];
    o.pause_len_s = nv[1];
  }
  if (!warmup_s.empty()) {
    if (!numbers(warmup_s, 2, 2, nv) || nv[0] <= 0 || nv[1] <= 0 || nv[1] >= 100)
      return std::fprintf(stderr, "bad --warmup %s (S:PCT, S > 0, 0 < PCT < 100)\n", warmup_s.c_str()), 2;
    o.warmup_s = nv[0];
    o.warmup_pct = nv[1];
  }
  std::vector<std::string> fs_;
  for (const auto& s : degr) {
    fault f;
    f.kind = fault_kind::net_degrade;
    if (!parse_fault("--net-degrade", s, 1, fs_, f.w) || !number(fs_[0], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --net-degrade %s (PCT@T0-T1, 0 <= PCT < 100)\n", s.c_str()), 1;
    o.faults.push_back(f);
  }
  for (const auto& s : slow) {
    fault f;
    f.kind = fault_kind::slow_host;
    if (!parse_fault("--slow-host", s, 2, fs_, f.w) || !node_of(fs_[0], f.node) || !number(fs_[1], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --slow-host %s: NODE:PCT@T0-T1, NODE an index or %s<index>\n", s.c_str(),
                          o.node_prefix.c_str()),
             1;
    o.faults.push_back(f);
  }
  for (const auto& s : nic) {
    fault f;
    f.kind = fault_kind::slow_nic;
    double n = 0;
    if (!parse_fault("--slow-nic", s, 3, fs_, f.w) || !node_of(fs_[0], f.node) ||
        !number(fs_[1], 0, o.nic_count(), n) || !number(fs_[2], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --slow-nic %s: NODE:NIC:PCT@T0-T1, NIC < %d\n", s.c_str(), o.nic_count()), 1;
    f.nic = int(n);
    o.faults.push_back(f);
  }
  for (const auto& s : strag) {
    fault f;
    f.kind = fault_kind::straggler;
    double r = 0;
    if (!parse_fault("--straggler", s, 2, fs_, f.w) || !number(fs_[0], 0, o.nodes * o.gpus, r) ||
        !number(fs_[1], 0, 1e6, f.ms))
      return std::fprintf(stderr, "bad --straggler %s: RANK:MS@T0-T1\n", s.c_str()), 1;
    f.rank = int(r);
    o.faults.push_back(f);
  }
  for (const auto& s : nvl) {
    fault f;
    f.kind = fault_kind::nvlink_degrade;
    if (!parse_fault("--nvlink-degrade", s, 2, fs_, f.w) || !node_of(fs_[0], f.node) || !number(fs_[1], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --nvlink-degrade %s: NODE:PCT@T0-T1\n", s.c_str()), 1;
    o.faults.push_back(f);
  }
  // "R@T" (pause: "R@T:D"): R a global rank, T (and D) seconds.
  for (const auto& [flag, list, kind] : {std::tuple{"--hang-rank", &hangs, rank_fault_kind::hang},
                                         std::tuple{"--stall-rank", &stalls, rank_fault_kind::stall},
                                         std::tuple{"--pause-rank", &pauses, rank_fault_kind::pause},
                                         std::tuple{"--kill-rank", &kills, rank_fault_kind::kill}})
    for (const auto& s : *list) {
      rank_fault f;
      f.kind = kind;
      const auto at = s.find('@');
      const bool pause = kind == rank_fault_kind::pause;
      double r = 0;
      if (at == std::string::npos || !number(s.substr(0, at), 0, o.nodes * o.gpus, r) ||
          !numbers(s.substr(at + 1), pause ? 2 : 1, pause ? 2 : 1, nv) || nv[0] < 0 || (pause && nv[1] <= 0))
        return std::fprintf(stderr, "bad %s %s (%s, R < %d)\n", flag, s.c_str(), pause ? "R@T:D, D > 0" : "R@T",
                            o.nodes * o.gpus),
               1;
      f.rank = int(r);
      f.t = nv[0];
      if (pause) f.d = nv[1];
      o.rank_faults.push_back(f);
    }
  if (!nccl.empty()) {
    o.nccl = find_release(nccl);
    if (!o.nccl) return std::fprintf(stderr, "bad --nccl %s (2.27, 2.28, 2.30, 2.31.2)\n", nccl.c_str()), 2;
    if (o.abi == 0) o.abi = o.nccl->abi;
  }
  if (o.drop_kernel_ch > 0 &&
      !(o.nccl && nccl_profile::of(o.nccl, o.abi, false).has(nccl_behaviour::kernel_ch_dropped_on_alloc_failure)))
    return std::fprintf(stderr,
                        "--drop-kernel-ch: NCCL drops KernelCh on an allocation failure from 2.31.2 on (profiler.cc "
                        "profilerEnqueueOp); give --nccl 2.31.2\n"),
           2;
  o.serving = workload == "serving";
  o.cases = workload == "cases";
  o.alltoall = workload == "alltoall";
  if (o.cases) {  // what examples/nccl_wrappers --cases ran: one process, one GPU, a one-rank communicator
    if ((app.count("--nodes") && o.nodes != 1) || (app.count("--gpus") && o.gpus != 1))
      return std::fprintf(stderr, "--workload cases runs one rank (--nodes 1 --gpus 1)\n"), 2;
    o.nodes = o.gpus = 1;
    o.single_process = true;
    if (o.steps <= 0) o.steps = 1;
  }
  if ((o.cases || o.alltoall) && (!o.rank_faults.empty() || o.net_stall_at >= 0))
    return std::fprintf(stderr, "rank faults and --net-stall apply to --workload training and serving\n"), 2;
  if (o.net_stall_at >= 0 && o.nodes < 2) return std::fprintf(stderr, "--net-stall needs --nodes 2 or more\n"), 2;
  o.process_per_gpu = o.process_per_gpu || !kills.empty();  // a kill takes down one rank's process only
  if (o.process_per_gpu && o.single_process)
    return std::fprintf(stderr, "--process-per-gpu (implied by --kill-rank) and --single-process exclude each other\n"),
           2;
  if (o.bad_timer > 0 && !o.alltoall) return std::fprintf(stderr, "--bad-timer applies to --workload alltoall\n"), 2;
  if (o.duration <= 0 && o.steps <= 0) o.duration = 60;
  if (o.abort_at >= 0) {  // ncclCommAbort: the ops in flight stay open (2.31.2 purges them; the same to a plugin)
    o.steps = 0;
    o.duration = o.duration > 0 ? std::min(o.duration, o.abort_at) : o.abort_at;
    o.purge_inflight = true;
  }
  if (!o.bursts_cfg.empty()) {  // over the run, its pauses and a margin (a --steps run ends when it ends)
    const model nominal(o);
    const double run = o.end_time(nominal.nominal_step_s);
    const double pauses = o.pause_every_s > 0 ? run / o.pause_every_s * o.pause_len_s : 0;
    for (std::size_t i = 0; i < o.bursts_cfg.size(); ++i)
      o.bursts.push_back(draw_bursts(o.bursts_cfg[i], i, o, run * 1.5 + 60 + pauses));
  }
  if (random_seed) {
    const model nominal(o);
    fault f = random_fault(*random_seed, o, o.end_time(nominal.nominal_step_s));
    // A straggler late by 10-50 % of the exposed communication of a step, spread over its op groups.
    if (f.kind == fault_kind::straggler) {
      std::size_t groups = 0;
      for (const auto& g : nominal.program) groups += g.first_step_only ? 0 : 1;
      f.ms =
          1e3 * (nominal.nominal_step_s - nominal.compute_s) * f.pct / 100.0 / double(std::max<std::size_t>(groups, 1));
    }
    o.faults.push_back(f);
  }
  return std::nullopt;
}

}  // namespace ncclinsp::sim::app
