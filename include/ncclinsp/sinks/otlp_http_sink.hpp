#pragma once
/// otlp_http_sink: POSTs each snapshot as OTLP/JSON (format/otlp_json.hpp) to an OpenTelemetry
/// endpoint over HTTP/1.1 on a plain socket: `POST /v1/metrics`, `Content-Type: application/json`,
/// `Connection: close`, one connection per export. Only http:// URLs: https:// is rejected with a
/// warning and the sink stays inert (no TLS here; point it at a local OTel Collector).
///
/// Bounded: name resolution (getaddrinfo, the only step that cannot be bounded), then a
/// non-blocking connect, send and receive, all within `timeout` in total, including at most
/// `max_retries` retries with doubling backoff on transport errors, 429 and 5xx. Failures are
/// counted (stats()) and logged rate-limited (the first, then at most one line a minute with the
/// running counts). The collector keeps the cumulative values, so the next successful export
/// carries everything. Runs only on the exporter thread (cold path), never on a recording thread.
///
/// Configuration from the environment (otlp_http_options::from_env), as the OTel spec and NCCL
/// Inspector's OTLP mode read it: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT (used as is), else
/// OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/metrics", default http://localhost:4318/v1/metrics;
/// OTEL_EXPORTER_OTLP_[METRICS_]TIMEOUT (ms, default 2000); OTEL_EXPORTER_OTLP_[METRICS_]HEADERS
/// (k=v,... percent-decoded); OTEL_SERVICE_NAME (default "nccl-inspector"); OTEL_RESOURCE_ATTRIBUTES;
/// SLURM_JOB_ID (resource attribute slurm.job.id).
///
/// Opt-in: this header brings the socket client (detail/http_client.hpp), so nothing includes it
/// for you. sinks_from_options() / inspector_options::from_env() build this sink for
/// NCCL_INSPECTOR_OTEL_EXPORT=1 when given make_otlp_http_sink (below); the plugin passes it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/env.hpp"
#include "ncclinsp/detail/failure_log.hpp"
#include "ncclinsp/detail/http_client.hpp"
#include "ncclinsp/format/otlp_json.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

struct otlp_http_options {
  std::string endpoint = "http://localhost:4318/v1/metrics";
  /// Total time one export may take: connect + send + response, retries and backoff included.
  std::chrono::milliseconds timeout{2000};
  /// Extra request headers (e.g. an API key). Host, Content-Type, Content-Length, Connection and
  /// Transfer-Encoding are ours and are ignored here.
  std::vector<std::pair<std::string, std::string>> headers{};
  /// Resource attributes; from_env() fills service.name, OTEL_RESOURCE_ATTRIBUTES, slurm.job.id.
  format::attribute_list resource{{"service.name", "nccl-inspector"}};
  std::uint32_t max_retries = 2;
  std::chrono::milliseconds initial_backoff{100};
  /// Send Inspector's four window gauges too.
  bool compat_gauges = true;
  /// Labels dropped, message_size coarsened, histogram buckets (format::otlp_json_options::card).
  format::cardinality card{};
  /// startTimeUnixNano of cumulative points; 0 = the time the sink was constructed.
  std::uint64_t start_time_unix_ns = 0;
  log_fn log{};

  static otlp_http_options from_env(const log_fn& log = {}, const getenv_fn& get = process_env);
};

/// Counters of an OTLP sink, shared with its copies (the exporter owns the sink; keep stats()).
struct otlp_http_stats {
  std::atomic<std::uint64_t> exports_ok{0};      ///< requests answered 2xx
  std::atomic<std::uint64_t> exports_failed{0};  ///< exports given up (after retries)
  std::atomic<std::uint64_t> attempts{0};        ///< HTTP requests tried, retries included
  std::atomic<std::uint64_t> retries{0};
  std::atomic<int> last_status{0};  ///< last HTTP status, 0 = transport error
};

namespace detail {

/// %XX -> byte (W3C baggage encoding the OTel spec uses for headers and resource attributes).
inline std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// "k1=v1,k2=v2" -> pairs, trimmed and percent-decoded; malformed items are reported in `bad`.
inline std::vector<std::pair<std::string, std::string>> parse_kv_list(std::string_view s, std::string& bad) {
  std::vector<std::pair<std::string, std::string>> out;
  for_each_item(s, ',', [&](std::string_view raw) {
    const std::string_view item = trim(raw);
    if (item.empty()) return;
    const auto eq = item.find('=');
    const std::string k = eq == std::string_view::npos ? std::string() : percent_decode(trim(item.substr(0, eq)));
    if (k.empty()) {
      bad += (bad.empty() ? "" : ", ") + std::string(item.substr(0, 32));
      return;
    }
    out.emplace_back(k, percent_decode(trim(item.substr(eq + 1))));
  });
  return out;
}

}  // namespace detail

