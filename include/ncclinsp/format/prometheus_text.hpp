#pragma once
/// Snapshot -> Prometheus text exposition (format 0.0.4), one GPU at a time. Pure: no I/O, no
/// globals. Writes Inspector's four gauge families (same names and label order, plus `uuid` and
/// user labels) and the native counters, histograms and health gauges of docs/metrics.md.
/// Every family has # HELP and # TYPE; label values are UTF-8-repaired and escaped; numbers are
/// locale-independent and never NaN/Inf. Series are sorted, so output is deterministic.
/// Thread-safety: pure function (cold path).

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/proxy_stats.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

/// GPU uuids present in a snapshot, sorted: one .prom file each.
inline std::vector<std::string> gpu_uuids(const snapshot& snap) {
  std::set<std::string> s;
  for (const auto& c : snap.comms) s.insert(c.desc.uuid);
  return {s.begin(), s.end()};
}

namespace detail {

/// `{k="v",...}` with UTF-8 repair and escaping; `close` false leaves the brace open (for `le`).
inline std::string render(const label_list& l, bool close = true) {
  std::string s;
  for (const auto& [k, v] : l) {
    s += s.empty() ? "{" : ",";
    s += k;
    s += "=\"";
    append_label_value(s, sanitize_utf8(v));
    s += '"';
  }
  if (close && !s.empty()) s += '}';
  return s;
}
inline label_list with(label_list l, std::string k, std::string v) {
  l.emplace_back(std::move(k), std::move(v));
  return l;
}

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

}  // namespace detail

/// Line budget of one file under cardinality::max_series: which op sets, communicators and
/// Inspector-compatible sets are written. Priority: the native op sets (the rules' input; the
/// ones past the cap fold into one overflow set), then communicator health rows (the hang
/// signal), then the compatible gauges.
struct series_budget {
  std::size_t native = SIZE_MAX, comms = SIZE_MAX, compat = SIZE_MAX;  ///< how many are written
  std::size_t folded_sets = 0, left_comms = 0, left_compat = 0;         ///< how many are not
};

