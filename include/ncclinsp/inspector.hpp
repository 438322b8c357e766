#pragma once
/// Embedded mode: the public API for frameworks that wrap NCCL calls themselves. An inspector owns
/// a collector<Traits> and an exporter with the chosen sinks; the framework registers each
/// communicator once (cold) and records completed ops with measured durations (hot). The metric
/// names and labels are the plugin's (same collector, same serializers), so one dashboard serves both.
///
/// Thread-safety: every member may be called from any thread. Hot path (record, begin, end,
/// cancel): noexcept, no lock, no allocation after a thread's first record (its collector shard),
/// a few relaxed atomics; record() IS collector::record. Cold path: construction, add_comm,
/// remove_comm, flush, add_poller, shutdown/destruction (a final export, then sink shutdown, bounded
/// by a timeout). Its settings, and their mapping from the plugin's environment variables, are
/// inspector_options (inspector_options.hpp).
///
/// \code
/// ncclinsp::inspector insp({.sinks = ncclinsp::make_sinks(ncclinsp::prom_textfile_sink({.dir = "/var/lib/node_exporter"})),
///                           .interval = std::chrono::seconds(5)});
/// auto comm = insp.add_comm({.name = "tp", .hash = 42, .rank = 0, .nranks = 8, .device = 0, .uuid = "GPU-..."});
/// ncclinsp::op_record op = ncclinsp::make_op(ncclinsp::func::all_reduce, n, ncclinsp::dtype::bfloat16, t0_ns, t1_ns);
/// insp.record(comm, op);
/// \endcode

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/comm_hash.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detail/inflight_table.hpp"
#include "ncclinsp/detail/slot_bitmap.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/inspector_options.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/op_filter.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

template <class Traits = default_traits>
class basic_inspector {
 public:
  using collector_type = collector<Traits>;

  /// Token of one in-flight op (begin -> end/cancel). Plain data; copy freely, use once.
  struct inflight {
    comm_handle comm = no_index;
    std::uint32_t slot = no_index;  ///< no_index: not tracked (disabled, filtered, or pool full)
    std::uint32_t gen = 0;
    bool counted = false;  ///< started was counted, so end/cancel must complete it
  };
  /// Builds the collector and starts the exporter thread (when enabled and interval > 0, or to
  /// serve flush()). Cold; throws std::bad_alloc / std::system_error on resource failure.
  explicit basic_inspector(inspector_options o = {})
      : opts_(embedded(std::move(o))),
        core_(std::make_shared<core>(opts_)),
        col_(core_->col),
        extras_(core_->extras.get()) {
    if (!opts_.enabled) return;
    // The exporter state owns a reference to the core (through `prepare`), so a thread detached by
    // a shutdown() that timed out finishes on live data after the inspector is gone.
    auto prepare = [c = core_](snapshot& s) { c->prepare(s); };
    ex_ = std::make_unique<exporter<source>>(
        core_->src, std::move(opts_.sinks),
        exporter_options{.interval = opts_.interval, .log = opts_.log, .prepare = std::move(prepare)});
    ex_->start();
  }

  /// The same, configured from the plugin's environment variables (see inspector_options::from_env).
  static basic_inspector from_env(const log_fn& log = {}) { return basic_inspector(inspector_options::from_env(log)); }

  /// shutdown(inspector_options::shutdown_timeout): bounded, never waits for a stuck sink longer.
  ~basic_inspector() { shutdown(opts_.shutdown_timeout); }

