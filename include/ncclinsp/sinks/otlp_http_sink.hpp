#pragma once
/// OtlpHttpSink: POSTs each snapshot as OTLP/JSON (format/otlp_json.hpp) to an OpenTelemetry
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

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/format/otlp_json.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/options.hpp"
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
  /// startTimeUnixNano of cumulative points; 0 = the time the sink was constructed.
  std::uint64_t start_time_unix_ns = 0;
  log_fn log{};

  static otlp_http_options from_env(const log_fn& log = {}, const options::getenv_fn& get = [](const char* k) { return std::getenv(k); });
};

/// Counters of an OTLP sink, shared with its copies (the exporter owns the sink; keep stats()).
struct otlp_http_stats {
  std::atomic<std::uint64_t> exports_ok{0};     ///< requests answered 2xx
  std::atomic<std::uint64_t> exports_failed{0}; ///< exports given up (after retries)
  std::atomic<std::uint64_t> attempts{0};       ///< HTTP requests tried, retries included
  std::atomic<std::uint64_t> retries{0};
  std::atomic<int> last_status{0};              ///< last HTTP status, 0 = transport error
};

namespace detail {

struct http_url {
  std::string host, port = "80", path = "/";
  std::string error;  ///< non-empty when the URL is unusable
};

/// Parses http://host[:port][/path], host may be [IPv6]. https and anything else set `error`.
inline http_url parse_http_url(std::string_view u) {
  http_url r;
  const auto scheme_end = u.find("://");
  if (scheme_end == std::string_view::npos) {
    r.error = "not a URL (expected http://host:port/path)";
    return r;
  }
  std::string scheme(u.substr(0, scheme_end));
  for (auto& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme == "https") {
    r.error = "https:// is not supported (this exporter has no TLS); use an http:// endpoint such as a local OpenTelemetry Collector";
    return r;
  }
  if (scheme != "http") {
    r.error = "unsupported scheme \"" + scheme + "\" (only http://)";
    return r;
  }
  std::string_view rest = u.substr(scheme_end + 3);
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) r.path = std::string(rest.substr(slash));
  if (const auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  if (!authority.empty() && authority[0] == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      r.error = "unterminated IPv6 address";
      return r;
    }
    r.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (authority[0] != ':') {
        r.error = "junk after the IPv6 address";
        return r;
      }
      r.port = std::string(authority.substr(1));
    }
  } else {
    const auto colon = authority.find(':');
    r.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) r.port = std::string(authority.substr(colon + 1));
  }
  long long p = 0;
  if (r.host.empty()) r.error = "no host";
  else if (!env_reader::parse_int(r.port, p) || p < 1 || p > 65535) r.error = "bad port \"" + r.port + "\"";
  if (r.path.empty()) r.path = "/";
  return r;
}

/// %XX -> byte (W3C baggage encoding the OTel spec uses for headers and resource attributes).
inline std::string percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
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
  while (!s.empty()) {
    const auto comma = s.find(',');
    const std::string_view item = trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    const std::string k = eq == std::string_view::npos ? std::string() : percent_decode(trim(item.substr(0, eq)));
    if (k.empty()) {
      bad += (bad.empty() ? "" : ", ") + std::string(item.substr(0, 32));
      continue;
    }
    out.emplace_back(k, percent_decode(trim(item.substr(eq + 1))));
  }
  return out;
}

inline std::uint64_t now_unix_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

struct http_result {
  int status = 0;     ///< HTTP status; 0 on a transport error
  std::string error;  ///< transport error text
};

