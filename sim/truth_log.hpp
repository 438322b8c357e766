#pragma once
/// ncclinsp-sim's truth for --truth and --truth-ops: the kernels' real GPU spans (before any release
/// corrupts what the KernelCh events carry), summed per (communicator, function, bytes) of one rank, and
/// the files they go to. `corrupted` ops had another work's timestamps sent (the plugin must not publish
/// those as GPU-timed).
/// Thread-safety: a rank's `truth_log` is written by its proxy thread only and read after that thread
/// joined; the --truth-ops stream is shared by the ranks of a process (fprintf locks it: one line a call).

#include "nccl_driver.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;

struct truth_key {
  u64 comm_hash = 0;
  int rank = 0;  ///< in the communicator
  int nranks = 0;
  int func = 0;
  u64 bytes = 0;
  auto operator<=>(const truth_key&) const = default;
};
struct truth_sum {
  u64 ops = 0, corrupted = 0, untimed = 0;
  double busy_s = 0;
};

struct truth_log {
  std::map<truth_key, truth_sum> sums;
  std::FILE* ops_file = nullptr;  ///< --truth-ops: one line per op

  /// The kernel's real span on this rank (earliest channel start to latest channel stop, as the GPU
  /// stamped them), before the release's device-ring effects decide what the KernelCh events carry. A
  /// Send/Recv to the rank itself (`t` NULL) counts as untimed: it has no KernelCh. `bad_timer`: its
  /// KernelCh carried a garbage timer (--bad-timer), counted as corrupted.
  void note(const comm_driver& c, const pending_op& p, const kernel_time* t, int nch, bool bad_timer = false) {
    const truth_key k{c.config().comm_hash, c.config().rank, c.config().n_ranks, int(p.func), u64(p.bytes)};
    if (p.self_p2p) {
      truth_sum& s = sums[k];
      ++s.ops;
      ++s.untimed;
      return;
    }
    if (p.kind == op_kind::ce_coll || nch <= 0 || !t) return;
    u64 lo = t[0].start_ns, hi = t[0].stop_ns;
    for (int i = 1; i < nch; ++i) lo = std::min(lo, t[i].start_ns), hi = std::max(hi, t[i].stop_ns);
    truth_sum& s = sums[k];
    ++s.ops;
    const bool corrupted = p.stale_timestamps || p.drifted || p.shifted || bad_timer;
    const bool untimed = !p.kernel_events || !(p.mask & abi::ev_kernel_ch);
    if (corrupted) ++s.corrupted;
    if (untimed) ++s.untimed;
    if (!corrupted && !untimed) s.busy_s += double(hi - lo) * 1e-9;
    if (ops_file)
      std::fprintf(ops_file,
                   "{\"rank\":%d,\"comm_hash\":\"0x%016llx\",\"func\":\"%s\",\"seq\":%llu,\"bytes\":%llu,"
                   "\"nranks\":%d,\"start_ns\":%llu,\"end_ns\":%llu,\"replay\":%s,\"corrupted\":%s,"
                   "\"untimed\":%s}\n",
                   c.config().rank, static_cast<unsigned long long>(c.config().comm_hash), func_name(p.func),
                   static_cast<unsigned long long>(p.seq), static_cast<unsigned long long>(p.bytes), c.config().n_ranks,
                   static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                   p.replay ? "true" : "false", corrupted ? "true" : "false", untimed ? "true" : "false");
  }
};

/// --truth FILE: one JSON line per (rank, communicator, function, bytes) with the truth sums. `Ranks`: a
/// range of pointers to objects with `node`, `global` and `truth` (a truth_log).
template <class Ranks>
void write_truth(const std::string& path, const Ranks& ranks) {
  if (path.empty()) return;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "ncclinsp-sim: cannot write --truth %s\n", path.c_str());
    return;
  }
  for (const auto& r : ranks)
    for (const auto& [k, v] : r->truth.sums)
      std::fprintf(
          f,
          "{\"node\":%d,\"global_rank\":%d,\"comm_hash\":\"0x%016llx\",\"rank\":%d,\"nranks\":%d,\"func\":\"%s\","
          "\"bytes\":%llu,\"ops\":%llu,\"corrupted\":%llu,\"untimed\":%llu,\"busy_s\":%.9f}\n",
          r->node, r->global, static_cast<unsigned long long>(k.comm_hash), k.rank, k.nranks,
          func_name(nccl_func(k.func)), static_cast<unsigned long long>(k.bytes),
          static_cast<unsigned long long>(v.ops), static_cast<unsigned long long>(v.corrupted),
          static_cast<unsigned long long>(v.untimed), v.busy_s);
  std::fclose(f);
}

}  // namespace ncclinsp::sim::app
