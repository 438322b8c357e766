#pragma once
/// A custom sink for in-house telemetry: StatsD line protocol (DogStatsD tags) over UDP.
///
/// It walks the metric catalogue series by series (ncclinsp::format::for_each_sample), so it sends
/// the same families and label sets as the .prom files, one value per family and label set:
///   <prefix><family>:<delta>|c|#tags   counters (ncclinsp_ops, ncclinsp_bytes, ncclinsp_busy_seconds,
///                                      drops, ...): the increase since the previous export
///   <prefix><family>:<x>|g|#tags       gauges (nccl_bus_bandwidth_gbs: the window's busbw in GB/s,
///                                      nccl_collective_exec_time_microseconds, ncclinsp_inflight_ops,
///                                      ncclinsp_oldest_inflight_age_seconds: the hang signal, ...)
/// Family names are the OTLP ones (no `_total`); tags are the labels (`name:value`). The duration
/// histogram, ncclinsp_info and the export timestamp are left out (StatsD has its own timers).
/// Looping over snapshot.cells instead would send several values under one label set: cells are
/// also keyed by timing source, user tag and Inspector's finer size buckets.
/// Lines are packed into datagrams of at most `max_datagram` bytes; sendto() is non-blocking and
/// a failed datagram is counted, never retried (StatsD is fire-and-forget).
///
/// It is a `ncclinsp::sink`: one `write(const snapshot&) noexcept` member returning export_result.
/// Runs on the exporter thread only.

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <ncclinsp/format/catalogue.hpp>
#include <ncclinsp/format/text.hpp>
#include <ncclinsp/sink.hpp>

namespace example {

struct statsd_options {
  std::string host = "127.0.0.1";
  std::string port = "8125";
  std::string prefix = "nccl.";
  std::size_t max_datagram = 1432;  // fits a 1500-byte MTU with IP/UDP headers
};

class statsd_sink {
 public:
  explicit statsd_sink(statsd_options o) : o_(std::move(o)), state_(std::make_shared<state>()) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* ai = nullptr;
    if (::getaddrinfo(o_.host.c_str(), o_.port.c_str(), &hints, &ai) != 0 || !ai) return;
    state_->fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (state_->fd >= 0 && ::connect(state_->fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      ::close(state_->fd);
      state_->fd = -1;
    }
    ::freeaddrinfo(ai);
  }

  ncclinsp::export_result write(const ncclinsp::snapshot& snap) noexcept {
    if (state_->fd < 0) return ncclinsp::export_result::failure;
    try {
      std::string packet;
      bool ok = true;
      auto line = [&](const std::string& l) {
        if (!packet.empty() && packet.size() + 1 + l.size() > o_.max_datagram) {
          ok = send(packet) && ok;
          packet.clear();
        }
        packet += packet.empty() ? "" : "\n";
        packet += l;
      };
      ncclinsp::format::for_each_sample(
          snap, [&](const ncclinsp::format::metric_family& f, const ncclinsp::format::label_list& labels, double v,
                    const ncclinsp::format::series_row&) {
            if (f.type == ncclinsp::format::metric_type::histogram || f.name == "ncclinsp_info" ||
                f.name == "ncclinsp_export_timestamp_seconds")
              return;
            std::string tags = "|#";
            for (const auto& [k, val] : labels) {
              if (tags.size() > 2) tags += ',';
              tags += k;
              tags += ':';
              for (char ch : val) tags += (ch == ',' || ch == '|' || ch == '#' || ch == '\n' || ch == ':') ? '_' : ch;
            }
            const std::string name = o_.prefix + std::string(f.otlp_name());
            if (f.type == ncclinsp::format::metric_type::counter) {
              double& prev = last_[name + tags];
              const double delta = v - prev;
              prev = v;
              if (delta > 0) line(name + ":" + number(delta) + "|c" + tags);
            } else {
              line(name + ":" + number(v) + "|g" + tags);
            }
          });
      if (!packet.empty()) ok = send(packet) && ok;
      return ok ? ncclinsp::export_result::success : ncclinsp::export_result::failure;
    } catch (...) {
      return ncclinsp::export_result::failure;
    }
  }

  void shutdown() noexcept {
    if (state_->fd >= 0) ::close(state_->fd);
    state_->fd = -1;
  }
  std::string_view name() const noexcept { return "statsd"; }
  /// Datagrams that could not be sent (shared with copies: keep it before handing the sink over).
  std::shared_ptr<const std::uint64_t> send_failures() const { return {state_, &state_->failures}; }

 private:
  struct state {
    int fd = -1;
    std::uint64_t failures = 0;
  };
  static std::string number(double v) {
    std::string s;
    ncclinsp::format::append_double(s, v);
    return s;
  }
  bool send(const std::string& p) noexcept {
    if (::send(state_->fd, p.data(), p.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(p.size()))
      return true;
    ++state_->failures;
    return false;
  }

  statsd_options o_;
  std::shared_ptr<state> state_;
  std::map<std::string, double> last_;  // counter values sent so far, by name and tags
};

static_assert(ncclinsp::sink<statsd_sink>);

}  // namespace example