/// One POST, all steps bounded by `deadline` (except getaddrinfo). Cold path.
inline http_result http_post(const http_url& url, const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                             std::chrono::steady_clock::time_point deadline) {
  using clk = std::chrono::steady_clock;
  http_result res;
  auto remaining_ms = [&] {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clk::now()).count();
    return ms > 0 ? static_cast<int>(ms < 1000000 ? ms : 1000000) : 0;
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (const int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &ai); rc != 0) {
    res.error = "cannot resolve " + url.host + ": " + ::gai_strerror(rc);
    return res;
  }
  int fd = -1;
  for (addrinfo* p = ai; p && fd < 0; p = p->ai_next) {
    fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, p->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
      int err = errno;
      if (err == EINPROGRESS) {
        pollfd pfd{fd, POLLOUT, 0};
        const int n = ::poll(&pfd, 1, remaining_ms());
        socklen_t len = sizeof err;
        if (n <= 0) err = n == 0 ? ETIMEDOUT : errno;
        else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
      if (err != 0 && err != EINPROGRESS) {
        res.error = "connect to " + url.host + ":" + url.port + ": " + std::strerror(err);
        ::close(fd);
        fd = -1;
      }
    }
  }
  ::freeaddrinfo(ai);
  if (fd < 0) {
    if (res.error.empty()) res.error = "cannot connect to " + url.host + ":" + url.port;
    return res;
  }
  std::string req = "POST " + url.path + " HTTP/1.1\r\nHost: ";
  req += url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host;
  if (url.port != "80") req += ":" + url.port;
  req += "\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nUser-Agent: ncclinsp/" NCCLINSP_VERSION_STRING
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  req += "\r\n";
  req += body;
  std::size_t off = 0;
  while (off < req.size()) {
    pollfd pfd{fd, POLLOUT, 0};
    const int n = ::poll(&pfd, 1, remaining_ms());
    if (n <= 0) {
      res.error = n == 0 ? "send timed out" : std::string("poll: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    const ssize_t w = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      res.error = std::string("send: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    off += static_cast<std::size_t>(w);
  }
  // Response: status line and headers, then Content-Length bytes of body (or up to EOF), max 64 KiB.
  std::string resp;
  std::size_t header_end = std::string::npos, want = std::string::npos;
  char buf[4096];
  while (resp.size() < 65536) {
    if (header_end != std::string::npos && want != std::string::npos && resp.size() >= header_end + want) break;
    pollfd pfd{fd, POLLIN, 0};
    const int n = ::poll(&pfd, 1, remaining_ms());
    if (n <= 0) {
      if (header_end != std::string::npos) break;  // status known; the body does not matter
      res.error = n == 0 ? "no response before the timeout" : std::string("poll: ") + std::strerror(errno);
      ::close(fd);
      return res;
    }
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (r <= 0) break;
    resp.append(buf, static_cast<std::size_t>(r));
    if (header_end == std::string::npos && (header_end = resp.find("\r\n\r\n")) != std::string::npos) {
      header_end += 4;
      std::string lower = resp.substr(0, header_end);
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (const auto cl = lower.find("\r\ncontent-length:"); cl != std::string::npos)
        want = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
    }
  }
  ::close(fd);
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12) {
    res.error = "malformed HTTP response";
    return res;
  }
  res.status = std::atoi(resp.c_str() + 9);
  if (res.status < 100 || res.status > 599) {
    res.error = "malformed HTTP status";
    res.status = 0;
  }
  return res;
}

}  // namespace detail

inline otlp_http_options otlp_http_options::from_env(const log_fn& log, const options::getenv_fn& get) {
  otlp_http_options o;
  o.log = log;
  auto raw = [&](const char* k) -> const char* {
    const char* v = get(k);
    return v && *v ? v : nullptr;
  };
  auto warn = [&](const std::string& m) { emit(log, log_level::warn, m); };
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
      if (detail::env_reader::parse_int(v, ms) && ms > 0 && ms <= 600000) o.timeout = std::chrono::milliseconds(ms);
      else warn(std::string("ignoring ") + k + "=\"" + std::string(v).substr(0, 32) + "\": expected milliseconds in [1, 600000]; using " +
                std::to_string(o.timeout.count()));
      break;
    }
  }
  for (const char* k : {"OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}) {
    if (const char* v = raw(k)) {
      std::string bad;
      for (auto& [hk, hv] : detail::parse_kv_list(v, bad)) {
        std::string lower = hk;
        for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const bool ctl = (hk + hv).find_first_of(std::string("\r\n\0", 3)) != std::string::npos;
        if (ctl || lower == "host" || lower == "content-type" || lower == "content-length" || lower == "connection" || lower == "transfer-encoding")
          bad += (bad.empty() ? "" : ", ") + hk.substr(0, 32);
        else
          o.headers.emplace_back(std::move(hk), std::move(hv));
      }
      if (!bad.empty()) warn(std::string(k) + ": ignoring header(s) " + bad + " (malformed, control characters, or set by the exporter)");
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
    if (!bad.empty()) warn("OTEL_RESOURCE_ATTRIBUTES: ignoring malformed item(s) " + bad);
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
  explicit otlp_http_sink(otlp_http_options o) : o_(std::move(o)), url_(detail::parse_http_url(o_.endpoint)), stats_(std::make_shared<otlp_http_stats>()) {
    if (!o_.start_time_unix_ns) o_.start_time_unix_ns = detail::now_unix_ns();
    if (!url_.error.empty())
      emit(o_.log, log_level::warn, "OTLP export disabled: endpoint \"" + o_.endpoint + "\": " + url_.error);
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
      const std::string body = format::write_otlp_json(
          snap, {.resource = o_.resource, .start_time_unix_ns = o_.start_time_unix_ns, .compat_gauges = o_.compat_gauges});
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
          if (failing_) {
            emit(o_.log, log_level::info, "OTLP export to " + o_.endpoint + " works again");
            failing_ = false;
          }
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
    failing_ = true;
    const auto now = std::chrono::steady_clock::now();
    if (logged_once_ && now - last_log_ < std::chrono::minutes(1)) return;  // rate limit: one line a minute
    logged_once_ = true;
    last_log_ = now;
    try {
      emit(o_.log, log_level::warn, "OTLP export to " + o_.endpoint + " failed: " + why + " (" + std::to_string(n) +
                                        " failed export(s) so far; cumulative values go out with the next success)");
    } catch (...) {
    }
  }

  otlp_http_options o_;
  detail::http_url url_;
  std::shared_ptr<otlp_http_stats> stats_;
  bool failing_ = false, logged_once_ = false;
  std::chrono::steady_clock::time_point last_log_{};
};

using OtlpHttpSink = otlp_http_sink;

}  // namespace ncclinsp
