#pragma once
/// The event adapter: NCCL's startEvent / stopEvent / recordEventState (profiler ABI v4-v7) turned
/// into op records for the collector. This is the hot path.
///
/// Rules kept here (NCCL's ext-profiler/README.md; the simulator reproduces them, sim/nccl_driver.hpp):
///  - Handles are tagged integers (handle.hpp): decoded, bounds- and generation-checked, or ignored.
///  - Coll/P2p stop means "enqueued"; an op completes when all its KernelCh channels ended. NCCL
///    (2.27, the first with ABI v4, through 2.32) ends a channel with recordEventState(22) and
///    stopEvent back to back on one thread (ncclProfilerStopKernelChEvent), so the record ends the
///    channel and both stops (the channel's, and the op's when its channels complete it) return on
///    the handle alone. With traces on, the stops do the work, since their times are traced. A
///    channel stop without its record leaves the op in flight until finalize counts it abandoned.
///  - Duration = latest GPU channel stop - earliest GPU channel start (the span, not Inspector's
///    max-of-channels); channels are keyed by their real id, which need not start at 0.
///  - Every KernelCh event of one op comes from one thread (the proxy thread up to NCCL 2.30, the
///    communicator's profiler thread from 2.31), so an op's channel fields have one writer: plain
///    load+store, no locked instruction per channel. The op's reset at its start happens before NCCL
///    hands the op to that thread; the op's own stop on the user thread reads none of them.
///  - No throw crosses the C ABI; no I/O on NCCL's threads; lookups follow comm_registry.hpp's
///    protocol (reader sections, channel holds).
///
/// Each callback has one fast path and one out-of-line slow path: startEvent -> start_channel<false>
/// (a timed KernelCh) | start_slow; stopEvent -> nothing (KernelCh, an op its channels complete) |
/// stop_slow; recordEventState -> end_channel<false> (a timed KernelCh stop) | record_slow.
/// Thread-safety: any NCCL thread; no lock, no allocation, a few relaxed atomics on the op's own slot.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <type_traits>

#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/plugin/comm_registry.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/handle.hpp"
#include "ncclinsp/plugin/op_lifecycle.hpp"
#include "ncclinsp/plugin/proxy_events.hpp"

namespace ncclinsp::plugin {

using abi::result_t;

class event_adapter {
 public:
  event_adapter(comm_registry& reg, collector<>& col, const adapter_config& cfg) noexcept
      : reg_(reg), ops_(col, cfg), proxy_(reg, col, cfg.pid) {}

