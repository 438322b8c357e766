#pragma once
/// The plugin's process state: one per process, created at the first init and never destroyed
/// (NCCL threads may outlive static destructors; the library pins itself in memory), so a later
/// communicator reuses it and counters continue. It owns the configuration (env_options from the
/// environment), the collector, the exporter thread and the change detector, the communicator
/// table the events read (event_adapter.hpp), NCCL's logger, and the process hooks: atexit (a
/// bounded last export), pthread_atfork (inert in a forked child), dlopen pinning.
/// Built into libnccl-profiler-ncclinsp.so by plugin/exports.cpp, or into an application for
/// NCCL_PROFILER_PLUGIN=STATIC_PLUGIN. Thread-safety: init/finalize/flush under one mutex (cold);
/// finalize waits (bounded) for events still inside a communicator's state (reader_gate::quiesce and the op
/// slots' KernelCh marks), then parks the state for the next init (never freed: type-stable).

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/device_identity.hpp"
#include "ncclinsp/plugin/event_adapter.hpp"
#include "ncclinsp/plugin/handle.hpp"
#include "ncclinsp/sinks/from_options.hpp"
#include "ncclinsp/sinks/otlp_http_sink.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::plugin {

/// Process-wide plugin state: env_options, collector, exporter, communicator table. Created at the
/// first init and kept for the life of the process (the library pins itself in memory), so a
/// later communicator reuses it and counters continue.
class plugin_state : public event_adapter {
 public:
  /// Created by the first call (init). Never destroyed: NCCL threads may outlive static destructors.
  static plugin_state& get() {
    static plugin_state* s = make();
    return *s;
  }
  /// For the event callbacks (hot: one load, no guard): the state once the first init configured
  /// it, else nullptr (NCCL sends no event before init; one that comes anyway is ignored).
  NCCLINSP_INLINE static plugin_state* existing() noexcept { return instance_.load(std::memory_order_acquire); }

  // ---- init / finalize (cold) ------------------------------------------------------------------
  result_t init(void** context, int* mask, const char* name, std::uint64_t hash, int nnodes, int nranks, int rank,
                abi::logger_t logfn, int abi_version) noexcept {
    if (context) *context = nullptr;
    if (forked_child_.load(std::memory_order_relaxed)) return abi::success;  // inert after fork(), see on_fork_child
    try {
      std::lock_guard lk(mu_);
      if (logfn) logger_.store(logfn, std::memory_order_release);
      if (!configured_) configure(abi_version);
      if (!opts_.enable) return abi::success;  // inert, as Inspector with NCCL_INSPECTOR_ENABLE unset
      if (!context || nranks <= 0 || rank < 0 || rank >= nranks || nnodes <= 0) {
        log(log_level::warn, "init called with invalid arguments (nranks=" + std::to_string(nranks) + ", rank=" +
                                 std::to_string(rank) + "); running without ncclinsp for this communicator");
        return abi::invalid_argument;
      }
      const std::uint32_t pool = opts_.coll_pool_size + (opts_.enable_p2p ? opts_.p2p_pool_size : 0);
      comm_state* cs = nullptr;
      if (!spare_.empty()) {
        cs = spare_.back();
        spare_.pop_back();
        cs->recycle();
      } else {
        // Same shape for every communicator: the options are fixed at the first init.
        auto fresh =
            std::make_unique<comm_state>(pool > max_op_slots ? max_op_slots : pool, col_->options().record_traces,
                                         opts_.proxy ? proxy_steps_per_comm : 0);
        if (spare_.capacity() <= made_) {  // room for every comm_state ever made: finalize parks without allocating
          spare_.reserve(2 * made_ + 8);
          limbo_.reserve(2 * made_ + 8);
        }
        ++made_;
        cs = fresh.release();
      }
      cs->nranks = nranks;
      const device_identity dev = identify_device(opts_.cuda_driver, opts_.node_name);
      const comm_handle h = col_->add_comm({.name = name ? std::string(name) : std::string(),
                                            .hash = hash,
                                            .rank = rank,
                                            .nranks = nranks,
                                            .nnodes = nnodes,
                                            .device = dev.ordinal,
                                            .uuid = dev.uuid},
                                           [cs](comm_handle) { return cs->ops.oldest(); });
      if (h == no_index || h >= max_plugin_comms) {
        spare_.push_back(cs);
        log(log_level::warn, "communicator table full (" + std::to_string(max_plugin_comms) +
                                 " in this process); running without ncclinsp for it");
        return abi::internal_error;
      }
      cs->handle = h;
      cs->gen = ++comm_gen_;
      cs->proxy = col_->proxy_of(h);
      comms_[h].store(cs, std::memory_order_release);
      *context = as_handle(encode(handle_kind::op, cs->gen, h, context_slot));
      if (live_comms_++ == 0) start_exporter();
      if (mask) {
        int m = static_cast<int>(abi::ev_coll | abi::ev_kernel_ch);
        if (opts_.enable_p2p) m |= static_cast<int>(abi::ev_p2p);
        if (abi_version >= 6) m |= static_cast<int>(abi::ev_ce_coll);
        if (opts_.proxy)
          m |= static_cast<int>(abi::ev_proxy_op | abi::ev_proxy_step);  // bits 3 and 4 in every ABI version
        // NCCL's mask is one process-wide int that other threads read (atomically, relaxed) while
        // another communicator initializes: store it atomically too.
        std::atomic_ref<int>(*mask).store(m, std::memory_order_relaxed);
      }
      return abi::success;
    } catch (...) {
      return abi::internal_error;  // NCCL unloads us for this communicator and carries on
    }
  }

