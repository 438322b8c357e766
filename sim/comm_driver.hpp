#pragma once
/// `comm_driver`: one communicator on one rank, driving a loaded plugin exactly as NCCL core does. `init`
/// with the version's argument order and the process-global mask, then the callback sequences of an API
/// call / group (`enqueue`, user thread: driver_enqueue.hpp) and of kernel completion (`complete`,
/// `complete_timed`, `start_only`, `foreign_proxy_op`, `proxy_ctrl`, proxy thread: driver_complete.hpp,
/// driver_timed.hpp). Every entry point reaches the version-templated code through one dispatcher, `visit`,
/// and every version decision through one profile, `nccl_profile` (nccl_release.hpp); the device work
/// rings are work_rings.hpp.
/// Thread-safety: the user-thread and proxy-thread entry points may run concurrently (they share only
/// immutable state); `enqueue` and `complete` allocate nothing.

#include "driver_complete.hpp"
#include "driver_enqueue.hpp"
#include "driver_timed.hpp"
#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "nccl_process.hpp"
#include "nccl_release.hpp"
#include "nccl_vocab.hpp"
#include "plugin_library.hpp"
#include "trace_sink.hpp"
#include "work_rings.hpp"

#include <ncclinsp/abi/callback_text.hpp>
#include <ncclinsp/abi/nccl_profiler.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

