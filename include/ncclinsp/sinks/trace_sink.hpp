#pragma once
/// trace_sink: keeps a bounded ring of the last `capacity` op records (from snapshot::records, so the
/// collector's record ring must be on: collector_options::record_ring_capacity > 0) and writes them
/// as a Chrome trace-event JSON file (format/chrome_trace.hpp; opens in ui.perfetto.dev and
/// chrome://tracing) on demand and at exit:
///  * trigger file: when `<dir>/ncclinsp.trace.trigger` exists at an export, it is removed and the
///    trace is written (`touch <dir>/ncclinsp.trace.trigger`);
///  * SIGUSR2 (when `install_sigusr2` and the signal still has its default action) or
///    trace_sink::request_dump() from any thread: the handler only bumps an atomic counter; the
///    trace is written at the next export;
///  * shutdown() (the exporter's final export) when `write_at_exit`.
/// The file `<dir>/<node>-pid<pid>.trace.json` is replaced atomically at each dump, never through a
/// symlink (detail/atomic_file.hpp).
/// Tracks: pid = one GPU of this process (`trace_grouping::device`, the rank's device) or the node
/// (`trace_grouping::node`), tid = one communicator on that GPU, followed by one track per channel
/// of it when the records carry an op_trace (the plugin records them when this sink is on). The
/// ring holds `capacity` events: ops and their channel spans.
/// Thread-safety: write()/shutdown() on the exporter thread only (cold path); request_dump() and
/// the signal handler are async-signal-safe.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ncclinsp/detail/atomic_file.hpp"
#include "ncclinsp/format/chrome_trace.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

enum class trace_grouping : std::uint8_t { device, node };

struct trace_sink_options {
  std::string dir = ".";
  std::string file_name{};       ///< default "<node>-pid<pid>.trace.json"
  std::size_t capacity = 65536;  ///< last N events kept: ops and channel spans (0 = the sink keeps nothing)
  trace_grouping grouping = trace_grouping::device;
  bool trigger_file = true;      ///< honour <dir>/ncclinsp.trace.trigger
  bool install_sigusr2 = false;  ///< SIGUSR2 requests a dump (only if SIGUSR2 is at SIG_DFL)
  bool write_at_exit = true;     ///< write the trace in shutdown()
  log_fn log{};
};

class trace_sink {
 public:
  static constexpr const char* trigger_name = "ncclinsp.trace.trigger";

  explicit trace_sink(trace_sink_options o) : o_(std::move(o)), seen_requests_(requests().load()) {
    if (o_.install_sigusr2) install_handler(o_.log);
  }

  /// Asks every trace sink of the process for a dump at its next export (async-signal-safe).
  static void request_dump() noexcept { requests().fetch_add(1, std::memory_order_relaxed); }

  export_result write(const snapshot& snap) noexcept {
    try {
      take(snap);
      bool want = false;
      if (const auto req = requests().load(std::memory_order_relaxed); req != seen_requests_) {
        seen_requests_ = req;
        want = true;
      }
      if (o_.trigger_file) {
        const std::string trig = o_.dir + "/" + trigger_name;
        if (::access(trig.c_str(), F_OK) == 0) {
          ::unlink(trig.c_str());
          want = true;
        }
      }
      if (want) return dump();
      return export_result::success;
    } catch (...) {
      return export_result::failure;
    }
  }

  /// Records drained between exports: kept in the ring (dumps happen at exports).
  export_result write_records(const snapshot& snap) noexcept {
    try {
      take(snap);
      return export_result::success;
    } catch (...) {
      return export_result::failure;
    }
  }

  void shutdown() noexcept {
    if (o_.write_at_exit && total_ > 0) (void)dump();
  }

  std::string_view name() const noexcept { return "trace"; }

  /// Writes the trace now (exporter thread). Also what triggers and shutdown() call.
  export_result dump() noexcept {
    try {
      std::string out;
      out.reserve(ring_.size() * 320 + 4096);
      std::vector<format::trace_event> ev;
      ev.reserve(ring_.size());
      for (std::size_t i = 0; i < ring_.size(); ++i) ev.push_back(ring_[(head_ + i) % ring_.size()]);
      std::vector<std::pair<std::string, std::string>> other = {{"node", node_},
                                                                {"hostname", host_},
                                                                {"pid", std::to_string(pid_)},
                                                                {"records_total", std::to_string(total_)},
                                                                {"events_evicted", std::to_string(evicted_)}};
      format::write_chrome_trace(out, procs_, threads_, ev, other);
      if (int err = detail::write_file_atomic(o_.dir, file_name(), out)) {
        emitf(o_.log, log_level::warn, "trace sink: cannot write {}: {}", path(), detail::describe_error(err));
        ++failed_exports_;
        return export_result::failure;
      }
      ++dumps_;
      emitf(o_.log, log_level::info, "trace sink: wrote {} ops to {}", ev.size(), path());
      return export_result::success;
    } catch (...) {
      ++failed_exports_;
      return export_result::failure;
    }
  }

  std::string path() const { return o_.dir + "/" + file_name(); }
  std::uint64_t dumps() const noexcept { return dumps_; }
  /// Dumps that could not be written.
  std::uint64_t failed_exports() const noexcept { return failed_exports_; }
  std::size_t size() const noexcept { return ring_.size(); }
  /// Records seen in total; size() of them are kept.
  std::uint64_t total() const noexcept { return total_; }

