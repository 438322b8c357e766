#pragma once
/// The metric schema in one place: which label set each cell, communicator and GPU gets, and how
/// cells are grouped into series (Inspector's window gauges, native counters and histograms).
/// The Prometheus and OTLP serializers both render these groups, so their series always carry the
/// same names and values (docs/metrics.md). Pure functions over a snapshot (cold path).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp::format {

/// Ordered (name, value) pairs; values are raw (serializers escape them).
using label_list = std::vector<std::pair<std::string, std::string>>;

/// Duration histogram: all 20 buckets, 7 (le 100us, 1ms, 10ms, 100ms, 1s, 10s, +Inf: a subset of
/// the full bounds, so quantiles stay exact at those bounds), or none.
enum class histogram_mode : std::uint8_t { full, coarse, off };

/// Cardinality controls of the op and communicator families (docs/scale.md gives the series
/// count of each for the demo job and which rules and panels need which label). Defaults keep the
/// full schema of docs/metrics.md. GPU/process families (export timestamp, info, drops) always
/// keep `uuid`: the stale-file rules join on it.
struct cardinality {
  bool rank = true;        ///< keep `rank` (straggler rules need it)
  bool comm_hash = true;   ///< keep `comm_hash` (dropping it merges re-created communicators of one name)
  bool uuid = true;        ///< keep `uuid` on op and communicator families (`gpu` still tells GPUs apart)
  bool algo_proto = true;  ///< keep `algo_proto` (dropping it merges algorithm/protocol variants)
  /// message_size buckets span 2^size_bucket_bits: 1 = powers of two (16MiB-32MiB), 2 = powers
  /// of four (16MiB-64MiB), 4 = powers of 16 ... Bucket edges stay powers of two.
  std::uint32_t size_bucket_bits = 1;
  histogram_mode histogram = histogram_mode::full;
  /// Hard cap on the lines of one file (0 = none). Op series sets that would pass it are folded
  /// into one set labelled comm_name="_overflow" (totals stay right) and communicator rows past
  /// it are left out; ncclinsp_series_overflow{kind} counts both, so a communicator churn cannot
  /// flood the TSDB.
  std::size_t max_series = 0;
};

/// Native message_size label of a pow2 bucket index under `bits` per bucket (1 = the index itself).
template <class NativeBucketer>
std::string size_label(std::uint32_t nb, std::uint32_t bits) {
  if (bits <= 1 || nb == 0) return NativeBucketer::label(nb);
  const std::uint32_t g = (nb - 1) / bits, lo = g * bits, hi = lo + bits;
  auto pow2 = [](std::uint32_t e) { return NativeBucketer::label(e + 1).substr(0, NativeBucketer::label(e + 1).find('-')); };
  return pow2(lo) + "-" + (hi >= 64 ? std::string("16EiB") : pow2(hi));
}

/// "RING_SIMPLE", "SYM" for symmetric kernels, "none" for P2P/CE ops.
inline std::string algo_proto_label(algo a, proto p) {
  if (a == algo::none) return "none";
  if (a == algo::sym) return "SYM";
  return std::string(to_string(a)) + "_" + std::string(to_string(p));
}

/// Label value of a user-tag index (see collector_options::user_tag_label).
inline std::string user_tag_label(const snapshot& snap, std::uint32_t tag_index) {
  if (tag_index == 0) return "none";
  if (tag_index > snap.user_tags.size()) return "other";
  return std::to_string(snap.user_tags[tag_index - 1]);
}

inline std::string comm_name(const comm_desc& d) { return d.name.empty() ? std::string("unknown") : d.name; }
inline std::string gpu_label(const comm_desc& d) { return "GPU" + std::to_string(d.device); }
inline std::string hash_label(std::uint64_t h) {
  std::string s;
  append_hex64(s, h);
  return s;
}
/// Inspector's `version` label: "v<profiler ABI>.1" ("v5.1" when embedded).
inline std::string compat_version(const snapshot& snap) {
  const auto& abi = snap.identity.abi;
  return abi.size() > 1 && abi[0] == 'v' ? abi + ".1" : "v5.1";
}

