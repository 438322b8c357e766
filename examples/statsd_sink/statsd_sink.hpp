#pragma once
/// A custom sink for in-house telemetry: StatsD line protocol (DogStatsD tags) over UDP.
///
/// It reads the snapshot series by series through format::group_cells, the grouping the .prom
/// files use, so each label set gets exactly one value per export:
///   <prefix>ops:<n>|c|#tags            per op series (the native labels: communicator, collective,
///   <prefix>bytes:<n>|c|#tags          power-of-two message_size, algo_proto): the increase since
///   <prefix>busy_ms:<x>|c|#tags        the previous export (StatsD counters are deltas)
///   <prefix>busbw_gbs:<x>|g|#tags      per Inspector gauge series (Inspector's labels): the
///                                      window's geometric mean bus bandwidth (GB/s)
/// and per communicator <prefix>inflight:<n>|g and <prefix>oldest_inflight_s:<x>|g (hang signal).
/// Tags are the labels (`name:value`). Do not loop over snapshot.cells instead: cells are also
/// keyed by timing source, user tag and Inspector's finer size buckets, so several cells share one
/// label set and a gauge sent per cell is overwritten by the last (this example's former bug).
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
#include <map>
#include <memory>
#include <string>

#include <ncclinsp/bucketing.hpp>
#include <ncclinsp/format/series.hpp>
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
      auto tags = [](const ncclinsp::format::label_list& labels) {
        std::string t = "|#";
        for (const auto& [k, v] : labels) {
          if (t.size() > 2) t += ',';
          t += k;
          t += ':';
          for (char ch : v) t += (ch == ',' || ch == '|' || ch == '#' || ch == ':' || ch == '\n') ? '_' : ch;
        }
        return t;
      };
      const ncclinsp::format::op_series series = ncclinsp::format::group_cells(snap, {}, /*compat_gauges=*/true);
      for (const auto& [labels, t] : series.native) {  // cumulative: send the increase
        const std::string tg = tags(labels);
        ncclinsp::cell_stats& prev = last_[tg];
        if (t.ops > prev.ops) line(o_.prefix + "ops:" + std::to_string(t.ops - prev.ops) + "|c" + tg);
        if (t.bytes > prev.bytes) line(o_.prefix + "bytes:" + std::to_string(t.bytes - prev.bytes) + "|c" + tg);
        if (t.busy_ns > prev.busy_ns) line(o_.prefix + "busy_ms:" + number(static_cast<double>(t.busy_ns - prev.busy_ns) / 1e6) + "|c" + tg);
        prev = t;
      }
      for (const auto* compat : {&series.compat_coll, &series.compat_p2p})
        for (const auto& [labels, w] : *compat)
          if (w.bw_count) line(o_.prefix + "busbw_gbs:" + number(std::exp(w.log_sum / static_cast<double>(w.bw_count))) + "|g" + tags(labels));
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
  std::map<std::string, ncclinsp::cell_stats> last_;  // per op series (by its tags): what was sent so far
};

static_assert(ncclinsp::sink<statsd_sink>);

}  // namespace example
