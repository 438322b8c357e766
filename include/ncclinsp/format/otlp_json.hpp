#pragma once
/// Snapshot -> OTLP/JSON `ExportMetricsServiceRequest` (OpenTelemetry protocol, protobuf JSON
/// mapping: lowerCamelCase field names, 64-bit integers as decimal strings, enums as numbers).
/// Pure: no I/O, no globals. Unlike NCCL Inspector's OTLP mode (gauges only), the native counters
/// are cumulative monotonic Sums (aggregationTemporality 2, startTimeUnixNano = collector start)
/// and the duration is a Histogram (explicitBounds / bucketCounts / sum / count), so a backend can
/// compute rates and quantiles. The families, help texts, units and data point attributes are the
/// catalogue's (format/catalogue.hpp: the Prometheus label names, docs/metrics.md). Metric names
/// are the Prometheus family names without the `_total` suffix and with units `{op}`, `By`, `s`:
/// an OTel Collector's prometheus exporter or Prometheus's OTLP receiver (suffixes on) turns them
/// back into the docs/metrics.md names.
/// Thread-safety: pure function (cold path, exporter thread).

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/format/catalogue.hpp"
#include "ncclinsp/format/series.hpp"
#include "ncclinsp/format/json_writer.hpp"
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
  /// The cardinality controls of the .prom files, with the same meaning (NCCLINSP_DROP_LABELS,
  /// _SIZE_BUCKET_BITS, _HISTOGRAM): labels dropped, message_size coarsened, the duration
  /// histogram with fewer buckets (bucketCounts summed to the kept bounds) or none. max_series is
  /// a per-file cap of the Prometheus sink and is not applied here.
  cardinality card{};
  std::string scope_name = "ncclinsp";
};

namespace detail {

inline void json_attributes(json_writer& w, const attribute_list& attrs) {
  w.key("attributes").begin_array();
  for (const auto& [k, v] : attrs)
    w.begin_object()
        .key("key")
        .value(k)
        .key("value")
        .begin_object()
        .key("stringValue")
        .value(v)
        .end_object()
        .end_object();
  w.end_array();
}

/// One metric being assembled: its data points are appended as JSON text.
struct otlp_metric {
  std::string name, description, unit;
  enum kind_t { sum_int, sum_double, gauge_int, gauge_double, histogram } kind = gauge_double;
  std::vector<std::string> points;
};

/// Opens a data point's object and writes its attributes and times; the caller adds the value.
/// Times and 64-bit counts are int64/uint64/fixed64 in the protobuf: JSON strings (quoted()).
inline void point_header(json_writer& w, const attribute_list& attrs, std::uint64_t start_ns, std::uint64_t now_ns,
                         bool cumulative) {
  w.begin_object();
  json_attributes(w, attrs);
  if (cumulative) w.key("startTimeUnixNano").quoted(start_ns);
  w.key("timeUnixNano").quoted(now_ns);
}

inline void number_point(otlp_metric& m, const attribute_list& attrs, std::uint64_t start_ns, std::uint64_t now_ns,
                         double v) {
  std::string p;
  json_writer w(p);
  const bool cumulative = m.kind == otlp_metric::sum_int || m.kind == otlp_metric::sum_double;
  point_header(w, attrs, start_ns, now_ns, cumulative);
  if (m.kind == otlp_metric::sum_int || m.kind == otlp_metric::gauge_int)
    w.key("asInt").quoted(v > 0 ? static_cast<std::uint64_t>(std::llround(v)) : 0);
  else
    w.key("asDouble").value(v);
  w.end_object();
  m.points.push_back(std::move(p));
}

inline void write_metric(json_writer& w, const otlp_metric& m) {
  w.begin_object().key("name").value(m.name).key("description").value(m.description).key("unit").value(m.unit);
  const bool sum = m.kind == otlp_metric::sum_int || m.kind == otlp_metric::sum_double;
  const bool hist = m.kind == otlp_metric::histogram;
  w.key(sum ? "sum" : hist ? "histogram" : "gauge").begin_object();
  w.key("dataPoints").begin_array();
  for (const auto& p : m.points) w.raw(p);
  w.end_array();
  if (sum || hist) w.key("aggregationTemporality").value(2);
  if (sum) w.key("isMonotonic").value(true);
  w.end_object().end_object();
}

}  // namespace detail