  // ---- startEvent ------------------------------------------------------------------------------
  template <class Descr>
  NCCLINSP_INLINE result_t start_event(void* context, void** handle, const Descr* d) noexcept {
    if (!handle) return abi::success;
    *handle = nullptr;
    if (!d) return abi::success;
    const std::uint64_t type = d->type;
    if constexpr (std::is_same_v<Descr, abi::descr_v4>) {
      // NCCL 2.27 starts Coll/P2p only under a non-NULL Group handle: give a constant, inert one.
      if (type == abi::ev_group) *handle = as_handle(encode(handle_kind::group, 0, 0, 0));
    }
    if (type == abi::ev_kernel_ch && d->kernelCh.pTimer && !cfg().traces) NCCLINSP_LIKELY
      return start_channel<false>(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    // Types that get no handle (the API and Group ancestors NCCL emits anyway, types a RAS mask
    // override enables, KernelPhase) return here: nothing is looked up.
    if (!(type &
          (abi::ev_kernel_ch | abi::ev_coll | abi::ev_p2p | abi::ev_proxy_step | abi::ev_proxy_op | abi::ev_ce_coll)))
      return abi::success;
    return start_slow(context, handle, d);
  }

  // ---- stopEvent -------------------------------------------------------------------------------
  NCCLINSP_INLINE result_t stop_event(void* handle) noexcept {
    const handle_kind kind = kind_of(handle);
    // Nothing to do: a KernelCh stop (its record(22) ended the channel), or the stop of an op its
    // channels complete (aux_ends_at_channels, set only without traces).
    if (kind == handle_kind::none || (kind == handle_kind::channel && !cfg().traces) ||
        (kind == handle_kind::op && (aux_of(handle) & aux_ends_at_channels)))
      return abi::success;
    return stop_slow(decode(handle));
  }

  // ---- recordEventState ------------------------------------------------------------------------
  NCCLINSP_INLINE result_t record_state(void* handle, int state, const abi::state_args* args) noexcept {
    const std::uint64_t t = state == abi::st_kernel_ch_stop && args ? args->kernelCh.pTimer : 0;
    if (t && !cfg().traces) NCCLINSP_LIKELY
      return end_channel<false>(decode(handle), t);
    return record_slow(handle, state, args);
  }

 private:
  /// startEvent of everything followed but a timed KernelCh without traces.
  template <class Descr>
  NCCLINSP_OUTLINE result_t start_slow(void* context, void** handle, const Descr* d) noexcept {
    const std::uint64_t type = d->type;
    if (type == abi::ev_kernel_ch)  // no GPU timer, or traces on
      return start_channel<true>(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    const auto in = reg_.enter();
    if (type == abi::ev_coll) return start_coll(context, handle, d);
    if (type == abi::ev_p2p) return start_p2p(context, handle, d);
    if (type == abi::ev_proxy_step) proxy_.start_step(handle, d->parentObj);
    if (type == abi::ev_proxy_op)
      proxy_.start_op(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.peer, d->proxyOp.isSend != 0);
    if constexpr (requires { d->ceColl; }) {
      if (type == abi::ev_ce_coll) return start_ce(context, handle, d);
    }
    return abi::success;
  }

  /// stopEvent of a channel (traces on), an op (Coll, P2p, CE: enqueued) or a group handle (ProxyStep, inert).
  NCCLINSP_OUTLINE result_t stop_slow(const decoded k) noexcept {
    if (k.kind == handle_kind::channel) {
      const comm_registry::channel_hold h(reg_, k);
      if (!h) return abi::success;
      if (h.comm().traces) h.comm().traces[k.slot].channel_stopped(k.channel);
      count_channel_end(h.comm(), h.op(), k.slot);
      return abi::success;
    }
    const auto in = reg_.enter();
    if (k.kind == handle_kind::group) {
      if (proxy_events::is_step(k)) proxy_.stop_step(k);
      return abi::success;
    }
    comm_state* cs = nullptr;
    op_slot* op = k.kind == handle_kind::op ? reg_.find_op(k, cs) : nullptr;
    if (!op) return abi::success;  // stale or already released
    op_slot& s = *op;
    // Here: an op without channels (CE, nChannels 0), which this stop completes, or, with traces,
    // an op with channels whose stop time is traced; either way this stop holds a reference. An op
    // with channels without traces never comes here (its handle says so), so this stop touches no
    // slot the channel side may free and another thread take again (a graph replay's CUDA
    // host-callback thread and the user thread both take slots); a forged handle holds no reference.
    if (!cfg().traces && !s.is_ce && s.expected_ch != 0) return abi::success;
    // Stopped twice: one reference only. NCCL stops an op from one thread, so no locked RMW here.
    if (s.enq_stopped.load(std::memory_order_relaxed)) return abi::success;
    s.enq_stopped.store(true, std::memory_order_relaxed);
    if (cs->traces) NCCLINSP_UNLIKELY
      cs->traces[k.slot].op_stopped();
    if (s.is_ce || s.expected_ch == 0) ops_.complete(*cs, s, /*enqueue_only=*/true);
    op_lifecycle::release(*cs, k.slot, s);
    return abi::success;
  }

  /// recordEventState but a timed KernelCh stop without traces: ProxyStep transitions, an untimed
  /// or traced KernelCh stop, or ignored.
  NCCLINSP_OUTLINE result_t record_slow(void* handle, int state, const abi::state_args* args) noexcept {
    if (state == abi::st_kernel_ch_stop) return end_channel<true>(decode(handle), args ? args->kernelCh.pTimer : 0);
    proxy_wait w;
    if (!proxy_wait_of(state, w)) return abi::success;
    const auto in = reg_.enter();
    proxy_.record(handle, w, args);
    return abi::success;
  }

  /// KernelCh start under an op handle. Rare: no GPU timer (proxy CPU time instead) or traces on.
  template <bool Rare>
  NCCLINSP_OUTLINE result_t start_channel(void** handle, void* parent, std::uint8_t channel,
                                          std::uint64_t gpu_start) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return abi::success;
    const comm_registry::channel_hold h(reg_, k);
    if (!h) return abi::success;
    op_slot& s = h.op();
    if (gpu_start) relaxed_min(s.gpu_lo, gpu_start);
    if constexpr (Rare) {
      if (!gpu_start) {
        s.gpu_missing.store(true, std::memory_order_relaxed);
        relaxed_min(s.cpu_lo, detail::steady_ns());
      }
      if (h.comm().traces) h.comm().traces[k.slot].channel_started(channel, gpu_start);
    }
    *handle = as_handle(encode(handle_kind::channel, k.gen, k.comm, k.slot, channel));
    return abi::success;
  }

  /// KernelCh recordEventState(22): the channel's GPU stop time. It ends the channel, except with
  /// traces on (Rare), where the stop that follows does (stop_slow). Rare: also an untimed stop.
  template <bool Rare>
  NCCLINSP_OUTLINE result_t end_channel(const decoded k, std::uint64_t gpu_stop) noexcept {
    if (k.kind != handle_kind::channel) return abi::success;
    const comm_registry::channel_hold h(reg_, k);
    if (!h) return abi::success;
    op_slot& s = h.op();
    if (gpu_stop)
      relaxed_max(s.gpu_hi, gpu_stop);
    else
      s.gpu_missing.store(true, std::memory_order_relaxed);
    if constexpr (Rare) {
      if (cfg().traces) {
        if (h.comm().traces) h.comm().traces[k.slot].channel_recorded(k.channel, gpu_stop);
        return abi::success;
      }
    }
    count_channel_end(h.comm(), s, k.slot);
    return abi::success;
  }

  /// One channel of the op ended (inside its channel_hold): counted, and the last one completes
  /// the op, exactly once. The count has one writer (the op's channel thread): no locked RMW.
  NCCLINSP_INLINE void count_channel_end(comm_state& cs, op_slot& s, std::uint32_t slot) noexcept {
    if (s.gpu_missing.load(std::memory_order_relaxed)) NCCLINSP_UNLIKELY
      relaxed_max(s.cpu_hi, detail::steady_ns());
    const std::uint32_t ended = s.ch_stopped.load(std::memory_order_relaxed) + 1;
    s.ch_stopped.store(ended, std::memory_order_relaxed);
    if (ended != s.expected_ch) return;
    ops_.complete(cs, s, /*enqueue_only=*/false);
    op_lifecycle::release(cs, slot, s);
  }

  // One writer (the op's channel thread): load+store, 0 = unset.
  static void relaxed_min(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    if (const std::uint64_t cur = a.load(std::memory_order_relaxed); cur == 0 || v < cur)
      a.store(v, std::memory_order_relaxed);
  }
  static void relaxed_max(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
  }

  template <class Descr>
  result_t start_coll(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = reg_.from_context(context);
    if (!cs) return abi::success;
    const auto idx =
        ops_.begin(*cs, parse_func(d->coll.func), d->coll.count, d->coll.datatype, d->coll.nChannels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    r.seq = d->coll.seqNumber;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % cfg().proxy_sample == 0;  // same ops on every rank
    r.alg = d->coll.algo ? parse_algo(d->coll.algo) : algo::unknown;
    r.pro = d->coll.proto ? parse_proto(d->coll.proto) : proto::unknown;
    if constexpr (requires { d->coll.userTag; }) {
      r.user_tag = d->coll.userTag;
      if (d->coll.isSymColl) {
        r.alg = algo::sym;
        r.pro = proto::none;
      }
    }
    *handle = ops_.handle_of(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_p2p(void* context, void** handle, const Descr* d) noexcept {
    if (!cfg().p2p) return abi::success;
    comm_state* cs = reg_.from_context(context);
    if (!cs) return abi::success;
    const auto idx = ops_.begin(*cs, parse_func(d->p2p.func), d->p2p.count, d->p2p.datatype, d->p2p.nChannels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    r.peer = d->p2p.peer;
    r.seq = cs->p2p_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % cfg().proxy_sample == 0;
    r.alg = algo::none;
    r.pro = proto::none;
    if constexpr (requires { d->p2p.userTag; }) r.user_tag = d->p2p.userTag;
    *handle = ops_.handle_of(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_ce(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = reg_.from_context(context);
    if (!cs) return abi::success;
    const auto idx = ops_.begin(*cs, parse_func(d->ceColl.func), d->ceColl.count, d->ceColl.datatype, 0, true);
    if (idx == no_index) return abi::success;
    op_slot& s = cs->ops[idx];
    s.rec.seq = d->ceColl.seqNumber;
    s.rec.alg = algo::none;
    s.rec.pro = proto::none;
    if constexpr (requires { d->ceColl.userTag; }) s.rec.user_tag = d->ceColl.userTag;
    s.cpu_lo.store(detail::steady_ns(), std::memory_order_relaxed);
    *handle = ops_.handle_of(*cs, idx);
    return abi::success;
  }

  const adapter_config& cfg() const noexcept { return ops_.config(); }

  comm_registry& reg_;
  op_lifecycle ops_;
  proxy_events proxy_;
};

}  // namespace ncclinsp::plugin