  result_t finalize(void* context) noexcept {
    try {
      comm_state* cs = comm_from_context(context);
      if (!cs || forked_child_.load(std::memory_order_relaxed)) return abi::success;
      std::unique_lock lk(mu_);
      if (comms_[cs->handle].load() != cs) return abi::success;  // finalize twice
      comms_[cs->handle].store(nullptr, std::memory_order_seq_cst);
      // NCCL's proxy/profiler thread may still be inside an event that found cs: wait (bounded)
      // until it has left. Afterwards no event can touch cs, so the in-flight count is exact: those
      // ops never complete now (NCCL >= 2.31 purges them) and are counted as abandoned.
      // KernelCh events mark the op slot instead of the gate (event_adapter::channel_hold): after
      // the gate's membarrier, wait for those too.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      const bool quiet = gate_.quiesce(std::chrono::milliseconds(20)) && channels_quiet(*cs, deadline);
      col_->retire_comm(cs->handle, cs->ops.inflight());
      // Never freed (type-stable: a KernelCh event may still load the old pointer, see
      // channel_hold): parked for the next init. At most max_plugin_comms are live, so the number
      // ever made is bounded by the peak of live communicators (plus any stuck in limbo_).
      if (quiet) {
        spare_.push_back(cs);
        const auto now = std::chrono::steady_clock::now();  // limbo_: unpublished before this quiesce began
        for (comm_state*& old : limbo_)
          if (channels_quiet(*old, now)) spare_.push_back(std::exchange(old, nullptr));
        std::erase(limbo_, nullptr);
      } else {
        limbo_.push_back(cs);  // a reader was preempted inside: parked by a later finalize
      }
      if (--live_comms_ == 0 && exporter_) {
        auto ex = std::move(exporter_);
        lk.unlock();
        // Final flush, bounded: never stalls teardown. If the sinks are stuck (a hung filesystem),
        // the detached exporter thread keeps its own state alive (shared); the library is pinned in
        // memory. It is kept in lingering_ so that exit_flush() (at process exit) gives its final
        // export a bounded chance to land; finished ones are dropped (stop is idempotent, so
        // destroying them neither blocks nor leaks).
        if (!ex->stop(std::chrono::milliseconds(100))) {
          lk.lock();
          std::erase_if(lingering_, [](const auto& e) { return e->wait_finished(std::chrono::milliseconds(0)); });
          lingering_.push_back(std::move(ex));
        }
      }
    } catch (...) {}
    return abi::success;
  }

  /// Only a private state (the fuzzer makes one per input) is ever destroyed, after its
  /// communicators were finalized: the parked states go with it (limbo_ stays, as before: a
  /// reader may still be inside one).
  ~plugin_state() {
    for (comm_state* cs : spare_) delete cs;
  }

  const env_options& opts() const noexcept { return opts_; }
  collector<>* get_collector() noexcept { return col_.get(); }
  /// Forces an export now (tests, STATIC_PLUGIN users).
  bool flush() {
    if (forked_child_.load(std::memory_order_relaxed)) return false;
    std::lock_guard lk(mu_);
    return exporter_ && exporter_->flush();
  }

 private:
  static plugin_state* make() {
    auto* s = new plugin_state();
    s->process_wide_ = true;
    return s;
  }
  static inline std::atomic<plugin_state*> instance_{nullptr};  // existing(): get()'s, once configured
  bool process_wide_ = false;  // made by get() (tests and the fuzzer make private ones)
  plugin_state() = default;