/// Appends the exposition text for GPU `uuid` to `out`. `compat_gauges` adds Inspector's four
/// gauge families; their names end in `_microseconds` and `_gbs`, the only findings promtool's
/// linter reports on our output (the names are NVIDIA's; dashboards depend on them). `card`
/// bounds the series count (labels, size buckets, histogram, per-file cap).
template <class NativeBucketer = pow2_bucketer>
void write_prometheus(std::string& out, const snapshot& snap, std::string_view uuid, bool compat_gauges = true,
                      const cardinality& card = {}) {
  using namespace detail;
  const auto& ident = snap.identity;
  const comm_desc* gpu_desc = nullptr;
  for (const auto& c : snap.comms)
    if (c.desc.uuid == uuid) {
      gpu_desc = &c.desc;
      break;
    }
  if (!gpu_desc) return;
  const op_series series = group_cells<NativeBucketer>(snap, uuid, compat_gauges, card);
  std::vector<const comm_snapshot*> comms;
  for (const auto& c : snap.comms)
    if (c.desc.uuid == uuid) comms.push_back(&c);

  // Histogram buckets written (indices into the full bucket list; the last is +Inf).
  std::vector<std::size_t> hist_buckets;
  for (std::size_t b = 0; b < duration_buckets; ++b) {
    const bool inf = b == duration_bounds_ns.size();
    const std::uint64_t ns = inf ? 0 : duration_bounds_ns[b];
    if (card.histogram == histogram_mode::full ||
        (card.histogram == histogram_mode::coarse && (inf || ns == 100000 || ns == 1000000 || ns == 10000000 ||
                                                      ns == 100000000 || ns == 1000000000 || ns == 10000000000ull)))
      hist_buckets.push_back(b);
  }
  const std::size_t per_set = 4 + (card.histogram == histogram_mode::off ? 0 : hist_buckets.size() + 2);

  // Per-file cap: decide what fits before writing anything.
  series_budget budget;
  if (card.max_series) {
    const std::size_t fixed = drop_reason_names.size() + filter_reason_names.size() + 2 + 3;  // GPU families + overflow gauges
    std::size_t left = card.max_series > fixed ? card.max_series - fixed : 0;
    const std::size_t n_native = series.native.size();
    if (n_native * per_set <= left) {
      budget.native = n_native;
    } else {
      budget.native = left >= per_set ? left / per_set - 1 : 0;  // one set's room for the overflow set
      budget.folded_sets = n_native - budget.native;
    }
    left -= std::min(left, (budget.native + (budget.folded_sets ? 1 : 0)) * per_set);
    budget.comms = 0;
    for (const auto* c : comms) {
      std::size_t rows = 5;
      for (std::size_t f = 1; f < func_count; ++f) rows += c->last_seq_plus1[f] ? 1 : 0;
      for (const auto& b : snap.busbw) rows += &snap.comms[b.comm] == c ? 3 : 0;
      for (const auto& p : snap.proxy) rows += &snap.comms[p.comm] == c ? 5 : 0;
      if (rows > left) break;
      left -= rows;
      ++budget.comms;
    }
    budget.left_comms = comms.size() - budget.comms;
    const std::size_t n_compat = series.compat_coll.size() + series.compat_p2p.size();
    budget.compat = std::min(n_compat, left / 2);
    budget.left_compat = n_compat - budget.compat;
  }
  comms.resize(std::min(comms.size(), budget.comms));

  std::vector<std::pair<std::string, window_acc>> compat_coll, compat_p2p;
  std::size_t n_compat = 0;
  for (const auto& [l, w] : series.compat_coll)
    if (n_compat++ < budget.compat) compat_coll.emplace_back(render(l), w);
  for (const auto& [l, w] : series.compat_p2p)
    if (n_compat++ < budget.compat) compat_p2p.emplace_back(render(l), w);
  std::vector<std::pair<std::string, cell_stats>> native;
  cell_stats overflow{};
  for (const auto& [l, t] : series.native) {
    if (native.size() < budget.native) {
      native.emplace_back(render(l), t);
      continue;
    }
    overflow.ops += t.ops;
    overflow.invalid += t.invalid;
    overflow.bytes += t.bytes;
    overflow.busy_ns += t.busy_ns;
    overflow.bus_bytes += t.bus_bytes;
    for (std::size_t b = 0; b < duration_buckets; ++b) overflow.hist[b] += t.hist[b];
  }
  if (budget.folded_sets) {
    label_list l = comm_labels(snap, *gpu_desc, card);
    for (auto& [k, v] : l)
      if (k == "comm_name" || k == "comm_hash" || k == "rank") v = "_overflow";
      else if (k == "nranks" || k == "n_nodes") v = "0";
    l.insert(l.end(), {{"collective", "_overflow"}, {"message_size", "_overflow"}});
    if (card.algo_proto) l.emplace_back("algo_proto", "_overflow");
    add_user_labels(l, snap);
    native.emplace_back(render(l), overflow);
  }

  // ---- Inspector-compatible gauges -------------------------------------------------------------
  auto compat = [&](const std::vector<std::pair<std::string, window_acc>>& m, std::string_view bw_name, std::string_view t_name, std::string_view what) {
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
  if (card.histogram != histogram_mode::off) family(out, "ncclinsp_op_duration_seconds", "histogram", "Operation duration.");
  for (const auto& [l, t] : native) {
    if (card.histogram == histogram_mode::off) break;
    const std::string open = l.substr(0, l.size() - 1);
    std::uint64_t cum = 0;
    std::size_t next = 0;
    for (std::size_t b = 0; b < duration_buckets; ++b) {
      cum += t.hist[b];
      if (hist_buckets[next] != b) continue;
      ++next;
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
  // Communicators whose labels coincide once `card` drops labels (same name, comm_hash dropped)
  // share one row: counters add up, the age gauges take the worst (max) communicator.
  auto per_comm = [&](std::string_view name, std::string_view type, std::string_view help, auto value, bool max = false) {
    family(out, name, type, help);
    std::map<std::string, double> rows;
    for (const auto* c : comms) {
      label_list l = comm_labels(snap, c->desc, card);
      add_user_labels(l, snap);
      const std::string k = render(l);
      const double v = value(*c);
      const auto [it, fresh] = rows.emplace(k, v);
      if (!fresh) it->second = max ? std::max(it->second, v) : it->second + v;
    }
    for (const auto& [l, v] : rows) sample(out, name, l, v);
  };
  per_comm("ncclinsp_inflight_ops", "gauge", "Operations handed to the GPU and not yet completed.",
           [](const comm_snapshot& c) { return static_cast<double>(c.inflight); });
  per_comm("ncclinsp_oldest_inflight_age_seconds", "gauge", "Age of the oldest in-flight operation (0 when none): the hang signal.",
           [](const comm_snapshot& c) { return c.oldest_inflight_age_s; }, true);
  per_comm("ncclinsp_seconds_since_last_completion", "gauge", "Seconds since the communicator last completed an operation (0 before the first).",
           [](const comm_snapshot& c) { return c.since_last_completion_s < 0 ? 0.0 : c.since_last_completion_s; }, true);
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
          rows[render([&] {
            label_list l = with(comm_labels(snap, c->desc, card), "collective", std::string(func_names[f]));
            add_user_labels(l, snap);
            return l;
          }())] = static_cast<double>(c->last_seq_plus1[f] - 1);
    for (const auto& [l, v] : rows) sample(out, "ncclinsp_last_completed_seq", l, v);
  }

  // ---- network proxy accounting (sampled ProxyStep events), when enabled ------------------------
  {
    struct row {
      std::string dir_labels;                 // comm labels + peer + direction
      const proxy_peer_snapshot* p;
    };
    std::vector<row> rows;
    for (const auto& p : snap.proxy) {  // full communicator labels: rows are per peer and never merged
      if (std::find(comms.begin(), comms.end(), &snap.comms[p.comm]) == comms.end()) continue;
      label_list l = comm_labels(snap, snap.comms[p.comm].desc);
      l.insert(l.end(), {{"peer", std::to_string(p.peer)}, {"direction", p.send ? "send" : "recv"}});
      add_user_labels(l, snap);
      rows.push_back({render(l, false), &p});
    }
    std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.dir_labels < b.dir_labels; });
    if (!rows.empty()) {
      family(out, "ncclinsp_proxy_wait_seconds_total", "counter",
             "Sampled network steps (NCCLINSP_PROXY): seconds spent per ProxyStep state, per peer rank and direction (send: gpu, peer_credit, "
             "network; recv: network, flush, gpu).");
      for (const auto& r : rows)
        for (std::size_t s = 0; s < 3; ++s) {
          out += "ncclinsp_proxy_wait_seconds_total";
          out += r.dir_labels;
          out += ",state=\"";
          out += proxy_wait_names[(r.p->send ? 0 : 3) + s];
          out += "\"} ";
          append_double(out, static_cast<double>(r.p->wait_ns[s]) * 1e-9);
          out += '\n';
        }
      family(out, "ncclinsp_proxy_bytes_total", "counter", "Sampled network steps (NCCLINSP_PROXY): bytes, per peer rank and direction.");
      for (const auto& r : rows) sample(out, "ncclinsp_proxy_bytes_total", r.dir_labels + "}", static_cast<double>(r.p->bytes));
      family(out, "ncclinsp_proxy_steps_total", "counter", "Sampled network steps (NCCLINSP_PROXY): steps completed, per peer rank and direction.");
      for (const auto& r : rows) sample(out, "ncclinsp_proxy_steps_total", r.dir_labels + "}", static_cast<double>(r.p->steps));
    }
  }

  // ---- in-process change detection (detector.hpp), when a detector ran ---------------------------
  if (!snap.busbw.empty()) {
    std::map<std::string, busbw_health> merged;  // coinciding rows: lowest ratio, degraded if any, degradations added
    for (const auto& b : snap.busbw) {
      if (std::find(comms.begin(), comms.end(), &snap.comms[b.comm]) == comms.end()) continue;
      label_list l = comm_labels(snap, snap.comms[b.comm].desc, card);
      l.insert(l.end(), {{"collective", std::string(to_string(b.fn))},
                         {"message_size", size_label<pow2_bucketer>(b.size_bucket, card.size_bucket_bits)}});
      add_user_labels(l, snap);
      const auto [it, fresh] = merged.emplace(render(l), b);
      if (!fresh) {
        it->second.ratio = std::min(it->second.ratio, b.ratio);
        it->second.degraded = it->second.degraded || b.degraded;
        it->second.degradations += b.degradations;
      }
    }
    std::vector<std::pair<std::string, const busbw_health*>> rows;
    for (const auto& [k, b] : merged) rows.emplace_back(k, &b);
    if (!rows.empty()) {
      family(out, "ncclinsp_busbw_ratio_to_baseline", "gauge",
             "In-process detector: median bus bandwidth of the recent export windows / the baseline windows' median (frozen while degraded).");
      for (const auto& [l, b] : rows) sample(out, "ncclinsp_busbw_ratio_to_baseline", l, b->ratio);
      family(out, "ncclinsp_busbw_degraded", "gauge", "In-process detector: 1 while this communicator/collective/size is degraded, else 0.");
      for (const auto& [l, b] : rows) sample(out, "ncclinsp_busbw_degraded", l, b->degraded ? 1.0 : 0.0);
      family(out, "ncclinsp_busbw_degradations_total", "counter", "In-process detector: times this communicator/collective/size turned degraded.");
      for (const auto& [l, b] : rows) sample(out, "ncclinsp_busbw_degradations_total", l, static_cast<double>(b->degradations));
    }
  }

  // ---- GPU / process families ------------------------------------------------------------------
  label_list gid = identity_labels(snap, *gpu_desc);
  auto gpu_labels = [&](label_list extra) {
    label_list l = gid;
    l.insert(l.end(), extra.begin(), extra.end());
    add_user_labels(l, snap);
    return render(l);
  };
  family(out, "ncclinsp_dropped_events_total", "counter", "Events lost, by reason (never silent).");
  for (std::size_t r = 0; r < drop_reason_names.size(); ++r) {
    double n = 0;
    for (const auto* c : comms) n += static_cast<double>(c->dropped[r]);
    for (const auto& d : snap.departed) n += d.gpu.uuid == uuid ? static_cast<double>(d.dropped[r]) : 0.0;
    if (r == static_cast<std::size_t>(drop_reason::comm_table_full)) n += static_cast<double>(snap.comm_table_full);
    sample(out, "ncclinsp_dropped_events_total", gpu_labels({{"reason", drop_reason_names[r]}}), n);
  }
  family(out, "ncclinsp_filtered_ops_total", "counter", "Operations skipped on purpose (minimum size, missing GPU timing), by reason.");
  for (std::size_t r = 0; r < filter_reason_names.size(); ++r) {
    double n = 0;
    for (const auto* c : comms) n += static_cast<double>(c->filtered[r]);
    for (const auto& d : snap.departed) n += d.gpu.uuid == uuid ? static_cast<double>(d.filtered[r]) : 0.0;
    sample(out, "ncclinsp_filtered_ops_total", gpu_labels({{"reason", filter_reason_names[r]}}), n);
  }
  if (card.max_series) {
    family(out, "ncclinsp_series_overflow", "gauge",
           "Series left out of this file by the per-file cap (NCCLINSP_MAX_SERIES): op series sets folded into comm_name=\"_overflow\", "
           "communicators and Inspector-compatible sets not written.");
    sample(out, "ncclinsp_series_overflow", gpu_labels({{"kind", "op_sets"}}), static_cast<double>(budget.folded_sets));
    sample(out, "ncclinsp_series_overflow", gpu_labels({{"kind", "comms"}}), static_cast<double>(budget.left_comms));
    sample(out, "ncclinsp_series_overflow", gpu_labels({{"kind", "compat"}}), static_cast<double>(budget.left_compat));
  }
  family(out, "ncclinsp_export_timestamp_seconds", "gauge", "Unix time at which this file was written (stale-exporter signal).");
  sample(out, "ncclinsp_export_timestamp_seconds", gpu_labels({}), static_cast<double>(snap.time_unix_ns / 1000000) / 1e3);
  family(out, "ncclinsp_info", "gauge", "ncclinsp build and profiler ABI; 'final' is 1 in the file written at shutdown.");
  sample(out, "ncclinsp_info",
         gpu_labels({{"version", NCCLINSP_VERSION_STRING}, {"abi", ident.abi}, {"final", snap.final ? "1" : "0"}}), 1);
}

}  // namespace ncclinsp::format