namespace ncclinsp::sim {

/// One communicator on one rank.
class comm_driver {
 public:
  comm_driver(const plugin_library& lib, comm_config cfg)
      : lib_(&lib),
        cfg_(std::move(cfg)),
        abi_(lib.abi()),
        prof_(nccl_profile::of(cfg_.release, abi_, cfg_.shim_quirks)) {
    if (!lib.ok()) {
      init_result_ = abi::internal_error;
      return;
    }
    const char* name = (cfg_.null_name || cfg_.name.empty()) ? nullptr : cfg_.name.c_str();
    int* mask = &global_mask();
    init_result_ = abi::internal_error;
    trace_sink* const trace = trace_sink::current();
    const std::uint64_t at = trace ? trace_sink::now() : 0;
    visit([&](const auto& e) {
      if constexpr (std::remove_cvref_t<decltype(e)>::version ==
                    4)  // v4 init: no commId before the mask, the hash after the name
        init_result_ =
            e.table->init(&context_, mask, name, cfg_.comm_hash, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
      else
        init_result_ =
            e.table->init(&context_, cfg_.comm_hash, mask, name, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
    });
    if (trace) {  // the mask as the plugin left it
      char buf[abi::callback_text::max_line];
      trace->write(
          buf, abi::callback_text::init_line(buf, at, trace_sink::tid(), abi::callback_text::id_of(context_),
                                             cfg_.comm_hash, name, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, load_mask()));
    }
    if (init_result_ != abi::success) {
      logger(abi::log_warn, abi::subsys_init, __FILE__, __LINE__,
             "Profiler init failed with error (%d). Continue without profiler.", int(init_result_));
      // 2.30.3+: ncclProfilerPluginInit unloads the library on an init error; no other communicator's
      // events or finalize reach it afterwards (the simulator stops calling instead of dlclosing).
      if (prof_.has(nccl_behaviour::init_error_unloads)) lib.mark_unloaded();
      return;
    }
    active_ = true;
    int m = load_mask();
    // Bits the loaded table has no event type for (the mask as the v5 / v6 table defines it).
    if (abi_ == 5) m &= ~int(abi::ev_ce_coll | abi::ev_ce_sync | abi::ev_ce_batch | abi::ev_kernel_phase);
    if (abi_ == 6) m &= ~int(abi::ev_kernel_phase);
    if (cfg_.mask_override >= 0) m = cfg_.mask_override;   // RAS re-applies its override after every init
    if (m & abi::ev_kernel_phase) m |= abi::ev_kernel_ch;  // 2.31: KernelPhase implies KernelCh
    store_mask(m);
  }

  comm_driver(const comm_driver&) = delete;
  comm_driver& operator=(const comm_driver&) = delete;
  ~comm_driver() { finalize(); }

  abi::result_t init_result() const noexcept { return init_result_; }
  bool active() const noexcept { return active_; }
  void* context() const noexcept { return context_; }
  int mask() const noexcept { return load_mask(); }
  int abi_version() const noexcept { return abi_; }
  const comm_config& config() const noexcept { return cfg_; }
  /// The behaviours this communicator reproduces (its release driving the loaded table).
  nccl_profile profile() const noexcept { return prof_; }
  /// Next seqNumber NCCL would give `f` on this communicator.
  std::uint64_t next_seq(nccl_func f) const noexcept { return seq_.coll[int(f)]; }

  /// Set the global mask now (the way a plugin or RAS may do later); applies to ops enqueued afterwards.
  static void set_mask(int m) noexcept { store_mask(m); }

  /// User-thread side: one outermost group of API calls (a single op = NCCL's implicit group, groupDepth 1;
  /// several = ncclGroupStart/End, groupDepth 2 unless `user_group` says otherwise). `out[i]` receives op i's
  /// pending token; `out.size() >= ops.size()`.
  void enqueue(std::span<const op_desc> ops, std::span<pending_op> out, int user_group = -1) {
    if (!live() || ops.empty() || out.size() < ops.size()) return;
    const bool grouped = user_group < 0 ? ops.size() > 1 : user_group != 0;
    visit([&](const auto& e) {
      constexpr int V = std::remove_cvref_t<decltype(e)>::version;
      detail::enqueue_sequence<V>(e, seq_).run(ops, out, grouped);
    });
    // An eager launch resets planner.persistent (proxy.cc SaveProxyProfiler then stops advancing the
    // host work counter at replays); a Broadcast starts the 2.31 counter drift.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != op_kind::ce_coll && !out[i].no_task) persistent_.store(false, std::memory_order_relaxed);
      if (prof_.has(nccl_behaviour::broadcast_counter_drift) && ops[i].func == nccl_func::broadcast)
        drift_.store(true, std::memory_order_relaxed);
    }
    mark_release_effects(out.first(ops.size()));
    rings_.number(out.first(ops.size()), prof_.has(nccl_behaviour::self_p2p_shifts_counter));
  }

  /// cudaStreamBeginCapture .. EndCapture around the API calls `ops` (one group): NCCL emits the API events
  /// (graphCaptured) and the captured kernel launch; the plan's host callback goes into the graph. Every
  /// `replay` of `g` then runs it.
  void capture(std::span<const op_desc> ops, captured_graph& g) {
    if (!live() || ops.empty()) return;
    g.n = std::min(ops.size(), max_graph_ops);
    for (std::size_t i = 0; i < g.n; ++i) {
      g.ops[i] = ops[i];
      g.ops[i].graph_captured = true;
    }
    pending_op scratch[max_graph_ops];
    const std::span<const op_desc> captured(g.ops, g.n);
    visit([&](const auto& e) {
      constexpr int V = std::remove_cvref_t<decltype(e)>::version;
      detail::enqueue_sequence<V>(e, seq_, detail::enqueue_mode::capture, &g)
          .run(captured, std::span<pending_op>(scratch, g.n), g.n > 1);
    });
    persistent_.store(true, std::memory_order_relaxed);
  }

  /// cudaGraphLaunch of `g`: its host callback (on the CUDA host-callback thread, the caller's): Group,
  /// Coll/P2p with new seqNumbers and the capture's stale parentObj. `out[i]` receives op i's token.
  void replay(const captured_graph& g, std::span<pending_op> out) {
    if (!live() || g.n == 0 || out.size() < g.n) return;
    visit([&](const auto& e) {
      constexpr int V = std::remove_cvref_t<decltype(e)>::version;
      detail::enqueue_sequence<V>(e, seq_, detail::enqueue_mode::replay, const_cast<captured_graph*>(&g))
          .run(std::span<const op_desc>(g.ops, g.n), out, g.n > 1);
    });
    const bool desync = prof_.has(nccl_behaviour::replay_counter_desync) && !persistent_.load();
    for (std::size_t i = 0; i < g.n; ++i)
      if (desync && out[i].kind != op_kind::ce_coll) out[i].stale_timestamps = true;
    mark_release_effects(out.first(g.n));
    rings_.number(out.first(g.n), prof_.has(nccl_behaviour::self_p2p_shifts_counter));
  }
  pending_op enqueue(const op_desc& op) {
    pending_op p;
    enqueue(std::span<const op_desc>(&op, 1), std::span<pending_op>(&p, 1), 0);
    return p;
  }

  /// Proxy/profiler-thread side: the kernel finished on every channel. `t[i]` is channel `channel_lo + i`
  /// (if `t` is shorter, its last entry is reused).
  void complete(const pending_op& p, std::span<const kernel_time> t) {
    if (!active_ || t.empty() || lib_->unloaded()) return;
    kernel_time seen[detail::max_timed_channels];
    const auto sent = rings_.carried(p, t, seen);
    visit([&](const auto& e) { detail::complete_channels(e, p, sent, true, last_kch_); });
  }
  void complete(const pending_op& p, std::uint64_t start_ns, std::uint64_t stop_ns) {
    const kernel_time t{start_ns, stop_ns};
    complete(p, std::span<const kernel_time>(&t, 1));
  }
  /// Proxy-thread side with timing: the ops of one group, every event at its own time, in time order across
  /// ops and channels: ProxyOp start + InProgress at `start`, KernelCh start at the channel's start, each
  /// ProxyStep's states at their times, ProxyOp stop after its last step, KernelCh stop (+ record 22) at the
  /// channel's stop. `wait(t, step)` is called with non-decreasing t before each event (the plugin timestamps
  /// proxy states with its own clock, so the caller sleeps until t); `step` is true when that event is a
  /// ProxyStep start, state transition or stop (the calls in which the plugin reads its clock to time
  /// proxy states; ncclinsp-sim's simulated proxy clock at --speed 0 covers those only). Events gated by each op's mask snapshot
  /// exactly as in `complete`; NCCL starts ProxySteps even under a NULL ProxyOp handle (parentObj NULL) but
  /// records their states only under a non-NULL one. Allocates nothing (fixed-size event table).
  template <class Wait>
  void complete_timed(std::span<const timed_op> ops, Wait&& wait) {
    if (!active_ || ops.empty() || lib_->unloaded()) return;
    kernel_time seen[detail::max_timed_ops][detail::max_timed_channels];
    kernel_time when[detail::max_timed_ops][detail::max_timed_channels];
    timed_op sent[detail::max_timed_ops];
    const std::size_t n = std::min(ops.size(), detail::max_timed_ops);
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] = ops[i];
      if (!ops[i].kernel.empty()) {
        bool at_once = false;
        const auto carried = rings_.carried(*ops[i].op, ops[i].kernel, seen[i], &at_once);
        if (carried.data() != ops[i].kernel.data()) sent[i].sent = carried;  // events keep their times
        if (at_once) {  // a shifted op's slot was written long ago: its KernelCh come as it starts
          const std::size_t nch = std::min<std::size_t>(ops[i].op->n_channels, detail::max_timed_channels);
          for (std::size_t c = 0; c < nch; ++c) {
            const std::uint64_t s0 = ops[i].kernel[std::min(c, ops[i].kernel.size() - 1)].start_ns;
            when[i][c] = {s0, s0};
          }
          sent[i].kernel = std::span<const kernel_time>(when[i], nch);
        }
      }
    }
    visit([&](const auto& e) { detail::complete_timed(e, std::span<const timed_op>(sent, n), wait); });
  }