 private:
  void take(const snapshot& snap) {
    node_ = snap.identity.node.empty() ? snap.identity.hostname : snap.identity.node;
    host_ = snap.identity.hostname;
    pid_ = snap.identity.pid;
    for (const auto& r : snap.records) {
      const comm_desc& d = snap.comms[r.comm].desc;
      ++total_;
      add(d, r.op, -1);
      if (r.trace < 0 || static_cast<std::size_t>(r.trace) >= snap.traces.size() ||
          r.op.timing != timing_source::kernel_gpu)
        continue;
      const op_trace& t = snap.traces[static_cast<std::size_t>(r.trace)];
      for (std::size_t i = 0; i < t.n_channels && i < max_traced_channels; ++i) {
        const channel_trace& c = t.channels[i];
        if (!c.gpu_start_ns || c.gpu_stop_ns <= c.gpu_start_ns) continue;  // no GPU span for this channel
        op_record span = r.op;
        span.start_ns = c.gpu_start_ns;
        span.end_ns = c.gpu_stop_ns;
        add(d, span, c.channel);
      }
    }
  }

  static std::atomic<std::uint64_t>& requests() noexcept {
    static std::atomic<std::uint64_t> r{0};
    return r;
  }
  static void on_signal(int) noexcept { request_dump(); }
  static void install_handler(const log_fn& log) noexcept {
    struct sigaction old {};
    if (::sigaction(SIGUSR2, nullptr, &old) != 0) return;
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == &trace_sink::on_signal) return;  // already ours
    if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) {
      emit(log, log_level::warn, "trace sink: SIGUSR2 already has a handler; use the trigger file instead");
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = &trace_sink::on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    (void)::sigaction(SIGUSR2, &sa, nullptr);
  }

  std::string file_name() const {
    if (!o_.file_name.empty()) return o_.file_name;
    return (node_.empty() ? std::string("unknown") : node_) + "-pid" +
           std::to_string(pid_ ? pid_ : static_cast<long>(::getpid())) + ".trace.json";
  }

  /// One event on its track: the op (channel -1) or one channel's span of it.
  void add(const comm_desc& d, const op_record& op, int channel) {
    if (o_.capacity == 0) return;
    // Track owner: the rank's GPU, or the whole node.
    std::string owner;
    if (o_.grouping == trace_grouping::node) {
      owner = node_;
    } else if (!d.uuid.empty()) {
      owner = d.uuid;
    } else {
      owner = d.device >= 0 ? "device " + std::to_string(d.device) : "comm rank " + std::to_string(d.rank);
    }
    auto [pit, pnew] = pid_of_.try_emplace(owner, static_cast<std::uint32_t>(pid_of_.size()));
    const std::uint32_t pid = pit->second;
    if (pnew) {
      std::string n = node_;
      if (o_.grouping == trace_grouping::device) {
        n += d.device >= 0 ? " GPU " + std::to_string(d.device) : std::string(" ") + owner;
        if (!d.uuid.empty()) n += " (" + d.uuid + ")";
      }
      procs_.push_back({pid, std::move(n)});
    }
    // Channel tracks sort right after their communicator's track (sort index comm tid x 512 + 1 + channel).
    const std::uint32_t comm_tid = track(pid, d, -1);
    const std::uint32_t tid = channel < 0 ? comm_tid : track(pid, d, channel, comm_tid);
    format::trace_event e{.pid = pid,
                          .tid = tid,
                          .comm_hash = d.hash,
                          .rank = d.rank,
                          .nranks = d.nranks,
                          .channel = static_cast<std::int16_t>(channel),
                          .op = op};
    if (ring_.size() < o_.capacity) {
      ring_.push_back(e);
    } else {
      ring_[head_] = e;
      head_ = (head_ + 1) % ring_.size();
      ++evicted_;
    }
  }

  std::uint32_t track(std::uint32_t pid, const comm_desc& d, int channel, std::uint32_t comm_tid = 0) {
    auto [it, fresh] =
        tid_of_.try_emplace(std::make_tuple(pid, d.hash, d.rank, channel), static_cast<std::uint32_t>(tid_of_.size()));
    if (fresh) {
      std::string n = (d.name.empty() ? std::string("unknown") : d.name) + " 0x";
      format::append_hex64(n, d.hash);
      n += " rank " + std::to_string(d.rank) + "/" + std::to_string(d.nranks);
      if (channel >= 0) n += " ch " + std::to_string(channel);
      const std::uint32_t base = (channel < 0 ? it->second : comm_tid) * 512u;
      threads_.push_back({pid, it->second, std::move(n), base + static_cast<std::uint32_t>(channel + 1)});
    }
    return it->second;
  }

  trace_sink_options o_;
  std::uint64_t seen_requests_ = 0;
  std::vector<format::trace_event> ring_;
  std::size_t head_ = 0;  ///< oldest element once the ring is full
  std::uint64_t total_ = 0, evicted_ = 0, dumps_ = 0,
                failed_exports_ = 0;  // op records seen, events overwritten, files written, failed dumps
  std::map<std::string, std::uint32_t> pid_of_;
  std::map<std::tuple<std::uint32_t, std::uint64_t, int, int>, std::uint32_t>
      tid_of_;  // (pid, hash, rank, channel or -1)
  std::vector<format::trace_process> procs_;
  std::vector<format::trace_thread> threads_;
  std::string node_, host_;
  long pid_ = 0;
};

}  // namespace ncclinsp
