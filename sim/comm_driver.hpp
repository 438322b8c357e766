#pragma once
/// `comm_driver`: one communicator on one rank, driving a loaded plugin exactly as NCCL core does. `init`
/// with the version's argument order and the process-global mask, then the callback sequences of an API
/// call / group (`enqueue`, user thread: driver_enqueue.hpp) and of kernel completion (`complete`,
/// `complete_timed`, `start_only`, `foreign_proxy_op`, `proxy_ctrl`, proxy thread: driver_complete.hpp,
/// driver_timed.hpp). Every entry point reaches the version-templated code through one dispatcher, `visit`.
/// Thread-safety: the user-thread and proxy-thread entry points may run concurrently (they share only
/// immutable state); `enqueue` and `complete` allocate nothing.

#include "driver_complete.hpp"
#include "driver_enqueue.hpp"
#include "driver_timed.hpp"
#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "nccl_process.hpp"
#include "nccl_vocab.hpp"
#include "plugin_library.hpp"

#include <ncclinsp/abi/nccl_profiler.hpp>
#include <ncclinsp/abi/versions.hpp>

#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

namespace ncclinsp::sim {

/// One communicator on one rank.
class comm_driver {
 public:
  comm_driver(const plugin_library& lib, comm_config cfg) : lib_(&lib), cfg_(std::move(cfg)), abi_(lib.abi()) {
    if (!lib.ok()) {
      init_result_ = abi::internal_error;
      return;
    }
    const char* name = (cfg_.null_name || cfg_.name.empty()) ? nullptr : cfg_.name.c_str();
    int* mask = &global_mask();
    init_result_ = abi::internal_error;
    visit([&](const auto& e) {
      if constexpr (std::remove_cvref_t<decltype(e)>::version ==
                    4)  // v4 init: no commId before the mask, the hash after the name
        init_result_ =
            e.table->init(&context_, mask, name, cfg_.comm_hash, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
      else
        init_result_ =
            e.table->init(&context_, cfg_.comm_hash, mask, name, cfg_.n_nodes, cfg_.n_ranks, cfg_.rank, &logger);
    });
    if (init_result_ != abi::success) {
      logger(abi::log_warn, abi::subsys_init, __FILE__, __LINE__,
             "Profiler init failed with error (%d). Continue without profiler.", int(init_result_));
      return;
    }
    active_ = true;
    int m = load_mask();
    if (abi_ == 5) m &= ~int(abi::ev_ce_coll | abi::ev_ce_sync | abi::ev_ce_batch | abi::ev_kernel_phase);  // v5 shim
    if (abi_ == 6) m &= ~int(abi::ev_kernel_phase);                                                         // v6 shim
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
  /// Next seqNumber NCCL would give `f` on this communicator.
  std::uint64_t next_seq(nccl_func f) const noexcept { return seq_.coll[int(f)]; }

  /// Set the global mask now (the way a plugin or RAS may do later); applies to ops enqueued afterwards.
  static void set_mask(int m) noexcept { store_mask(m); }

  /// User-thread side: one outermost group of API calls (a single op = NCCL's implicit group, groupDepth 1;
  /// several = ncclGroupStart/End, groupDepth 2 unless `user_group` says otherwise). `out[i]` receives op i's
  /// pending token; `out.size() >= ops.size()`.
  void enqueue(std::span<const op_desc> ops, std::span<pending_op> out, int user_group = -1) {
    if (!active_ || ops.empty() || out.size() < ops.size()) return;
    const bool grouped = user_group < 0 ? ops.size() > 1 : user_group != 0;
    visit([&](const auto& e) {
      constexpr int V = std::remove_cvref_t<decltype(e)>::version;
      detail::enqueue_sequence<V>(e, seq_, broadcast_emits_coll()).run(ops, out, grouped);
    });
  }
  pending_op enqueue(const op_desc& op) {
    pending_op p;
    enqueue(std::span<const op_desc>(&op, 1), std::span<pending_op>(&p, 1), 0);
    return p;
  }

  /// Proxy/profiler-thread side: the kernel finished on every channel. `t[i]` is channel `channel_lo + i`
  /// (if `t` is shorter, its last entry is reused).
  void complete(const pending_op& p, std::span<const kernel_time> t) {
    if (!active_ || t.empty()) return;
    visit([&](const auto& e) { detail::complete_channels(e, p, t, true); });
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
    if (!active_ || ops.empty()) return;
    visit([&](const auto& e) { detail::complete_timed(e, ops, wait); });
  }

  /// KernelCh start only, never stopped (NCCL 2.31 purges in-flight ops at comm destroy; a hung kernel).
  void start_only(const pending_op& p, std::uint64_t start_ns) {
    if (!active_) return;
    const kernel_time t{start_ns, 0};
    visit([&](const auto& e) { detail::complete_channels(e, p, std::span<const kernel_time>(&t, 1), false); });
  }

  /// A PXN ProxyOp progressed in this process on behalf of another: `proxyOp.pid` = `pid`, and both
  /// `parentObj` and the context pointer are addresses from the other process (never dereference them).
  void foreign_proxy_op(pid_t pid, std::uint8_t channel, int peer, int rank,
                        void* foreign_parent = reinterpret_cast<void*>(0x10),
                        void* foreign_context = reinterpret_cast<void*>(0x20)) {
    if (!active_) return;
    visit_with(foreign_context,
               [&](const auto& e) { detail::foreign_proxy_op(e, pid, channel, peer, rank, foreign_parent); });
  }

  /// One ProxyCtrl Append → AppendEnd cycle on the proxy thread (reads the global mask per event, as NCCL).
  void proxy_ctrl(int appended_ops) {
    if (!active_) return;
    visit([&](const auto& e) { e.proxy_ctrl(appended_ops); });
  }

  /// ncclCommDestroy: `finalize(context)` if init succeeded and the context is non-NULL. Idempotent.
  void finalize() {
    if (!active_) return;
    active_ = false;
    if (!context_) return;
    visit([&](const auto& e) { e.table->finalize(context_); });
  }

 private:
  /// The one dispatch from the runtime ABI version to the version-templated sequences: calls
  /// f(detail::emitter<V>) for the loaded table's V, with plugin context `ctx` (a foreign one for PXN).
  template <class F>
  void visit_with(void* ctx, F&& f) const {
    abi::with_abi(abi_, [&](auto v) {
      constexpr int V = decltype(v)::value;
      f(detail::emitter<V>{lib_->table<V>(), ctx, cfg_});
    });
  }
  template <class F>
  void visit(F&& f) const {
    visit_with(context_, std::forward<F>(f));
  }

  bool broadcast_emits_coll() const noexcept {
    if (cfg_.broadcast_coll >= 0) return cfg_.broadcast_coll != 0;
    return abi_ <= 5 && !cfg_.shim_quirks;
  }

  const plugin_library* lib_;
  comm_config cfg_;
  int abi_ = 0;
  void* context_ = nullptr;
  abi::result_t init_result_ = abi::internal_error;
  bool active_ = false;
  detail::seq_counters seq_;
};

}  // namespace ncclinsp::sim
