#pragma once
/// exporter: one background thread that takes a snapshot of a collector every `interval` and
/// hands it to every sink, in order. stop() wakes it at once, takes a final snapshot, writes it,
/// calls each sink's shutdown(), and joins; with a timeout it never waits longer than asked (the
/// thread is then detached, and the caller must keep the collector and sinks alive, as the plugin
/// does). Sinks run only on this thread. Thread-safety: start/flush/stop may be called from any
/// thread; the destructor joins.
/// Between exports, when the collector has a record doorbell (collector::doorbell(), rung when a
/// per-op record ring reaches its high-water mark) and some sink takes records (write_records),
/// the thread wakes on it and hands the drained records (collector::take_records) to those sinks,
/// so records never wait for the interval, which may be long or -1 (teardown only).
///
/// \code
/// ncclinsp::collector<> col;
/// std::vector<ncclinsp::any_sink> sinks;
/// sinks.emplace_back(ncclinsp::prom_textfile_sink({.dir = "/var/lib/node_exporter"}));
/// ncclinsp::exporter ex(col, std::move(sinks), {.interval = std::chrono::seconds(5)});
/// ex.start();
/// \endcode

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

/// The default time between exports, of exporter_options and inspector_options alike.
inline constexpr std::chrono::milliseconds default_export_interval{std::chrono::seconds(10)};

struct exporter_options {
  /// Time between exports; zero or negative exports only at flush() and stop().
  std::chrono::milliseconds interval{default_export_interval};
  log_fn log{};
  /// Called on the exporter thread with each snapshot before the sinks see it (e.g. a
  /// change_detector adding its gauges and events). Must not throw for long: an exception skips
  /// that export.
  std::function<void(snapshot&)> prepare{};
};

template <class Collector>
class exporter {
 public:
  exporter(Collector& c, std::vector<any_sink> sinks, exporter_options o = {})
      : st_(std::make_shared<state>(c, std::move(sinks), std::move(o))) {}
  ~exporter() { stop(std::chrono::milliseconds::max()); }
  exporter(const exporter&) = delete;
  exporter& operator=(const exporter&) = delete;

  /// Starts the thread (idempotent). Returns false if it could not be created.
  bool start() noexcept {
    std::lock_guard lk(st_->mu);
    if (st_->started) return true;
    try {
      thread_ = std::thread([s = st_] { s->run(); });
      st_->started = true;
    } catch (...) {
      emit(st_->opts.log, log_level::warn, "cannot start the exporter thread");
      return false;
    }
    return true;
  }