  /// Final export (every op recorded so far), each sink's shutdown(), join; once (later calls
  /// return the first result). Returns true when that finished within `timeout`; false when it
  /// did not (a sink blocks): the exporter thread is then left to finish on its own, with the
  /// sinks and the collector it uses, which it frees when done. Afterwards flush() returns false
  /// and recorded ops are no longer exported. True when disabled.
  bool shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(10)) noexcept {
    std::lock_guard lk(shutdown_mu_);
    if (!shut_) {
      shut_ = true;
      flushed_ = !ex_ || ex_->stop(timeout);
    }
    return flushed_;
  }
  basic_inspector(const basic_inspector&) = delete;
  basic_inspector& operator=(const basic_inspector&) = delete;

  bool enabled() const noexcept { return opts_.enabled; }

  // ---- communicators (cold) --------------------------------------------------------------------

  /// Registers a communicator; returns its handle, or no_index when the table is full (counted
  /// as ncclinsp_dropped_events_total{reason="comm_table_full"}) or the inspector is disabled.
  comm_handle add_comm(comm_info c) {
    if (!opts_.enabled) return no_index;
    if (c.uuid.empty()) c.uuid = "host-" + opts_.collector.identity.node + "-pid" + std::to_string(::getpid());
    const comm_handle h =
        col_.add_comm({.name = std::move(c.name),
                       .hash = c.hash,
                       .rank = c.rank,
                       .nranks = c.nranks > 0 ? c.nranks : 1,
                       .nnodes = c.nnodes > 0 ? c.nnodes : 1,
                       .device = c.device,
                       .uuid = std::move(c.uuid)},
                      [x = extras_](comm_handle slot) {  // exporter thread: the core's table, not `this`
                        const comm_extra* e = x[slot].load(std::memory_order_acquire);
                        return e ? e->oldest() : std::uint64_t{0};
                      });
    if (h == no_index) return h;
    // A reused slot keeps its in-flight table (a late end() of the previous communicator may still
    // touch it), emptied; otherwise one is made. Tables live until the inspector is destroyed.
    if (comm_extra* e = extras_[h].load(std::memory_order_acquire))
      e->reset();
    else
      extras_[h].store(new comm_extra(opts_.inflight_pool ? opts_.inflight_pool : 1), std::memory_order_release);
    return h;
  }

  /// The communicator was destroyed: its final values stay in the exports for
  /// inspector_options::collector.retired_retention, then no more. Ops still in flight count as abandoned. Record/begin/end on it afterwards are ignored or land in its last export.
  void remove_comm(comm_handle h) noexcept {
    if (h >= Traits::max_comms) return;
    comm_extra* e = extras_[h].load(std::memory_order_acquire);
    col_.retire_comm(h, e ? e->inflight() : 0);
  }

  // ---- ops (hot) -------------------------------------------------------------------------------

  /// One completed op of `h`, with its measured span (op.start_ns/end_ns, any one clock). This is
  /// collector::record after the min-size/P2P filters.
  void record(comm_handle h, const op_record& op) noexcept {
    if (!opts_.enabled || !accept(h, op)) NCCLINSP_UNLIKELY
      return;
    col_.record(h, op);
  }

  /// Optional in-flight accounting: call before handing an op to NCCL, then end() with the measured
  /// record (or cancel() if it will never be measured). Gives ncclinsp_inflight_ops and
  /// ncclinsp_oldest_inflight_age_seconds (the hang signal). `bytes` enables the min-size filter
  /// here (0: decided at end()).
  inflight begin(comm_handle h, func f = func::unknown, std::uint64_t bytes = 0) noexcept {
    inflight t;
    t.comm = h;
    if (!opts_.enabled || h >= Traits::max_comms) NCCLINSP_UNLIKELY
      return t;
    if (filter_.skips(f) || filter_.too_small(bytes != 0, bytes)) return t;  // end() filters it
    comm_extra* e = extras_[h].load(std::memory_order_acquire);
    if (!e) NCCLINSP_UNLIKELY
      return t;
    col_.note_started(h);
    t.counted = true;
    t.slot = e->alloc();
    if (t.slot == no_index) NCCLINSP_UNLIKELY {
      col_.note_dropped(h, drop_reason::op_pool_full);  // still counted in flight, without an age
      return t;
    }
    t.gen = (*e)[t.slot].gen.load(std::memory_order_relaxed);
    (*e)[t.slot].started_at.store(collector_type::steady_ns(), std::memory_order_release);
    return t;
  }

  /// The op begun with `t` completed with the measured record `op`. The min-size/P2P filters were
  /// applied at begin() when it counted the op; otherwise they apply here. A second end() of the
  /// same tracked op, or one after its communicator's slot went to a new communicator, is ignored.
  void end(const inflight& t, const op_record& op) noexcept {
    if (!release(t)) NCCLINSP_UNLIKELY
      return;
    if (!opts_.enabled || t.comm >= Traits::max_comms) NCCLINSP_UNLIKELY
      return;
    if (t.counted || accept(t.comm, op)) col_.record(t.comm, op);
  }

  /// The op begun with `t` will not be measured (graph capture, timing error): it leaves the
  /// in-flight count and appears in ncclinsp_filtered_ops_total{reason="no_gpu_timing"}.
  void cancel(const inflight& t) noexcept {
    if (!release(t)) NCCLINSP_UNLIKELY
      return;
    if (t.counted && t.comm < Traits::max_comms) col_.note_filtered(t.comm, filter_reason::no_gpu_timing);
  }

  /// An op could not be measured and was never begun (e.g. a timer's event pool was full).
  void note_dropped(comm_handle h, drop_reason r = drop_reason::op_pool_full) noexcept {
    if (opts_.enabled) col_.note_dropped(h, r);
  }
  /// An op was skipped on purpose and never begun (graph capture): counted as filtered.
  void note_unmeasured(comm_handle h) noexcept {
    if (!opts_.enabled || h >= Traits::max_comms) return;
    col_.note_started(h);
    col_.note_filtered(h, filter_reason::no_gpu_timing);
  }

  // ---- export (cold) ---------------------------------------------------------------------------

  /// Runs the pollers and exports now; waits up to `timeout`. False when disabled or timed out.
  bool flush(std::chrono::milliseconds timeout = std::chrono::seconds(5)) { return ex_ && ex_->flush(timeout); }

  /// The first sink given in inspector_options::sinks that is an S (exactly: e.g.
  /// find_sink<ncclinsp::json_sink>()), or nullptr. Valid while the inspector lives. The exporter
  /// thread calls the sink: from another thread call only what the sink documents as thread-safe
  /// (otlp_http_sink::stats()), or read it after flush() returned and before the next export.
  template <class S>
  S* find_sink() noexcept {
    if (ex_) return ex_->template find_sink<S>();
    for (auto& k : opts_.sinks)  // disabled: the sinks were never handed to an exporter
      if (S* p = k.template target<S>()) return p;
    return nullptr;
  }

  /// Registers a function the exporter thread calls before every snapshot (e.g. a CUDA event
  /// timer's resolver). Returns an id for remove_poller. The function must not throw for long.
  std::uint64_t add_poller(std::function<void()> fn) {
    std::lock_guard lk(core_->poll_mu);
    core_->pollers.emplace_back(++core_->poller_ids, std::move(fn));
    return core_->poller_ids;
  }
  /// Unregisters a poller; once it returns, the poller is not running and will not run again.
  void remove_poller(std::uint64_t id) {
    std::lock_guard lk(core_->poll_mu);
    std::erase_if(core_->pollers, [id](const auto& p) { return p.first == id; });
  }

  /// The underlying collector (snapshots in tests, extra instrumentation). take_snapshot() must not
  /// be called while the exporter runs.
  collector_type& get_collector() noexcept { return col_; }
  const inspector_options& config() const noexcept { return opts_; }
  std::uint64_t exports() const noexcept { return ex_ ? ex_->exports() : 0; }

 private:
  /// One in-flight op of the embedded mode: its generation guards against a double end().
  struct inflight_slot {
    std::atomic<std::uint32_t> gen{0};
    std::atomic<std::uint64_t> started_at{0};  // steady ns, 0 = free
  };
  /// Per-communicator in-flight table (the plugin's, detail/inflight_table.hpp), kept until destruction.
  using comm_extra = detail::inflight_table<inflight_slot>;

  struct core;
  /// What the exporter snapshots: runs the pollers, then the collector.
  struct source {
    core* self = nullptr;
    snapshot take_snapshot(bool final) {
      {
        std::lock_guard lk(self->poll_mu);
        for (auto& [id, fn] : self->pollers) {
          try {
            fn();
          } catch (...) {
            emit(self->log, log_level::warn, "an inspector poller threw; ignored");
          }
        }
      }
      return self->col.take_snapshot(final);
    }
    // Records drained between exports when a ring reaches its high-water mark (see exporter).
    auto& doorbell() noexcept { return self->col.doorbell(); }
    bool records_pending() const noexcept { return self->col.records_pending(); }
    bool records_above_mark() const noexcept { return self->col.records_above_mark(); }
    void take_records(snapshot& s, std::uint64_t max_records = UINT64_MAX) { self->col.take_records(s, max_records); }
  };

  /// What the exporter thread uses, shared with it: it outlives the inspector when shutdown() timed out.
  struct core {
    explicit core(const inspector_options& o)
        : col(o.collector),
          extras(new std::atomic<comm_extra*>[Traits::max_comms]()),
          detector(o.detector),
          on_busbw_event(o.on_busbw_event),
          log(o.log) {
      src.self = this;
    }
    ~core() {
      for (std::uint32_t i = 0; i < Traits::max_comms; ++i) delete extras[i].load(std::memory_order_relaxed);
    }
    core(const core&) = delete;
    core& operator=(const core&) = delete;

    /// Exporter thread, each snapshot: change detection, then the event callback.
    void prepare(snapshot& s) {
      detector.update(s);
      if (!on_busbw_event) return;
      for (const auto& e : s.busbw_events) {
        try {
          on_busbw_event(e);
        } catch (...) {
          emit(log, log_level::warn, "the on_busbw_event callback threw; ignored");
        }
      }
    }

    collector_type col;
    std::unique_ptr<std::atomic<comm_extra*>[]> extras;
    std::mutex poll_mu;
    std::vector<std::pair<std::uint64_t, std::function<void()>>> pollers;
    std::uint64_t poller_ids = 0;
    change_detector detector;  // exporter thread only
    std::function<void(const busbw_event&)> on_busbw_event;
    log_fn log;
    source src;
  };

  /// The identity every embedded export carries: abi "embedded", this pid, the host name where
  /// node or hostname is empty (e.g. `.collector = {...}` given without an identity).
  static inspector_options embedded(inspector_options o) {
    process_identity& id = o.collector.identity;
    id.abi = "embedded";
    if (!id.pid) id.pid = static_cast<long>(::getpid());
    if (id.node.empty()) id.node = detail::host_name();
    if (id.hostname.empty()) id.hostname = detail::host_name();
    return o;
  }

  bool accept(comm_handle h, const op_record& op) noexcept {
    if (filter_.skips(op.fn)) return false;
    if (filter_.too_small(op.bytes_valid, op.bytes)) {
      col_.note_filtered(h, filter_reason::min_size);
      return false;
    }
    return true;
  }

  /// Frees the op's in-flight slot; false when it was already freed (the op must not count again).
  bool release(const inflight& t) noexcept {
    if (t.slot == no_index || t.comm >= Traits::max_comms) return true;  // untracked: nothing to check
    comm_extra* e = extras_[t.comm].load(std::memory_order_acquire);
    return !e || t.slot >= e->size() || e->release_if(t.slot, t.gen);
  }

  inspector_options opts_;
  // The size threshold and Send/Recv, applied as the plugin applies them (op_filter.hpp).
  const op_filter filter_{.min_size_bytes = opts_.min_size_bytes, .p2p = opts_.enable_p2p};
  std::shared_ptr<core> core_;
  collector_type& col_;               // core_->col (the hot path's one indirection)
  std::atomic<comm_extra*>* extras_;  // core_->extras
  std::mutex shutdown_mu_;
  bool shut_ = false, flushed_ = false;
  std::unique_ptr<exporter<source>> ex_;  // last member: stopped first (destructor) while the rest lives
};

using inspector = basic_inspector<>;

}  // namespace ncclinsp
