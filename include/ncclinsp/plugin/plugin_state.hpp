#pragma once
/// The plugin's process state: one per process, created at the first init and never destroyed
/// (NCCL threads may outlive static destructors; the library pins itself in memory), so a later
/// communicator reuses it and counters continue. It has the configuration (env_options from the
/// environment), the collector, the communicators (comm_registry.hpp), the event adapter the
/// callbacks run (event_adapter.hpp), the exporter thread and the change detector, the state
/// dumper (state_dumper.hpp), NCCL's logger,
/// and the process hooks: atexit (a bounded last export), pthread_atfork (inert in a forked
/// child), dlopen pinning. Built into libnccl-profiler-ncclinsp.so by plugin/exports.cpp, or into
/// an application for NCCL_PROFILER_PLUGIN=STATIC_PLUGIN.
/// Thread-safety: init/finalize/flush under one mutex (cold); finalize retires the communicator
/// through the registry, which waits (bounded) for the events still inside it.

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/abi/nccl_behaviours.hpp"
#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/plugin/callback_recorder.hpp"
#include "ncclinsp/plugin/comm_registry.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/device_identity.hpp"
#include "ncclinsp/plugin/event_adapter.hpp"
#include "ncclinsp/plugin/handle.hpp"
#include "ncclinsp/plugin/state_dumper.hpp"
#include "ncclinsp/runtime_options.hpp"
#include "ncclinsp/sinks/from_options.hpp"
#include "ncclinsp/sinks/otlp_http_sink.hpp"
#include "ncclinsp/version.hpp"

namespace ncclinsp::plugin {

class plugin_state {
 public:
  /// The process-wide state, created by the first call (init). Never destroyed: NCCL threads may
  /// outlive static destructors.
  static plugin_state& get() {
    static plugin_state* s = make();
    return *s;
  }
  /// The process-wide state once the first init configured it, else nullptr.
  static plugin_state* existing() noexcept { return instance_.load(std::memory_order_acquire); }
  /// For the event callbacks (hot: one load, no guard): the process-wide adapter once the first
  /// init configured it, else nullptr (NCCL sends no event before init; one that comes anyway is
  /// ignored).
  NCCLINSP_INLINE static event_adapter* events() noexcept { return events_.load(std::memory_order_acquire); }
  /// The process-wide callback recorder when NCCLINSP_CAPTURE is set, else nullptr (hot: one load).
  NCCLINSP_INLINE static callback_recorder* recorder() noexcept { return recorder_.load(std::memory_order_acquire); }

  /// A private state (tests, the fuzzer): the same init/finalize and callbacks through adapter(),
  /// never published to the exported tables. Destroy it only after its communicators finalized.
  plugin_state() = default;
  plugin_state(const plugin_state&) = delete;
  plugin_state& operator=(const plugin_state&) = delete;
  ~plugin_state() = default;

  /// This state's event adapter once configured (the first init), else nullptr.
  event_adapter* adapter() noexcept { return adapter_ ? &*adapter_ : nullptr; }