  /// Asks for an export now and waits for it (up to `timeout`). Returns true when it completed.
  bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock lk(st_->mu);
    if (!st_->started || st_->stopping) return false;
    const std::uint64_t want = ++st_->flush_requests;
    st_->poke();
    return st_->done_cv.wait_for(lk, timeout, [&] { return st_->flushes_done >= want || st_->finished; });
  }

  /// Final export, sink shutdown, join. Returns false if the thread did not finish in `timeout`.
  bool stop(std::chrono::milliseconds timeout = std::chrono::milliseconds(100)) noexcept {
    {
      std::unique_lock lk(st_->mu);
      if (st_->stop_called) return st_->finished;
      st_->stop_called = true;
      if (!st_->started) {
        if (!st_->finished) {
          st_->finished = true;
          lk.unlock();
          st_->final_export();
        }
        return true;
      }
      st_->stopping = true;
      st_->poke();
      const bool ok = timeout == std::chrono::milliseconds::max()
                          ? (st_->done_cv.wait(lk, [&] { return st_->finished; }), true)
                          : st_->done_cv.wait_for(lk, timeout, [&] { return st_->finished; });
      st_->started = false;
      if (!ok) {
        lk.unlock();
        emit(st_->opts.log, log_level::warn, "exporter did not finish within the shutdown timeout; detaching it");
        if (thread_.joinable()) thread_.detach();
        return false;
      }
    }
    if (thread_.joinable()) thread_.join();
    return true;
  }

  /// Any thread, for a process about to exit: per-op records not written by `until` are counted as
  /// dropped (drop_reason::exit_deadline) instead, and the final export (its statistics included)
  /// follows at once, so that it lands before the exit; a drain in progress stops at `until` too.
  void stop_records_at(std::chrono::steady_clock::time_point until) noexcept {
    st_->records_until.store(until.time_since_epoch().count(), std::memory_order_relaxed);
  }

  /// After a stop() that timed out: waits up to `timeout` for the detached thread's final export.
  bool wait_finished(std::chrono::milliseconds timeout) {
    std::unique_lock lk(st_->mu);
    return st_->done_cv.wait_for(lk, timeout, [&] { return st_->finished; });
  }

  /// The first sink that is an S (any_sink::target), or nullptr; valid while the exporter lives.
  /// The exporter thread uses it: see any_sink::target for what another thread may call.
  template <class S>
  S* find_sink() noexcept {
    for (auto& k : st_->sinks)
      if (S* p = k.template target<S>()) return p;
    return nullptr;
  }

  /// Number of exports written so far (tests, health).
  std::uint64_t exports() const noexcept {
    std::lock_guard lk(st_->mu);
    return st_->exports;
  }

 private:
  static constexpr bool has_doorbell = requires(Collector & c) {
    c.doorbell().value();
    c.records_pending();
    c.records_above_mark();
    c.take_records(std::declval<snapshot&>());
  };

  struct state {
    state(Collector& c, std::vector<any_sink> s, exporter_options o) : col(c), sinks(std::move(s)), opts(std::move(o)) {
      for (auto& k : sinks) drain_early = drain_early || k.takes_records();
    }
    Collector& col;
    std::vector<any_sink> sinks;
    exporter_options opts;
    mutable std::mutex mu;
    std::condition_variable cv, done_cv;
    bool started = false, stopping = false, finished = false, stop_called = false;
    std::uint64_t flush_requests = 0, flushes_done = 0, exports = 0;
    bool drain_early = false;  // some sink takes records between exports
    snapshot part;             // records-only snapshots, reused (exporter thread)
    // stop_records_at(): writing per-op records ends at this steady_clock time.
    std::atomic<std::chrono::steady_clock::rep> records_until{
        std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
    std::chrono::steady_clock::time_point records_deadline() const noexcept {
      return std::chrono::steady_clock::time_point(
          std::chrono::steady_clock::duration(records_until.load(std::memory_order_relaxed)));
    }
    static constexpr std::uint64_t drain_batch = 4096;  // a collector without record_batch()
    std::uint64_t batch() const noexcept {
      if constexpr (requires { col.record_batch(); })
        return col.record_batch();
      else
        return drain_batch;
    }

    /// The collector's consumer lock, when it has one (collector::consumer_mutex): another exporter
    /// of the same collector may be draining it (the plugin's lingering final export).
    std::unique_lock<std::mutex> consume() {
      if constexpr (requires { col.consumer_mutex(); })
        return std::unique_lock<std::mutex>(col.consumer_mutex());
      else
        return {};
    }

    std::uint64_t discard_records() noexcept {
      const auto turn = consume();
      return col.discard_records(drop_reason::exit_deadline);
    }

    /// After a change to the flags above (made under mu).
    void poke() {
      cv.notify_all();
      if constexpr (has_doorbell) col.doorbell().ring();
    }
    /// Records past a ring's high-water mark, to the sinks that take them (exporter thread), in
    /// batches of at most drain_batch records per ring (so the batch buffers stay bounded), until
    /// the rings are nearly empty or `rounds` batches were written. Returns whether records were
    /// taken and a ring is at or above its mark again (the recording thread kept pushing): then
    /// the caller drains once more instead of sleeping.
    bool drain_records(int rounds = 64) noexcept {
      bool took = false;
      if constexpr (has_doorbell) {
        for (int i = 0; i < rounds && col.records_pending() && std::chrono::steady_clock::now() < records_deadline();
             ++i) {
          try {
            {
              const auto turn = consume();
              if constexpr (requires { col.take_records(part, drain_batch); })
                col.take_records(part, batch());
              else
                col.take_records(part);
            }
            for (auto& s : sinks)
              if (s.takes_records()) s.write_records(part);
          } catch (...) {
            emit(opts.log, log_level::warn,
                 "draining per-op records failed (out of memory?); retrying at the next export");
            return false;
          }
          took = took || !part.records.empty();
          if (part.records.size() < batch() / 2) break;  // caught up
        }
        return took && col.records_above_mark();
      }
      return false;
    }

    void export_once(bool final) noexcept {
      if (drain_early) {
        drain_records(1 << 20);  // the backlog in batches, not in one snapshot
        if constexpr (requires { col.discard_records(drop_reason::exit_deadline); })
          if (final && col.records_pending() && std::chrono::steady_clock::now() >= records_deadline())
            if (const std::uint64_t n = discard_records())
              emit(
                  opts.log, log_level::warn,
                  "final export: " + std::to_string(n) +
                      " per-op records not written before the process exit, counted as dropped (reason exit_deadline)");
      }
      try {
        auto turn = consume();
        auto snap = col.take_snapshot(final);
        if (opts.prepare) opts.prepare(snap);
        if (turn.owns_lock()) turn.unlock();
        for (auto& s : sinks) s.write(snap);
      } catch (...) {
        emit(opts.log, log_level::warn, "export failed (out of memory?); retrying at the next interval");
      }
      std::lock_guard lk(mu);
      ++exports;
    }
    std::uint32_t bell_value() noexcept {
      if constexpr (has_doorbell) return col.doorbell().value();
      return 0;
    }
    void sleep_on_bell(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) noexcept {
      if constexpr (has_doorbell) col.doorbell().wait_until(seen, deadline);
    }
    void final_export() noexcept {
      export_once(true);
      for (auto& s : sinks) s.shutdown();
    }
    void run() noexcept {
      std::unique_lock lk(mu);
      auto next = std::chrono::steady_clock::now() + opts.interval;
      while (!stopping) {
        const bool periodic = opts.interval.count() > 0;
        auto asked = [&] { return stopping || flush_requests > flushes_done; };
        if (has_doorbell && drain_early) {
          if (!asked() && (!periodic || std::chrono::steady_clock::now() < next)) {
            // Sleep on the collector's doorbell (flush/stop ring it too); every wake drains.
            const std::uint32_t seen = bell_value();
            lk.unlock();
            if (!drain_records()) sleep_on_bell(seen, periodic ? next : std::chrono::steady_clock::time_point::max());
            lk.lock();
            continue;
          }
        } else if (periodic) {
          cv.wait_until(lk, next, asked);
        } else {
          cv.wait(lk, asked);
        }
        if (stopping) break;
        const std::uint64_t req = flush_requests;
        lk.unlock();
        export_once(false);
        lk.lock();
        flushes_done = req;
        done_cv.notify_all();
        if (periodic && std::chrono::steady_clock::now() >= next) {
          next += opts.interval;
          if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now() + opts.interval;
        }
      }
      lk.unlock();
      final_export();
      lk.lock();
      finished = true;
      flushes_done = flush_requests;
      done_cv.notify_all();
    }
  };
  std::shared_ptr<state> st_;
  std::thread thread_;
};

}  // namespace ncclinsp