  /// After an unpublish and the gate's quiesce: waits (until `deadline`) until no KernelCh event is
  /// inside an op of `cs` (its mark was seen odd and has not changed since). True: none is.
  static bool channels_quiet(const comm_state& cs, std::chrono::steady_clock::time_point deadline) noexcept {
    for (std::uint32_t i = 0; i < cs.ops.size(); ++i) {
      const std::atomic<std::uint32_t>& m = cs.ops[i].ch_inside;
      const std::uint32_t seen = m.load(std::memory_order_seq_cst);
      if (!(seen & 1)) continue;
      while (m.load(std::memory_order_acquire) == seen) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::yield();
      }
    }
    return true;
  }

  void configure(int abi_version) {
    configured_ = true;
    pin_library();
    opts_ = env_options::from_env([this](log_level l, std::string_view m) { log(l, std::string(m)); });
    pid_ = ::getpid();
    collector_options co = collector_options_from(opts_, /*nccl_events=*/true,
                                                  {.hostname = detail::host_name(),
                                                   .abi = "v" + std::to_string(abi_version),
                                                   .pid = static_cast<long>(::getpid())});
    col_ = std::make_unique<collector<>>(std::move(co));
    traced_ = col_->options().record_traces;
    detector_ = std::make_unique<change_detector>(detector_options_from(opts_));
    // A final export that outlived finalize's 100 ms (slow disk, a large last batch) gets a bounded
    // chance to finish at process exit instead of being cut off mid-write. The library is pinned,
    // so the handler stays mapped.
    std::atexit([] { plugin_state::get().exit_flush(); });
    ::pthread_atfork(nullptr, nullptr, [] { plugin_state::get().on_fork_child(); });
    std::string banner =
        "ncclinsp " NCCLINSP_VERSION_STRING " loaded through profiler ABI v" + std::to_string(abi_version);
    banner += opts_.enable ? "; configuration:\n" + opts_.describe()
                           : "; disabled (set NCCL_INSPECTOR_ENABLE=1 or NCCLINSP_ENABLE=1)";
    log(log_level::info, banner);
    if (process_wide_) instance_.store(this, std::memory_order_release);  // events read what configure wrote
  }

  void start_exporter() {
    auto lg = [this](log_level l, std::string_view m) { log(l, std::string(m)); };
    std::vector<any_sink> sinks = sinks_from_options(opts_, lg, process_env, make_otlp_http_sink);
    // The detector runs on the exporter thread; its state changes go to NCCL's log (WARN when a
    // communicator degrades, so they show without NCCL_DEBUG=INFO).
    auto prepare = [this](snapshot& s) {
      detector_->update(s);
      for (const auto& e : s.busbw_events) log(e.degraded ? log_level::warn : log_level::info, describe(e));
    };
    exporter_ = std::make_unique<exporter<collector<>>>(
        *col_, std::move(sinks),
        exporter_options{.interval = opts_.export_interval(), .log = lg, .prepare = std::move(prepare)});
    exporter_->start();
  }

  /// In a child made by fork() (a data-loader worker, a subprocess launcher): only the forking
  /// thread exists, so the exporter threads this state refers to are gone and its mutexes may have
  /// been copied locked. The child never touches them: it runs without ncclinsp (init succeeds
  /// with no context, as when disabled), leaves the parent's files alone and exits at once.
  void on_fork_child() noexcept { forked_child_.store(true, std::memory_order_relaxed); }

  void exit_flush() noexcept {
    if (forked_child_.load(std::memory_order_relaxed)) return;
    std::vector<exporter<collector<>>*> pending;
    {
      std::lock_guard lk(mu_);
      for (auto& e : lingering_) pending.push_back(e.get());
    }
    const auto deadline = std::chrono::steady_clock::now() + opts_.exit_flush;
    // Per-op records still queued get the first half of the wait; the rest are counted as dropped
    // (reason exit_deadline), so the final statistics land before the exit.
    for (auto* e : pending) e->stop_records_at(std::chrono::steady_clock::now() + opts_.exit_flush / 2);
    for (auto* e : pending) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !e->wait_finished(left)) {
        log(log_level::warn, "final export did not finish before process exit; the last interval may be incomplete");
        break;
      }
    }
  }

  /// Keeps this library mapped after NCCL's dlclose: the exporter thread may outlive the last
  /// finalize (bounded wait), and a later communicator finds its state again.
  static void pin_library() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&pin_library), &info) && info.dli_fname)
      ::dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
  }

  void log(log_level lvl, const std::string& msg) noexcept {
    if (auto fn = logger_.load(std::memory_order_acquire))
      fn(lvl == log_level::warn ? abi::log_warn : abi::log_info, abi::subsys_profile, __FILE__, __LINE__,
         "ncclinsp: %s", msg.c_str());
    else
      stderr_log(lvl, msg);
  }

  std::mutex mu_;
  bool configured_ = false;
  std::unique_ptr<change_detector> detector_;  // exporter thread only
  std::unique_ptr<exporter<collector<>>> exporter_;
  std::atomic<abi::logger_t> logger_{nullptr};
  std::uint32_t comm_gen_ = 0;
  std::uint32_t live_comms_ = 0;
  std::atomic<bool> forked_child_{false};
  std::uint32_t made_ = 0;          // comm_states ever made (spare_ and limbo_ have room for all)
  std::vector<comm_state*> spare_;  // finalized communicators' state, for the next init (never freed)
  std::vector<comm_state*> limbo_;  // finalized while a reader was still inside: parked later
  std::vector<std::unique_ptr<exporter<collector<>>>> lingering_;  // stopped with a timeout, still finishing
};

}  // namespace ncclinsp::plugin