  /// The device side of the 64-slot work rings (work_rings.hpp): op `p`'s work started on each of its
  /// channels at `t[i].start_ns` and, if `ended`, finished at `t[i].stop_ns`. No events. A self P2P up
  /// to 2.31.0a has a device number and no host one: run it too.
  void device_run(const pending_op& p, std::span<const kernel_time> t, bool ended = true) noexcept {
    rings_.device_run(p, t, ended);
  }
  /// Grouped same-function ops on one channel run as one work batch: the kernel's profiler()
  /// (src/device/common.h) stamps every profiled work of the batch with the batch's start and end.
  void device_run_batch(std::span<const pending_op> batch, std::span<const kernel_time> t) noexcept {
    for (const pending_op& p : batch) device_run(p, t);
  }
  /// The reader's side (up to 2.31.0a0 src/transport/profiler.cc profilerProxyProgress, 2.31.2
  /// src/plugin/profiler.cc profilerProgressOps): a channel's KernelCh start and stop come once
  /// `sub->base <= slot.counter` and carry that slot's timestamp, so a reader 64 or more works behind
  /// sends a later work's, and a `shifted` op (host number behind its device number) the slot of an
  /// earlier work, at once, before its own runs. Emits `p`'s KernelCh events; false (nothing sent) while
  /// a channel's slot has not both started and ended as the slots say (NCCL's reader keeps polling).
  bool read_back(const pending_op& p) {
    if (!active_ || lib_->unloaded() || !p.work) return false;
    const std::size_t n = std::min<std::size_t>(p.n_channels, detail::max_timed_channels);
    kernel_time sent[detail::max_timed_channels];
    if (!rings_.read(p, sent)) return false;
    visit([&](const auto& e) {
      detail::complete_channels(e, p, std::span<const kernel_time>(sent, n), true, last_kch_);
    });
    return true;
  }

  /// Events of a communicator that already finalized, from a proxy thread it shared with others
  /// (up to 2.31.0a0 ncclProxyProgressDestroy keeps progressing): the kernel's completion, as `complete`.
  void complete_after_finalize(const pending_op& p, std::span<const kernel_time> t) {
    if (t.empty() || lib_->unloaded()) return;
    visit([&](const auto& e) { detail::complete_channels(e, p, t, true); });
  }

