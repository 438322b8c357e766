#pragma once
/// Snapshot -> OTLP/JSON `ExportMetricsServiceRequest` (OpenTelemetry protocol, protobuf JSON
/// mapping: lowerCamelCase field names, 64-bit integers as decimal strings, enums as numbers).
/// Pure: no I/O, no globals. Unlike NCCL Inspector's OTLP mode (gauges only), the native counters
/// are cumulative monotonic Sums (aggregationTemporality 2, startTimeUnixNano = collector start)
/// and the duration is a Histogram (explicitBounds / bucketCounts / sum / count), so a backend can
/// compute rates and quantiles. Data point attributes carry exactly our Prometheus label names
/// (docs/metrics.md). Metric names are the Prometheus family names without the `_total` suffix
/// and with units `{op}`, `By`, `s`: an OTel Collector's prometheus exporter or Prometheus's OTLP
/// receiver (suffixes on) turns them back into the docs/metrics.md names.
/// Thread-safety: pure function (cold path, exporter thread).

#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/format/text.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/snapshot.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::format {

using attribute_list = label_list;

struct otlp_json_options {
  /// Resource attributes (service.name, slurm.job.id, OTEL_RESOURCE_ATTRIBUTES, ...), in order.
  attribute_list resource{};
  /// startTimeUnixNano of every cumulative point: when the collector started (0: the snapshot time).
  std::uint64_t start_time_unix_ns = 0;
  /// Also send Inspector's four window gauges (nccl_bus_bandwidth_gbs, ...), as Inspector's OTLP mode does.
  bool compat_gauges = true;
  std::string scope_name = "ncclinsp";
};

namespace detail {

inline void json_key(std::string& out, std::string_view k) {
  out += '"';
  out += k;
  out += "\":";
}
inline void json_u64(std::string& out, std::uint64_t v) {  // int64/uint64/fixed64: a JSON string
  out += '"';
  append_int(out, v);
  out += '"';
}
inline void json_double(std::string& out, double v) { append_double(out, std::isfinite(v) ? v : 0.0); }

inline void json_attributes(std::string& out, const attribute_list& attrs) {
  out += "\"attributes\":[";
  bool first = true;
  for (const auto& [k, v] : attrs) {
    if (!first) out += ',';
    first = false;
    out += "{\"key\":";
    append_json_string(out, k);
    out += ",\"value\":{\"stringValue\":";
    append_json_string(out, v);
    out += "}}";
  }
  out += ']';
}

/// One metric being assembled: its data points are appended as JSON text.
struct otlp_metric {
  std::string name, description, unit;
  enum kind_t { sum_int, sum_double, gauge_int, gauge_double, histogram } kind = gauge_double;
  std::vector<std::string> points;
};

inline void point_header(std::string& p, const attribute_list& attrs, std::uint64_t start_ns, std::uint64_t now_ns, bool cumulative) {
  p += '{';
  json_attributes(p, attrs);
  if (cumulative) {
    p += ',';
    json_key(p, "startTimeUnixNano");
    json_u64(p, start_ns);
  }
  p += ',';
  json_key(p, "timeUnixNano");
  json_u64(p, now_ns);
}

inline void number_point(otlp_metric& m, const attribute_list& attrs, std::uint64_t start_ns, std::uint64_t now_ns, double v) {
  std::string p;
  const bool cumulative = m.kind == otlp_metric::sum_int || m.kind == otlp_metric::sum_double;
  point_header(p, attrs, start_ns, now_ns, cumulative);
  if (m.kind == otlp_metric::sum_int || m.kind == otlp_metric::gauge_int) {
    p += ",\"asInt\":";
    json_u64(p, v > 0 ? static_cast<std::uint64_t>(std::llround(v)) : 0);
  } else {
    p += ",\"asDouble\":";
    json_double(p, v);
  }
  p += '}';
  m.points.push_back(std::move(p));
}

inline void write_metric(std::string& out, const otlp_metric& m) {
  out += "{\"name\":";
  append_json_string(out, m.name);
  out += ",\"description\":";
  append_json_string(out, m.description);
  out += ",\"unit\":";
  append_json_string(out, m.unit);
  const bool sum = m.kind == otlp_metric::sum_int || m.kind == otlp_metric::sum_double;
  const bool hist = m.kind == otlp_metric::histogram;
  out += sum ? ",\"sum\":{" : hist ? ",\"histogram\":{" : ",\"gauge\":{";
  out += "\"dataPoints\":[";
  for (std::size_t i = 0; i < m.points.size(); ++i) {
    if (i) out += ',';
    out += m.points[i];
  }
  out += ']';
  if (sum) out += ",\"aggregationTemporality\":2,\"isMonotonic\":true";
  if (hist) out += ",\"aggregationTemporality\":2";
  out += "}}";
}

}  // namespace detail