inline otlp_http_options otlp_http_options::from_env(const log_fn& log, const getenv_fn& get) {
  otlp_http_options o;
  o.log = log;
  const detail::env_reader env(log, get);
  auto raw = [&](const char* k) { return env.raw(k); };
  if (const char* v = raw("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")) {
    o.endpoint = v;  // signal-specific: used as is (OTel spec)
  } else if (const char* g = raw("OTEL_EXPORTER_OTLP_ENDPOINT")) {
    std::string e = g;
    while (!e.empty() && e.back() == '/') e.pop_back();
    o.endpoint = e + "/v1/metrics";
  }
  for (const char* k : {"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}) {
    if (const char* v = raw(k)) {
      long long ms = 0;
      if (detail::parse_int(v, ms) && ms > 0 && ms <= 600000)
        o.timeout = std::chrono::milliseconds(ms);
      else
        emitf(log, log_level::warn, "ignoring {}=\"{}\": expected milliseconds in [1, 600000]; using {}", k,
              std::string_view(v).substr(0, 32), o.timeout.count());
      break;
    }
  }
  for (const char* k : {"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}) {
    if (const char* v = raw(k)) {
      std::string bad;
      for (auto& [hk, hv] : detail::parse_kv_list(v, bad)) {
        const std::string lower = detail::ascii_lower(hk);
        const bool ctl = (hk + hv).find_first_of(std::string("\r\n\0", 3)) != std::string::npos;
        if (ctl || lower == "host" || lower == "content-type" || lower == "content-length" || lower == "connection" ||
            lower == "transfer-encoding")
          bad += (bad.empty() ? "" : ", ") + hk.substr(0, 32);
        else
          o.headers.emplace_back(std::move(hk), std::move(hv));
      }
      if (!bad.empty())
        emitf(log, log_level::warn, "{}: ignoring header(s) {} (malformed, control characters, or set by the exporter)",
              k, bad);
      break;
    }
  }
  if (const char* v = raw("OTEL_RESOURCE_ATTRIBUTES")) {
    std::string bad;
    for (auto& [k, val] : detail::parse_kv_list(v, bad)) {
      bool replaced = false;
      for (auto& [rk, rv] : o.resource)
        if (rk == k) rv = val, replaced = true;
      if (!replaced) o.resource.emplace_back(std::move(k), std::move(val));
    }
    if (!bad.empty()) emitf(log, log_level::warn, "OTEL_RESOURCE_ATTRIBUTES: ignoring malformed item(s) {}", bad);
  }
  if (const char* v = raw("OTEL_SERVICE_NAME")) {
    for (auto& [rk, rv] : o.resource)
      if (rk == "service.name") rv = v;
  }
  if (const char* v = raw("SLURM_JOB_ID")) {
    bool has = false;
    for (const auto& [rk, rv] : o.resource) has = has || rk == "slurm.job.id";
    if (!has) o.resource.emplace_back("slurm.job.id", v);
  }
  return o;
}

class otlp_http_sink {
 public:
  explicit otlp_http_sink(otlp_http_options o)
      : o_(std::move(o)), url_(detail::parse_http_url(o_.endpoint)), stats_(std::make_shared<otlp_http_stats>()) {
    if (!o_.start_time_unix_ns) o_.start_time_unix_ns = detail::unix_ns();
    if (!url_.error.empty())
      emitf(o_.log, log_level::warn, "OTLP export disabled: endpoint \"{}\": {}", o_.endpoint, url_.error);
  }

  /// False when the endpoint was rejected (https, malformed): every write then fails at once.
  bool usable() const noexcept { return url_.error.empty(); }
  std::shared_ptr<const otlp_http_stats> stats() const noexcept { return stats_; }

  export_result write(const snapshot& snap) noexcept {
    if (!usable()) {
      stats_->exports_failed.fetch_add(1, std::memory_order_relaxed);
      return export_result::failure;
    }
    try {
      const std::string body = format::write_otlp_json(snap, {.resource = o_.resource,
                                                              .start_time_unix_ns = o_.start_time_unix_ns,
                                                              .compat_gauges = o_.compat_gauges,
                                                              .card = o_.card});
      if (body.empty()) return export_result::success;  // no communicator yet: nothing to send
      using clk = std::chrono::steady_clock;
      const auto deadline = clk::now() + o_.timeout;
      auto backoff = o_.initial_backoff;
      detail::http_result r;
      for (std::uint32_t attempt = 0;; ++attempt) {
        stats_->attempts.fetch_add(1, std::memory_order_relaxed);
        r = detail::http_post(url_, o_.headers, body, deadline);
        stats_->last_status.store(r.status, std::memory_order_relaxed);
        if (r.status >= 200 && r.status < 300) {
          stats_->exports_ok.fetch_add(1, std::memory_order_relaxed);
          if (errors_.succeeded()) emitf(o_.log, log_level::info, "OTLP export to {} works again", o_.endpoint);
          return export_result::success;
        }
        const bool retryable = r.status == 0 || r.status == 429 || r.status >= 500;
        if (!retryable || attempt >= o_.max_retries || clk::now() + backoff >= deadline) break;
        stats_->retries.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(backoff);
        backoff *= 2;
      }
      fail(r.status ? "HTTP status " + std::to_string(r.status) : r.error);
    } catch (...) {
      fail("out of memory");
    }
    return export_result::failure;
  }
  std::string_view name() const noexcept { return "otlp-http"; }

 private:
  void fail(const std::string& why) noexcept {
    const auto n = stats_->exports_failed.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!errors_.failed(1)) return;  // rate limit: one line a minute
    emitf(o_.log, log_level::warn,
          "OTLP export to {} failed: {} ({} failed export(s) so far; cumulative values go out with the next success)",
          o_.endpoint, why, n);
  }

  otlp_http_options o_;
  detail::http_url url_;
  std::shared_ptr<otlp_http_stats> stats_;
  detail::failure_log errors_{std::chrono::minutes(1), std::chrono::minutes(1)};
};

/// The OTLP sink configured from the environment (otlp_http_options::from_env) with the series
/// shape of the .prom files (Inspector's gauges, cardinality), as sinks_from_options() and
/// inspector_options::from_env() take it: pass it where NCCL_INSPECTOR_OTEL_EXPORT=1 should export
/// over OTLP/HTTP (the plugin does). Cold path.
inline any_sink make_otlp_http_sink(const log_fn& log, const getenv_fn& get, bool compat_gauges,
                                    const format::cardinality& card) {
  otlp_http_options o = otlp_http_options::from_env(log, get);
  o.compat_gauges = compat_gauges;
  o.card = card;
  return any_sink(otlp_http_sink(std::move(o)));
}

}  // namespace ncclinsp