  /// A KernelCh record(22) and stop on the channel's previous KernelCh handle (sub->kernelEventHandle is
  /// never reset up to 2.31.0a0): the op `p` got no KernelCh start on channel `channel_lo`, the stop names
  /// whatever handle that channel's last op had. No-op where the release guards it (PR #2221).
  void stale_kernel_ch_stop(const pending_op& p, std::uint64_t stop_ns) {
    if (!active_ || lib_->unloaded() || !last_kch_[p.channel_lo % detail::max_timed_channels]) return;
    if (prof_.has(nccl_behaviour::kernel_ch_stop_guarded)) return;
    void* h = last_kch_[p.channel_lo % detail::max_timed_channels];
    visit([&](const auto& e) { e.kernel_ch_stop(h, stop_ns); });
  }

  /// KernelCh start only, never stopped (NCCL 2.31 purges in-flight ops at comm destroy; a hung kernel).
  void start_only(const pending_op& p, std::uint64_t start_ns) {
    if (!active_ || lib_->unloaded()) return;
    const kernel_time t{start_ns, 0};
    visit([&](const auto& e) { detail::complete_channels(e, p, std::span<const kernel_time>(&t, 1), false); });
  }

  /// A hung op whose network proxies posted their steps and stalled (--net-stall): KernelCh starts, ProxyOps
  /// and each step's states up to the one it stays in (`stuck`: later ones at `never_ns`), nothing stopped;
  /// emitted at their times through `wait`, as `complete_timed`.
  template <class Wait>
  void start_only(const pending_op& p, std::uint64_t start_ns, std::span<const proxy_plan> stuck, Wait&& wait) {
    if (!active_ || lib_->unloaded()) return;
    const kernel_time t{start_ns, never_ns};
    const timed_op op{&p, std::span<const kernel_time>(&t, 1), stuck};
    visit([&](const auto& e) { detail::complete_timed(e, std::span<const timed_op>(&op, 1), wait); });
  }

  /// A PXN ProxyOp progressed in this process on behalf of another: `proxyOp.pid` = `pid`, and both
  /// `parentObj` and the context pointer are addresses from the other process (never dereference them).
  void foreign_proxy_op(pid_t pid, std::uint8_t channel, int peer, int rank,
                        void* foreign_parent = reinterpret_cast<void*>(0x10),
                        void* foreign_context = reinterpret_cast<void*>(0x20)) {
    if (!active_ || lib_->unloaded()) return;
    visit_with(foreign_context,
               [&](const auto& e) { detail::foreign_proxy_op(e, pid, channel, peer, rank, foreign_parent); });
  }

  /// One ProxyCtrl Append → AppendEnd cycle on the proxy thread (reads the global mask per event, as NCCL).
  void proxy_ctrl(int appended_ops) {
    if (!active_ || lib_->unloaded()) return;
    visit([&](const auto& e) { e.proxy_ctrl(appended_ops); });
  }

  /// ncclCommDestroy: `finalize(context)` if init succeeded and the context is non-NULL. Idempotent.
  void finalize() {
    if (!active_) return;
    active_ = false;
    if (!context_ || lib_->unloaded()) return;
    trace_sink* const trace = trace_sink::current();
    const std::uint64_t at = trace ? trace_sink::now() : 0;
    visit([&](const auto& e) { e.table->finalize(context_); });
    if (trace) {
      char buf[abi::callback_text::max_line];
      trace->write(buf,
                   abi::callback_text::finalize_line(buf, at, trace_sink::tid(), abi::callback_text::id_of(context_)));
    }
  }

 private:
  /// The one dispatch from the runtime ABI version to the version-templated sequences: calls
  /// f(detail::emitter<V>) for the loaded table's V, with plugin context `ctx` (a foreign one for PXN).
  template <class F>
  void visit_with(void* ctx, F&& f) const {
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      f(detail::emitter<V>{lib_->table<V>(), ctx, cfg_, prof_});
    });
  }
  template <class F>
  void visit(F&& f) const {
    visit_with(context_, std::forward<F>(f));
  }

  bool live() const noexcept { return active_ && !lib_->unloaded(); }

  /// Per-op effects of the release decided at the API call or replay (the 2.31 drift after a Broadcast).
  void mark_release_effects(std::span<pending_op> out) const noexcept {
    if (!drift_.load(std::memory_order_relaxed)) return;
    for (pending_op& p : out)
      if (p.kernel_events && p.func != nccl_func::broadcast) p.drifted = true;
  }

  const plugin_library* lib_;
  comm_config cfg_;
  int abi_ = 0;
  nccl_profile prof_;
  void* context_ = nullptr;
  abi::result_t init_result_ = abi::internal_error;
  bool active_ = false;
  detail::seq_counters seq_;
  std::atomic<bool> persistent_{false};              ///< planner.persistent: set by a capture, reset by an eager launch
  std::atomic<bool> drift_{false};                   ///< 2.31: a Broadcast shifted the device counters
  void* last_kch_[detail::max_timed_channels] = {};  ///< last KernelCh handle per channel (proxy thread)
  detail::work_rings rings_;
};

}  // namespace ncclinsp::sim