  // ---- init / finalize (cold) ------------------------------------------------------------------
  result_t init(void** context, int* mask, const char* name, std::uint64_t hash, int nnodes, int nranks, int rank,
                abi::logger_t logfn, int abi_version) noexcept {
    if (context) *context = nullptr;
    if (forked_child_.load(std::memory_order_relaxed)) return abi::success;  // inert after fork(), see on_fork_child
    try {
      std::lock_guard lk(mu_);
      if (logfn) logger_.store(logfn, std::memory_order_release);
      if (!configured_) configure(abi_version);
      if (!opts_.enable) {  // inert, as Inspector with NCCL_INSPECTOR_ENABLE unset; capturing if asked
        if (mask && capture_ && opts_.capture_mask)
          std::atomic_ref<int>(*mask).store(opts_.capture_mask, std::memory_order_relaxed);
        return abi::success;
      }
      // No init returns an error: NCCL 2.30.3+ unloads the library on one (ncclProfilerPluginInit),
      // under every other live communicator. A communicator we cannot follow gets no context.
      if (!context || nranks <= 0 || rank < 0 || rank >= nranks || nnodes <= 0) {
        log(log_level::warn, "init called with invalid arguments (nranks=" + std::to_string(nranks) + ", rank=" +
                                 std::to_string(rank) + "); running without ncclinsp for this communicator");
        return abi::success;
      }
      // Same shape for every communicator: the options are fixed at the first init.
      comm_state* cs = registry_.adopt(inflight_pool_ > max_op_slots ? max_op_slots : inflight_pool_,
                                       col_->options().record_traces, opts_.proxy ? proxy_steps_per_comm : 0);
      cs->nranks = nranks;
      cs->rank = rank;
      const device_identity dev = identify_device(opts_.cuda_driver, opts_.node_name);
      const comm_desc desc{.name = name ? std::string(name) : std::string(),
                           .hash = hash,
                           .rank = rank,
                           .nranks = nranks,
                           .nnodes = nnodes,
                           .device = dev.ordinal,
                           .uuid = dev.uuid};
      const comm_handle h = col_->add_comm(desc, [cs](comm_handle) { return cs->ops.oldest(); });
      if (h == no_index || h >= max_plugin_comms) {
        registry_.give_back(cs);
        log(log_level::warn, "communicator table full (" + std::to_string(max_plugin_comms) +
                                 " in this process); running without ncclinsp for it (counted: comm_table_full)");
        return abi::success;
      }
      cs->proxy = col_->proxy_of(h);
      registry_.publish(*cs, h);
      if (dumper_) dumper_->add(cs, desc);
      *context = comm_registry::context_of(*cs);
      if (live_comms_++ == 0) start_exporter();
      if (adapter_) adapter_->watch_mask(mask);
      if (mask) {
        int m = static_cast<int>(abi::ev_coll | abi::ev_kernel_ch);
        if (opts_.enable_p2p) m |= static_cast<int>(abi::ev_p2p);
        if (abi_version >= 6) m |= static_cast<int>(abi::ev_ce_coll);
        if (opts_.proxy)
          m |= static_cast<int>(abi::ev_proxy_op | abi::ev_proxy_step);  // bits 3 and 4 in every ABI version
        if (capture_) m |= opts_.capture_mask;
        // NCCL's mask is one process-wide int that other threads read (atomically, relaxed) while
        // another communicator initializes: store it atomically too.
        std::atomic_ref<int>(*mask).store(m, std::memory_order_relaxed);
      }
      return abi::success;
    } catch (...) {
      if (context) *context = nullptr;
      return abi::success;  // running without ncclinsp for this communicator (never an unload)
    }
  }

