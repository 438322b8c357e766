#pragma once
/// Snapshot -> Prometheus text exposition (format 0.0.4), one GPU at a time. Pure: no I/O, no
/// globals. Writes Inspector's four gauge families (same names and label order, plus `uuid` and
/// user labels) and the native counters, histograms and health gauges of docs/metrics.md.
/// Every family has # HELP and # TYPE; label values are UTF-8-repaired and escaped; numbers are
/// locale-independent and never NaN/Inf. Series are sorted, so output is deterministic.
/// Thread-safety: pure function (cold path).

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

/// GPU uuids present in a snapshot, sorted: one .prom file each.
inline std::vector<std::string> gpu_uuids(const snapshot& snap) {
  std::set<std::string> s;
  for (const auto& c : snap.comms) s.insert(c.desc.uuid);
  return {s.begin(), s.end()};
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

namespace detail {

/// Builds `{k="v",...}` label sets with escaping.
class label_set {
 public:
  label_set& add(std::string_view k, std::string_view v) {
    s_ += s_.empty() ? "{" : ",";
    s_ += k;
    s_ += "=\"";
    append_label_value(s_, sanitize_utf8(v));
    s_ += '"';
    return *this;
  }
  label_set& add(std::string_view k, long long v) { return add(k, std::to_string(v)); }
  label_set& add_all(const std::vector<std::pair<std::string, std::string>>& kv) {
    for (const auto& [k, v] : kv) add(k, v);
    return *this;
  }
  /// Label text without the closing brace (to append `le`).
  const std::string& open() const { return s_; }
  std::string str() const { return s_.empty() ? std::string() : s_ + "}"; }

 private:
  std::string s_;
};

inline void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

inline void sample(std::string& out, std::string_view name, const std::string& labels, double v) {
  out += name;
  out += labels;
  out += ' ';
  append_double(out, v);
  out += '\n';
}

inline std::string comm_name(const comm_desc& d) { return d.name.empty() ? std::string("unknown") : d.name; }
inline std::string gpu_label(const comm_desc& d) { return "GPU" + std::to_string(d.device); }
inline std::string hash_label(std::uint64_t h) {
  std::string s;
  append_hex64(s, h);
  return s;
}

inline label_set identity(const snapshot& snap, const comm_desc& d) {
  label_set l;
  l.add("slurm_job_id", snap.identity.slurm_job_id).add("node", snap.identity.node).add("gpu", gpu_label(d)).add("uuid", d.uuid);
  return l;
}
inline label_set comm_labels(const snapshot& snap, const comm_desc& d) {
  label_set l = identity(snap, d);
  l.add("comm_name", comm_name(d)).add("comm_hash", hash_label(d.hash)).add("rank", d.rank).add("nranks", d.nranks).add("n_nodes", d.nnodes);
  return l;
}

struct window_acc {
  std::uint64_t valid = 0, busy_ns = 0, bw_count = 0;
  double log_sum = 0;
};

}  // namespace detail

/// Appends the exposition text for GPU `uuid` to `out`. `compat_gauges` adds Inspector's four
/// gauge families; their names end in `_microseconds` and `_gbs`, the only findings promtool's
/// linter reports on our output (the names are NVIDIA's; dashboards depend on them).
template <class NativeBucketer = pow2_bucketer>
void write_prometheus(std::string& out, const snapshot& snap, std::string_view uuid, bool compat_gauges = true) {
  using namespace detail;
  const auto& ident = snap.identity;
  const comm_desc* gpu_desc = nullptr;
  for (const auto& c : snap.comms)
    if (c.desc.uuid == uuid) {
      gpu_desc = &c.desc;
      break;
    }
  if (!gpu_desc) return;
  const std::string version = ident.abi.size() > 1 && ident.abi[0] == 'v' ? ident.abi + ".1" : "v5.1";

  // ---- aggregate cells of this GPU ------------------------------------------------------------
  std::map<std::string, window_acc> compat_coll, compat_p2p;
  std::map<std::string, cell_stats> native;
  for (const auto& cell : snap.cells) {
    const comm_snapshot& cs = snap.comms[cell.comm];
    if (cs.desc.uuid != uuid) continue;
    const comm_desc& d = cs.desc;
    const bool p2p = is_p2p(cell.fn);
    const std::string ap = algo_proto_label(cell.alg, cell.pro);
    if (cell.window.valid_ops() > 0) {
      label_set l;
      l.add("version", version).add("slurm_job_id", ident.slurm_job_id).add("node", ident.node).add("gpu", gpu_label(d))
          .add("comm_name", comm_name(d)).add("n_nodes", d.nnodes).add("nranks", d.nranks);
      if (p2p)
        l.add("p2p_operation", to_string(cell.fn)).add("message_size", inspector_bucketer::label(cell.size_index));
      else
        l.add("collective", to_string(cell.fn)).add("message_size", inspector_bucketer::label(cell.size_index)).add("algo_proto", ap);
      l.add("uuid", d.uuid).add_all(ident.labels);
      window_acc& w = (p2p ? compat_p2p : compat_coll)[l.str()];
      w.valid += cell.window.valid_ops();
      w.busy_ns += cell.window.busy_ns;
      w.bw_count += cell.window.bw_count;
      w.log_sum += cell.window.log_busbw_sum;
    }
    label_set l = comm_labels(snap, d);
    const std::uint32_t nb = NativeBucketer::index(inspector_bucketer::lower_bound(cell.size_index));
    l.add("collective", to_string(cell.fn)).add("message_size", cell.total.valid_ops() ? NativeBucketer::label(nb) : std::string("invalid"))
        .add("algo_proto", ap);
    if (cell.tag_index || !snap.user_tags.empty()) l.add("user_tag", user_tag_label(snap, cell.tag_index));
    l.add_all(ident.labels);
    cell_stats& t = native[l.str()];
    t.ops += cell.total.ops;
    t.invalid += cell.total.invalid;
    t.bytes += cell.total.bytes;
    t.busy_ns += cell.total.busy_ns;
    t.bus_bytes += cell.total.bus_bytes;
    for (std::size_t b = 0; b < duration_buckets; ++b) t.hist[b] += cell.total.hist[b];
  }

  // ---- Inspector-compatible gauges -------------------------------------------------------------
  auto compat = [&](const std::map<std::string, window_acc>& m, std::string_view bw_name, std::string_view t_name, std::string_view what) {
    family(out, bw_name, "gauge", std::string("Geometric mean bus bandwidth (GB/s, 1e9 bytes) of ") + std::string(what) +
                                      " completed in the last export window (Inspector-compatible).");
    for (const auto& [l, w] : m) sample(out, bw_name, l, w.bw_count ? std::exp(w.log_sum / static_cast<double>(w.bw_count)) : 0.0);
    family(out, t_name, "gauge", std::string("Mean execution time (microseconds) of ") + std::string(what) +
                                     " completed in the last export window (Inspector-compatible).");
    for (const auto& [l, w] : m) sample(out, t_name, l, static_cast<double>(w.busy_ns) / static_cast<double>(w.valid) / 1e3);
  };
  if (compat_gauges) {
    compat(compat_coll, "nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds", "collectives");
    compat(compat_p2p, "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds", "P2P operations");
  }

  // ---- native op families ----------------------------------------------------------------------
  family(out, "ncclinsp_ops_total", "counter", "Completed NCCL operations.");
  for (const auto& [l, t] : native) sample(out, "ncclinsp_ops_total", l, static_cast<double>(t.ops));
  family(out, "ncclinsp_bytes_total", "counter", "Message bytes per rank as NCCL reports them (AllGather: send bytes, ReduceScatter: receive bytes).");
  for (const auto& [l, t] : native) sample(out, "ncclinsp_bytes_total", l, static_cast<double>(t.bytes));
  family(out, "ncclinsp_bus_bytes_total", "counter",
         "Bus bytes (traffic x nccl-tests bus factor: AllReduce 2(n-1)/n, AllGather/ReduceScatter (n-1)/n on n x bytes, "
         "Broadcast/Reduce/Send/Recv 1); rate(bus_bytes)/rate(busy_seconds)/1e9 is bus bandwidth in GB/s.");
  for (const auto& [l, t] : native) sample(out, "ncclinsp_bus_bytes_total", l, t.bus_bytes);
  family(out, "ncclinsp_busy_seconds_total", "counter", "Sum of operation durations (GPU kernel span when available).");
  for (const auto& [l, t] : native) sample(out, "ncclinsp_busy_seconds_total", l, static_cast<double>(t.busy_ns) * 1e-9);
  family(out, "ncclinsp_op_duration_seconds", "histogram", "Operation duration.");
  for (const auto& [l, t] : native) {
    const std::string open = l.substr(0, l.size() - 1);
    std::uint64_t cum = 0;
    for (std::size_t b = 0; b < duration_buckets; ++b) {
      cum += t.hist[b];
      out += "ncclinsp_op_duration_seconds_bucket";
      out += open;
      out += ",le=\"";
      if (b < duration_bounds_ns.size())
        append_double(out, static_cast<double>(duration_bounds_ns[b]) * 1e-9);
      else
        out += "+Inf";
      out += "\"} ";
      append_int(out, cum);
      out += '\n';
    }
    sample(out, "ncclinsp_op_duration_seconds_sum", l, static_cast<double>(t.busy_ns) * 1e-9);
    sample(out, "ncclinsp_op_duration_seconds_count", l, static_cast<double>(cum));
  }

  // ---- communicator health ---------------------------------------------------------------------
  std::vector<const comm_snapshot*> comms;
  for (const auto& c : snap.comms)
    if (c.desc.uuid == uuid) comms.push_back(&c);
  auto per_comm = [&](std::string_view name, std::string_view type, std::string_view help, auto value) {
    family(out, name, type, help);
    std::map<std::string, double> rows;
    for (const auto* c : comms) rows[label_set(comm_labels(snap, c->desc)).add_all(ident.labels).str()] += value(*c);
    for (const auto& [l, v] : rows) sample(out, name, l, v);
  };
  per_comm("ncclinsp_inflight_ops", "gauge", "Operations handed to the GPU and not yet completed.",
           [](const comm_snapshot& c) { return static_cast<double>(c.inflight); });
  per_comm("ncclinsp_oldest_inflight_age_seconds", "gauge", "Age of the oldest in-flight operation (0 when none): the hang signal.",
           [](const comm_snapshot& c) { return c.oldest_inflight_age_s; });
  per_comm("ncclinsp_seconds_since_last_completion", "gauge", "Seconds since the communicator last completed an operation (0 before the first).",
           [](const comm_snapshot& c) { return c.since_last_completion_s < 0 ? 0.0 : c.since_last_completion_s; });
  std::vector<double> invalid(snap.comms.size(), 0.0);
  for (const auto& cell : snap.cells) invalid[cell.comm] += static_cast<double>(cell.total.invalid);
  per_comm("ncclinsp_invalid_ops_total", "counter", "Operations with zero duration, zero or overflowing size, or unknown function/datatype.",
           [&](const comm_snapshot& c) { return invalid[static_cast<std::size_t>(&c - snap.comms.data())]; });
  per_comm("ncclinsp_abandoned_ops_total", "counter", "Operations still in flight when their communicator was destroyed.",
           [](const comm_snapshot& c) { return static_cast<double>(c.abandoned); });
  family(out, "ncclinsp_last_completed_seq", "gauge", "Last completed NCCL sequence number per communicator and function.");
  {
    std::map<std::string, double> rows;
    for (const auto* c : comms)
      for (std::size_t f = 1; f < func_count; ++f)
        if (c->last_seq_plus1[f])
          rows[label_set(comm_labels(snap, c->desc)).add("collective", func_names[f]).add_all(ident.labels).str()] =
              static_cast<double>(c->last_seq_plus1[f] - 1);
    for (const auto& [l, v] : rows) sample(out, "ncclinsp_last_completed_seq", l, v);
  }

  // ---- GPU / process families ------------------------------------------------------------------
  const label_set gid = identity(snap, *gpu_desc);
  family(out, "ncclinsp_dropped_events_total", "counter", "Events lost, by reason (never silent).");
  for (std::size_t r = 0; r < drop_reason_names.size(); ++r) {
    double n = 0;
    for (const auto* c : comms) n += static_cast<double>(c->dropped[r]);
    if (r == static_cast<std::size_t>(drop_reason::comm_table_full)) n += static_cast<double>(snap.comm_table_full);
    sample(out, "ncclinsp_dropped_events_total", label_set(gid).add("reason", drop_reason_names[r]).add_all(ident.labels).str(), n);
  }
  family(out, "ncclinsp_filtered_ops_total", "counter", "Operations skipped on purpose (minimum size, missing GPU timing), by reason.");
  for (std::size_t r = 0; r < filter_reason_names.size(); ++r) {
    double n = 0;
    for (const auto* c : comms) n += static_cast<double>(c->filtered[r]);
    sample(out, "ncclinsp_filtered_ops_total", label_set(gid).add("reason", filter_reason_names[r]).add_all(ident.labels).str(), n);
  }
  family(out, "ncclinsp_export_timestamp_seconds", "gauge", "Unix time at which this file was written (stale-exporter signal).");
  sample(out, "ncclinsp_export_timestamp_seconds", label_set(gid).add_all(ident.labels).str(), static_cast<double>(snap.time_unix_ns / 1000000) / 1e3);
  family(out, "ncclinsp_info", "gauge", "ncclinsp build and profiler ABI; 'final' is 1 in the file written at shutdown.");
  sample(out, "ncclinsp_info",
         label_set(gid).add("version", NCCLINSP_VERSION_STRING).add("abi", ident.abi).add("final", snap.final ? "1" : "0").add_all(ident.labels).str(), 1);
}

}  // namespace ncclinsp::format