/// Returns the request body for `snap`, or an empty string when it holds no communicator (nothing
/// to send). All GPUs of the snapshot go in one request; `gpu`/`uuid` attributes tell them apart.
template <class NativeBucketer = pow2_bucketer>
std::string write_otlp_json(const snapshot& snap, const otlp_json_options& o = {}) {
  using namespace detail;
  if (snap.comms.empty()) return {};
  const std::uint64_t now = snap.time_unix_ns;
  const std::uint64_t start = o.start_time_unix_ns && o.start_time_unix_ns <= now ? o.start_time_unix_ns : now;

  // ---- the same series as the Prometheus serializer (format/series.hpp) ------------------------
  const op_series series = group_cells<NativeBucketer>(snap, {}, o.compat_gauges);
  const auto& native = series.native;
  const auto& compat_coll = series.compat_coll;
  const auto& compat_p2p = series.compat_p2p;

  std::deque<otlp_metric> metrics;  // deque: references stay valid while more metrics are added
  auto metric = [&](std::string name, std::string unit, otlp_metric::kind_t k, std::string help) -> otlp_metric& {
    metrics.push_back({std::move(name), std::move(help), std::move(unit), k, {}});
    return metrics.back();
  };

  // ---- Inspector-compatible window gauges ------------------------------------------------------
  if (o.compat_gauges) {
    auto compat = [&](const std::map<attribute_list, window_acc>& m, const char* bw, const char* t, const char* what) {
      if (m.empty()) return;
      otlp_metric& b = metric(bw, "GB/s", otlp_metric::gauge_double,
                              std::string("Geometric mean bus bandwidth (GB/s) of ") + what + " in the last export window (Inspector-compatible).");
      for (const auto& [a, w] : m) number_point(b, a, start, now, w.bw_count ? std::exp(w.log_sum / static_cast<double>(w.bw_count)) : 0.0);
      otlp_metric& e = metric(t, "us", otlp_metric::gauge_double,
                              std::string("Mean execution time (microseconds) of ") + what + " in the last export window (Inspector-compatible).");
      for (const auto& [a, w] : m) number_point(e, a, start, now, static_cast<double>(w.busy_ns) / static_cast<double>(w.valid) / 1e3);
    };
    compat(compat_coll, "nccl_bus_bandwidth_gbs", "nccl_collective_exec_time_microseconds", "collectives");
    compat(compat_p2p, "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds", "P2P operations");
  }

  // ---- native cumulative Sums and the duration Histogram ---------------------------------------
  if (!native.empty()) {
    otlp_metric& ops = metric("ncclinsp_ops", "{op}", otlp_metric::sum_int, "Completed NCCL operations.");
    for (const auto& [a, t] : native) number_point(ops, a, start, now, static_cast<double>(t.ops));
    otlp_metric& bytes = metric("ncclinsp_bytes", "By", otlp_metric::sum_int, "Message bytes per rank as NCCL reports them.");
    for (const auto& [a, t] : native) number_point(bytes, a, start, now, static_cast<double>(t.bytes));
    otlp_metric& bus = metric("ncclinsp_bus_bytes", "By", otlp_metric::sum_double,
                              "Bus bytes (traffic x nccl-tests bus factor); rate(bus_bytes)/rate(busy_seconds) is bus bandwidth.");
    for (const auto& [a, t] : native) number_point(bus, a, start, now, t.bus_bytes);
    otlp_metric& busy = metric("ncclinsp_busy_seconds", "s", otlp_metric::sum_double, "Sum of operation durations.");
    for (const auto& [a, t] : native) number_point(busy, a, start, now, static_cast<double>(t.busy_ns) * 1e-9);
    otlp_metric& h = metric("ncclinsp_op_duration_seconds", "s", otlp_metric::histogram, "Operation duration.");
    for (const auto& [a, t] : native) {
      std::string p;
      point_header(p, a, start, now, true);
      std::uint64_t count = 0;
      for (auto c : t.hist) count += c;
      p += ",\"count\":";
      json_u64(p, count);
      p += ",\"sum\":";
      json_double(p, static_cast<double>(t.busy_ns) * 1e-9);
      p += ",\"bucketCounts\":[";
      for (std::size_t b = 0; b < duration_buckets; ++b) {
        if (b) p += ',';
        json_u64(p, t.hist[b]);
      }
      p += "],\"explicitBounds\":[";
      for (std::size_t b = 0; b < duration_bounds_ns.size(); ++b) {
        if (b) p += ',';
        json_double(p, static_cast<double>(duration_bounds_ns[b]) * 1e-9);
      }
      p += "]}";
      h.points.push_back(std::move(p));
    }
  }

  // ---- communicator health ---------------------------------------------------------------------
  auto per_comm = [&](const char* name, const char* unit, otlp_metric::kind_t k, const char* help, auto value) {
    otlp_metric& m = metric(name, unit, k, help);
    std::map<attribute_list, double> rows;
    for (const auto& c : snap.comms) {
      attribute_list a = comm_labels(snap, c.desc);
      add_user_labels(a, snap);
      rows[a] += value(c);
    }
    for (const auto& [a, v] : rows) number_point(m, a, start, now, v);
  };
  per_comm("ncclinsp_inflight_ops", "{op}", otlp_metric::gauge_int, "Operations handed to the GPU and not yet completed.",
           [](const comm_snapshot& c) { return static_cast<double>(c.inflight); });
  per_comm("ncclinsp_oldest_inflight_age_seconds", "s", otlp_metric::gauge_double, "Age of the oldest in-flight operation: the hang signal.",
           [](const comm_snapshot& c) { return c.oldest_inflight_age_s; });
  per_comm("ncclinsp_seconds_since_last_completion", "s", otlp_metric::gauge_double, "Seconds since the communicator last completed an operation.",
           [](const comm_snapshot& c) { return c.since_last_completion_s < 0 ? 0.0 : c.since_last_completion_s; });
  per_comm("ncclinsp_abandoned_ops", "{op}", otlp_metric::sum_int, "Operations still in flight when their communicator was destroyed.",
           [](const comm_snapshot& c) { return static_cast<double>(c.abandoned); });

  // ---- per GPU: dropped and filtered -----------------------------------------------------------
  std::map<attribute_list, double> dropped, filtered;
  auto per_gpu = [&](const comm_desc& d, const auto& drops, const auto& filters) {
    for (std::size_t r = 0; r < drop_reason_names.size(); ++r) {
      attribute_list a = identity_labels(snap, d);
      a.emplace_back("reason", drop_reason_names[r]);
      add_user_labels(a, snap);
      dropped[a] += static_cast<double>(drops[r]);
    }
    for (std::size_t r = 0; r < filter_reason_names.size(); ++r) {
      attribute_list a = identity_labels(snap, d);
      a.emplace_back("reason", filter_reason_names[r]);
      add_user_labels(a, snap);
      filtered[a] += static_cast<double>(filters[r]);
    }
  };
  for (const auto& c : snap.comms) per_gpu(c.desc, c.dropped, c.filtered);
  for (const auto& d : snap.departed) per_gpu(d.gpu, d.dropped, d.filtered);
  otlp_metric& dm = metric("ncclinsp_dropped_events", "{event}", otlp_metric::sum_int, "Events lost, by reason (never silent).");
  for (const auto& [a, v] : dropped) number_point(dm, a, start, now, v);
  otlp_metric& fm = metric("ncclinsp_filtered_ops", "{op}", otlp_metric::sum_int, "Operations skipped on purpose, by reason.");
  for (const auto& [a, v] : filtered) number_point(fm, a, start, now, v);

  // ---- the request -----------------------------------------------------------------------------
  std::string out;
  out.reserve(4096);
  out += "{\"resourceMetrics\":[{\"resource\":{";
  json_attributes(out, o.resource);
  out += "},\"scopeMetrics\":[{\"scope\":{\"name\":";
  append_json_string(out, o.scope_name);
  out += ",\"version\":\"" NCCLINSP_VERSION_STRING "\"},\"metrics\":[";
  bool first = true;
  for (const auto& m : metrics) {
    if (m.points.empty()) continue;
    if (!first) out += ',';
    first = false;
    write_metric(out, m);
  }
  out += "]}]}]}";
  return out;
}

}  // namespace ncclinsp::format
