#pragma once
/// The label sets of the metric schema: which labels a communicator, a GPU and an op cell get,
/// and the cardinality controls that drop some of them. The catalogue (format/catalogue.hpp)
/// groups cells into series with them; every serializer renders the catalogue (docs/metrics.md).
/// Pure functions over a snapshot (cold path).

#include <cstddef>
#include <cstdint>
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

/// The duration buckets a histogram `mode` writes: indices into the full bucket list (the last is
/// +Inf), ascending; none when off. Shared by the Prometheus and OTLP serializers.
inline std::vector<std::size_t> histogram_buckets(histogram_mode mode) {
  std::vector<std::size_t> b;
  if (mode == histogram_mode::off) return b;
  for (std::size_t i = 0; i < duration_buckets; ++i) {
    const bool inf = i == duration_bounds_ns.size();
    const std::uint64_t ns = inf ? 0 : duration_bounds_ns[i];
    if (mode == histogram_mode::full || inf || ns == 100000 || ns == 1000000 || ns == 10000000 || ns == 100000000 ||
        ns == 1000000000 || ns == 10000000000ull)
      b.push_back(i);
  }
  return b;
}

/// Native message_size label of a pow2 bucket index under `bits` per bucket (1 = the index itself).
template <class NativeBucketer>
std::string size_label(std::uint32_t nb, std::uint32_t bits) {
  if (bits <= 1 || nb == 0) return NativeBucketer::label(nb);
  const std::uint32_t g = (nb - 1) / bits, lo = g * bits, hi = lo + bits;
  auto pow2 = [](std::uint32_t e) {
    return NativeBucketer::label(e + 1).substr(0, NativeBucketer::label(e + 1).find('-'));
  };
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
/// The job key: identity.job_id, or slurm_job_id when an embedded caller left it empty.
inline const std::string& job_key(const process_identity& id) {
  return id.job_id.empty() ? id.slurm_job_id : id.job_id;
}
/// job_id, slurm_job_id, node, gpu, uuid: the labels of GPU/process families (uuid last).
inline label_list identity_labels(const snapshot& snap, const comm_desc& d) {
  return {{"job_id", job_key(snap.identity)},
          {"slurm_job_id", snap.identity.slurm_job_id},
          {"node", snap.identity.node},
          {"gpu", gpu_label(d)},
          {"uuid", d.uuid}};
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

}  // namespace ncclinsp::format
