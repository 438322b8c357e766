#pragma once
/// A custom sink for in-house telemetry: StatsD line protocol (DogStatsD tags) over UDP.
///
/// Per export window and per (communicator, collective, size bucket, algo_proto) it sends
///   <prefix>ops:<n>|c|#tags            completed ops in the window (a StatsD counter: a delta)
///   <prefix>bytes:<n>|c|#tags          message bytes
///   <prefix>busy_ms:<x>|c|#tags        sum of op durations, milliseconds
///   <prefix>busbw_gbs:<x>|g|#tags      geometric mean bus bandwidth of the window (GB/s)
/// and per communicator <prefix>inflight:<n>|g and <prefix>oldest_inflight_s:<x>|g (hang signal).
/// Tags use the Prometheus label names (comm_name, collective, message_size, ...).
/// Lines are packed into datagrams of at most `max_datagram` bytes; sendto() is non-blocking and
/// a failed datagram is counted, never retried (StatsD is fire-and-forget).
///
/// It is a `ncclinsp::sink`: one `write(const snapshot&) noexcept` member returning export_result.
/// Runs on the exporter thread only.

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include <ncclinsp/bucketing.hpp>
#include <ncclinsp/format/prometheus_text.hpp>
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
      for (const auto& cell : snap.cells) {
        const auto& w = cell.window;
        if (w.ops == 0) continue;
        const auto& d = snap.comms[cell.comm].desc;
        const std::string tags = "|#comm_name:" + ncclinsp::format::comm_name(d) + ",rank:" + std::to_string(d.rank) +
                                 ",gpu:" + ncclinsp::format::gpu_label(d) + ",node:" + snap.identity.node +
                                 ",collective:" + std::string(ncclinsp::to_string(cell.fn)) + ",message_size:" +
                                 ncclinsp::pow2_bucketer::label(ncclinsp::pow2_bucketer::index(ncclinsp::inspector_bucketer::lower_bound(cell.size_index))) +
                                 ",algo_proto:" + ncclinsp::format::algo_proto_label(cell.alg, cell.pro);
        line(o_.prefix + "ops:" + std::to_string(w.ops) + "|c" + tags);
        line(o_.prefix + "bytes:" + std::to_string(w.bytes) + "|c" + tags);
        line(o_.prefix + "busy_ms:" + number(static_cast<double>(w.busy_ns) * 1e-6) + "|c" + tags);
        if (w.bw_count) line(o_.prefix + "busbw_gbs:" + number(std::exp(w.log_busbw_sum / static_cast<double>(w.bw_count))) + "|g" + tags);
      }
      for (const auto& c : snap.comms) {
        const std::string tags = "|#comm_name:" + ncclinsp::format::comm_name(c.desc) + ",rank:" + std::to_string(c.desc.rank);
        line(o_.prefix + "inflight:" + std::to_string(c.inflight) + "|g" + tags);
        line(o_.prefix + "oldest_inflight_s:" + number(c.oldest_inflight_age_s) + "|g" + tags);
      }
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
    if (::send(state_->fd, p.data(), p.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(p.size())) return true;
    ++state_->failures;
    return false;
  }

  statsd_options o_;
  std::shared_ptr<state> state_;
};

static_assert(ncclinsp::sink<statsd_sink>);

}  // namespace example