/// Returns the request body for `snap`, or an empty string when it holds no communicator (nothing
/// to send). All GPUs of the snapshot go in one request; `gpu`/`uuid` attributes tell them apart.
/// Every family of the catalogue (format/catalogue.hpp) that has data points, in its order.
template <class NativeBucketer = pow2_bucketer>
std::string write_otlp_json(const snapshot& snap, const otlp_json_options& o = {}) {
  using namespace detail;
  if (snap.comms.empty()) return {};
  const std::uint64_t now = snap.time_unix_ns;
  const std::uint64_t start = o.start_time_unix_ns && o.start_time_unix_ns <= now ? o.start_time_unix_ns : now;
  const series_table table = collect_series<NativeBucketer>(snap, std::nullopt, o.compat_gauges, o.card);
  const std::vector<std::size_t> hist_buckets = histogram_buckets(o.card.histogram);

  std::vector<otlp_metric> metrics;
  metrics.reserve(catalogue.size());
  for (const metric_family& fam : catalogue) {
    if (fam.compat && !o.compat_gauges) continue;
    if (fam.type == metric_type::histogram && o.card.histogram == histogram_mode::off) continue;
    const auto kind = fam.type == metric_type::histogram ? otlp_metric::histogram
                      : fam.type == metric_type::counter
                          ? (fam.integer ? otlp_metric::sum_int : otlp_metric::sum_double)
                          : (fam.integer ? otlp_metric::gauge_int : otlp_metric::gauge_double);
    otlp_metric& m = metrics.emplace_back(
        otlp_metric{std::string(fam.otlp_name()), std::string(fam.help), std::string(fam.unit), kind, {}});
    for (const series_row& r : table.of(fam.source)) {
      if (kind != otlp_metric::histogram) {
        number_point(m, r.labels, start, now, fam.value(r));
        continue;
      }
      std::string p;
      json_writer w(p);
      point_header(w, r.labels, start, now, true);
      std::uint64_t count = 0;
      for (auto c : r.stats.hist) count += c;
      w.key("count").quoted(count);
      w.key("sum").value(static_cast<double>(r.stats.busy_ns) * 1e-9);
      w.key("bucketCounts").begin_array();
      std::size_t from = 0;  // each kept bucket counts the full buckets since the previous kept one
      for (std::size_t k = 0; k < hist_buckets.size(); ++k) {
        std::uint64_t n = 0;
        for (; from <= hist_buckets[k]; ++from) n += r.stats.hist[from];
        w.quoted(n);
      }
      w.end_array().key("explicitBounds").begin_array();
      for (std::size_t k = 0; k + 1 < hist_buckets.size(); ++k)
        w.value(static_cast<double>(duration_bounds_ns[hist_buckets[k]]) * 1e-9);
      w.end_array().end_object();
      m.points.push_back(std::move(p));
    }
  }

  // ---- the request -----------------------------------------------------------------------------
  std::string out;
  out.reserve(4096);
  json_writer w(out);
  w.begin_object().key("resourceMetrics").begin_array().begin_object().key("resource").begin_object();
  json_attributes(w, o.resource);
  w.end_object().key("scopeMetrics").begin_array().begin_object();
  w.key("scope")
      .begin_object()
      .key("name")
      .value(o.scope_name)
      .key("version")
      .value(NCCLINSP_VERSION_STRING)
      .end_object();
  w.key("metrics").begin_array();
  for (const auto& m : metrics)
    if (!m.points.empty()) write_metric(w, m);
  w.end_array().end_object().end_array().end_object().end_array().end_object();
  return out;
}

}  // namespace ncclinsp::format