inline void add_user_labels(label_list& l, const snapshot& snap) {
  l.insert(l.end(), snap.identity.labels.begin(), snap.identity.labels.end());
}
/// slurm_job_id, node, gpu, uuid: the labels of GPU/process families.
inline label_list identity_labels(const snapshot& snap, const comm_desc& d) {
  return {{"slurm_job_id", snap.identity.slurm_job_id}, {"node", snap.identity.node}, {"gpu", gpu_label(d)}, {"uuid", d.uuid}};
}
/// identity + comm_name, comm_hash, rank, nranks, n_nodes: the labels of communicator families
/// (less the ones `card` drops).
inline label_list comm_labels(const snapshot& snap, const comm_desc& d, const cardinality& card = {}) {
  label_list l = identity_labels(snap, d);
  if (!card.uuid) l.pop_back();
  l.emplace_back("comm_name", comm_name(d));
  if (card.comm_hash) l.emplace_back("comm_hash", hash_label(d.hash));
  if (card.rank) l.emplace_back("rank", std::to_string(d.rank));
  l.insert(l.end(), {{"nranks", std::to_string(d.nranks)}, {"n_nodes", std::to_string(d.nnodes)}});
  return l;
}

/// Window sums behind Inspector's gauges.
struct window_acc {
  std::uint64_t valid = 0, busy_ns = 0, bw_count = 0;
  double log_sum = 0;
};

/// Cells grouped into series, sorted by label list (deterministic output).
struct op_series {
  std::map<label_list, window_acc> compat_coll, compat_p2p;  ///< ops completed in this window only
  std::map<label_list, cell_stats> native;                   ///< cumulative
};

/// Groups the cells of GPU `uuid` (all GPUs when empty).
template <class NativeBucketer = pow2_bucketer>
op_series group_cells(const snapshot& snap, std::string_view uuid, bool compat_gauges, const cardinality& card = {}) {
  op_series out;
  const auto& ident = snap.identity;
  const std::string version = compat_version(snap);
  for (const auto& cell : snap.cells) {
    const comm_desc& d = snap.comms[cell.comm].desc;
    if (!uuid.empty() && d.uuid != uuid) continue;
    const bool p2p = is_p2p(cell.fn);
    const std::string ap = card.algo_proto ? algo_proto_label(cell.alg, cell.pro) : std::string();
    const std::string fn(to_string(cell.fn));
    if (compat_gauges && cell.window.valid_ops() > 0) {
      label_list l = {{"version", version}, {"slurm_job_id", ident.slurm_job_id}, {"node", ident.node}, {"gpu", gpu_label(d)},
                      {"comm_name", comm_name(d)}, {"n_nodes", std::to_string(d.nnodes)}, {"nranks", std::to_string(d.nranks)}};
      if (p2p)
        l.insert(l.end(), {{"p2p_operation", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}});
      else
        l.insert(l.end(), {{"collective", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}});
      if (!p2p && card.algo_proto) l.emplace_back("algo_proto", ap);
      if (card.uuid) l.emplace_back("uuid", d.uuid);
      add_user_labels(l, snap);
      window_acc& w = (p2p ? out.compat_p2p : out.compat_coll)[l];
      w.valid += cell.window.valid_ops();
      w.busy_ns += cell.window.busy_ns;
      w.bw_count += cell.window.bw_count;
      w.log_sum += cell.window.log_busbw_sum;
    }
    label_list l = comm_labels(snap, d, card);
    const std::uint32_t nb = NativeBucketer::index(inspector_bucketer::lower_bound(cell.size_index));
    l.insert(l.end(), {{"collective", fn},
                       {"message_size", cell.total.valid_ops() ? size_label<NativeBucketer>(nb, card.size_bucket_bits) : std::string("invalid")}});
    if (card.algo_proto) l.emplace_back("algo_proto", ap);
    if (cell.tag_index || !snap.user_tags.empty()) l.emplace_back("user_tag", user_tag_label(snap, cell.tag_index));
    add_user_labels(l, snap);
    cell_stats& t = out.native[l];
    t.ops += cell.total.ops;
    t.invalid += cell.total.invalid;
    t.bytes += cell.total.bytes;
    t.busy_ns += cell.total.busy_ns;
    t.bus_bytes += cell.total.bus_bytes;
    for (std::size_t b = 0; b < duration_buckets; ++b) t.hist[b] += cell.total.hist[b];
  }
  return out;
}

}  // namespace ncclinsp::format
