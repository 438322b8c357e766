#pragma once
/// The metric schema in one place: which label set each cell, communicator and GPU gets, and how
/// cells are grouped into series (Inspector's window gauges, native counters and histograms).
/// The Prometheus and OTLP serializers both render these groups, so their series always carry the
/// same names and values (docs/metrics.md). Pure functions over a snapshot (cold path).

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
/// identity + comm_name, comm_hash, rank, nranks, n_nodes: the labels of communicator families.
inline label_list comm_labels(const snapshot& snap, const comm_desc& d) {
  label_list l = identity_labels(snap, d);
  l.insert(l.end(), {{"comm_name", comm_name(d)}, {"comm_hash", hash_label(d.hash)}, {"rank", std::to_string(d.rank)},
                     {"nranks", std::to_string(d.nranks)}, {"n_nodes", std::to_string(d.nnodes)}});
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
op_series group_cells(const snapshot& snap, std::string_view uuid, bool compat_gauges) {
  op_series out;
  const auto& ident = snap.identity;
  const std::string version = compat_version(snap);
  for (const auto& cell : snap.cells) {
    const comm_desc& d = snap.comms[cell.comm].desc;
    if (!uuid.empty() && d.uuid != uuid) continue;
    const bool p2p = is_p2p(cell.fn);
    const std::string ap = algo_proto_label(cell.alg, cell.pro);
    const std::string fn(to_string(cell.fn));
    if (compat_gauges && cell.window.valid_ops() > 0) {
      label_list l = {{"version", version}, {"slurm_job_id", ident.slurm_job_id}, {"node", ident.node}, {"gpu", gpu_label(d)},
                      {"comm_name", comm_name(d)}, {"n_nodes", std::to_string(d.nnodes)}, {"nranks", std::to_string(d.nranks)}};
      if (p2p)
        l.insert(l.end(), {{"p2p_operation", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}});
      else
        l.insert(l.end(), {{"collective", fn}, {"message_size", inspector_bucketer::label(cell.size_index)}, {"algo_proto", ap}});
      l.emplace_back("uuid", d.uuid);
      add_user_labels(l, snap);
      window_acc& w = (p2p ? out.compat_p2p : out.compat_coll)[l];
      w.valid += cell.window.valid_ops();
      w.busy_ns += cell.window.busy_ns;
      w.bw_count += cell.window.bw_count;
      w.log_sum += cell.window.log_busbw_sum;
    }
    label_list l = comm_labels(snap, d);
    const std::uint32_t nb = NativeBucketer::index(inspector_bucketer::lower_bound(cell.size_index));
    l.insert(l.end(), {{"collective", fn}, {"message_size", cell.total.valid_ops() ? NativeBucketer::label(nb) : std::string("invalid")},
                       {"algo_proto", ap}});
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