  result_t finalize(void* context) noexcept {
    if (capture_) {  // the lines so far reach the file (bounded: finalize never stalls teardown)
      capture_->flush(std::chrono::milliseconds(50));
      log_capture();
    }
    try {
      comm_state* cs = registry_.from_context(context);
      if (!cs || forked_child_.load(std::memory_order_relaxed)) return abi::success;
      std::unique_lock lk(mu_);
      // The ops still in flight never complete now (NCCL >= 2.31 purges them): counted abandoned.
      std::uint32_t inflight = 0;
      const comm_handle h = cs->handle;
      if (dumper_) dumper_->remove(cs);
      if (!registry_.retire(*cs, std::chrono::milliseconds(20), inflight)) return abi::success;  // finalize twice
      col_->retire_comm(h, inflight);
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
  // get()'s state and its adapter, once configured (existing(), events()).
  static inline std::atomic<plugin_state*> instance_{nullptr};
  static inline std::atomic<event_adapter*> events_{nullptr};
  static inline std::atomic<callback_recorder*> recorder_{nullptr};
  bool process_wide_ = false;  // made by get() (tests and the fuzzer make private ones)

  void configure(int abi_version) {
    configured_ = true;
    pin_library();
    opts_ = env_options::from_env([this](log_level l, std::string_view m) { log(l, std::string(m)); });
    runtime_options rt = runtime_options_from(opts_, /*nccl_events=*/true,
                                              {.hostname = detail::host_name(),
                                               .abi = "v" + std::to_string(abi_version),
                                               .pid = static_cast<long>(::getpid())});
    inflight_pool_ = rt.inflight_pool;
    col_ = std::make_unique<collector<>>(std::move(rt.collector));
    adapter_.emplace(registry_, *col_,
                     adapter_config{.filter = rt.filter,
                                    .proxy_sample = opts_.proxy_sample,
                                    .require_kernel_timing = opts_.require_kernel_timing,
                                    .traces = col_->options().record_traces,
                                    .pid = ::getpid(),
                                    // What the releases that load this ABI do (abi/nccl_behaviours.hpp).
                                    .stale_channel_stops = !abi::nccl_holds_at_abi(
                                        abi::nccl_behaviour::kernel_ch_stop_guarded, abi_version, /*all=*/true),
                                    .self_p2p_shifts_channels = abi::nccl_holds_at_abi(
                                        abi::nccl_behaviour::self_p2p_shifts_counter, abi_version, /*all=*/false),
                                    .kernel_ch_drops = abi::nccl_holds_at_abi(
                                        abi::nccl_behaviour::kernel_ch_dropped_on_alloc_failure, abi_version,
                                        /*all=*/false)});
    detector_ = std::make_unique<change_detector>(std::move(rt.detector));
    if (opts_.enable) start_state_dumps();
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
    if (!opts_.capture_dir.empty() && process_wide_) start_capture(abi_version);
    if (process_wide_) {  // events read what configure wrote
      instance_.store(this, std::memory_order_release);
      events_.store(&*adapter_, std::memory_order_release);
    }
  }

  /// NCCLINSP_CAPTURE: the callback recorder (cold, at the first init). NCCL's version comes from
  /// ncclGetVersion when NCCL's symbols are visible to the process, else 0.
  void start_capture(int abi_version) {
    int nccl_version = 0;
    if (auto fn = reinterpret_cast<int (*)(int*)>(::dlsym(RTLD_DEFAULT, "ncclGetVersion"))) fn(&nccl_version);
    std::string error;
    capture_ = callback_recorder::open(opts_.capture_dir, detail::host_name(), opts_.capture_max_mb << 20, abi_version,
                                       nccl_version, error);
    if (!capture_) {
      log(log_level::warn, "NCCLINSP_CAPTURE: " + error + "; running without the capture");
      return;
    }
    log(log_level::info, "capturing every profiler callback into " + capture_->path());
    recorder_.store(capture_.get(), std::memory_order_release);
  }
  /// NCCLINSP_STATE: the state dumper (plugin/state_dumper.hpp), at the first init when enabled.
  void start_state_dumps() {
    auto lg = [this](log_level l, std::string_view m) { log(l, std::string(m)); };
    state_dump_options so = state_dump_options::from_env(lg, process_env, opts_.dump_dir);
    log(log_level::info, so.describe());
    if (!so.enable) return;
    dumper_ = std::make_unique<state_dumper>(std::move(so),
                                             process_identity{.node = opts_.node_name,
                                                              .hostname = detail::host_name(),
                                                              .slurm_job_id = opts_.slurm_job_id,
                                                              .job_id = opts_.job_id,
                                                              .pid = static_cast<long>(::getpid())},
                                             lg);
  }
  /// The capture's state at a finalize or at exit, in NCCL's log when it dropped lines.
  void log_capture() noexcept {
    if (!capture_) return;
    const auto c = capture_->dropped_and_written();
    if (c.ring_full + c.file_full + c.write_failed)
      log(log_level::warn, "NCCLINSP_CAPTURE dropped lines (ring_full=" + std::to_string(c.ring_full) +
                               " file_full=" + std::to_string(c.file_full) +
                               " write_failed=" + std::to_string(c.write_failed) + ") in " + capture_->path());
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
    if (capture_) capture_->close();  // NCCL's late lines are dropped and counted after this
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
  env_options opts_;
  std::uint32_t inflight_pool_ = 0;  // in-flight op slots per communicator (runtime_options_from)
  std::unique_ptr<collector<>> col_;
  comm_registry registry_;  // declared before adapter_, which refers to it
  std::optional<event_adapter> adapter_;
  std::unique_ptr<change_detector> detector_;  // exporter thread only
  std::unique_ptr<state_dumper> dumper_;       // NCCLINSP_STATE; declared after registry_, whose states it reads
  std::unique_ptr<exporter<collector<>>> exporter_;
  std::unique_ptr<callback_recorder> capture_;  // NCCLINSP_CAPTURE; never destroyed while NCCL may call
  std::atomic<abi::logger_t> logger_{nullptr};
  std::uint32_t live_comms_ = 0;
  std::atomic<bool> forked_child_{false};
  std::vector<std::unique_ptr<exporter<collector<>>>> lingering_;  // stopped with a timeout, still finishing
};

}  // namespace ncclinsp::plugin