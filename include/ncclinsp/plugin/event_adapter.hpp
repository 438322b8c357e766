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
///  - Never a wrong number as GPU-timed, never a false hang, never a lost count: an op whose KernelCh
///    timestamps cannot be its own (a channel ending before the op began; a CUDA-graph replay
///    starting before its channel's last stop, an earlier work's device-ring slot), whose timing is
///    its host enqueue only (CE, no channels), or for which no KernelCh can come (Send/Recv to the
///    rank itself, NCCL's live mask without KernelCh, a captured symmetric collective), whose channel
///    ran work to the rank itself before (up to 2.31.0a its KernelCh read an earlier work's slot), or whose
///    GPU span is longer than its host-observed life (a garbage timer value), or whose KernelCh NCCL
///    dropped (2.31.2+: a later plan's KernelCh started first, comm_state::plan_order_enqueue) is
///    counted by that reason (filter_reason) instead of published or left in flight. CollNet ops
///    (nChannels 0) end with the last channel that started. The mask NCCL passes to init is its process-wide one.
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

  /// NCCL's process-wide activation mask (the `eActivationMask` every init gets; cold, at init). A
  /// RAS override may clear KernelCh in it after init: ops that then cannot get KernelCh events are
  /// settled at their stop instead of waiting for channels (never a false hang).
  void watch_mask(int* mask) noexcept {
    if (mask) mask_.store(mask, std::memory_order_relaxed);
  }

  // ---- startEvent ------------------------------------------------------------------------------
  template <class Descr>
  NCCLINSP_INLINE result_t start_event(void* context, void** handle, const Descr* d) noexcept {
    if (!handle) return abi::success;
    *handle = nullptr;
    if (!d) return abi::success;
    const std::uint64_t type = d->type;
    if constexpr (std::is_same_v<Descr, abi::descr_v4>) {
      // NCCL 2.27 starts Coll/P2p only under a non-NULL Group handle: give a constant, inert one.
      if (type == abi::ev_group) *handle = as_handle(encode(handle_kind::auxiliary, 0, 0, 0, aux_inert_group));
    }
    if (type == abi::ev_kernel_ch && d->kernelCh.pTimer && !cfg().traces) NCCLINSP_LIKELY
      return start_channel<false>(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    if constexpr (std::is_same_v<Descr, abi::descr_v7>) {
      // Each plan's Group gets its own handle, which its Coll/P2p carry as parentGroup: the plans' order.
      if (type == abi::ev_group) {
        if (cfg().kernel_ch_drops) *handle = plan_handle();
        return abi::success;
      }
    }
    if constexpr (requires { d->collApi; }) {
      // A CUDA-graph capture's CollApi/P2pApi: an inert handle, which the capture's replays carry as
      // their Coll/P2p parentObj (NCCL emits the API events only at capture).
      if (type == abi::ev_coll_api || type == abi::ev_p2p_api) {
        if (type == abi::ev_coll_api ? d->collApi.graphCaptured : d->p2pApi.graphCaptured) NCCLINSP_UNLIKELY
          return start_captured_api(context, handle);
        return abi::success;
      }
    }
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
    // Nothing to do: a KernelCh stop (its record(22) ended the channel), the stop of an op its
    // channels complete (aux_ends_at_channels, set only without traces), or a Group's.
    if (kind == handle_kind::none || (kind == handle_kind::channel && !cfg().traces) ||
        (kind == handle_kind::op && (aux_of(handle) & aux_ends_at_channels)) ||
        (kind == handle_kind::auxiliary && (aux_of(handle) & aux_kind_mask) == aux_inert_group))
      return abi::success;
    return stop_slow(decode(handle));
  }

  // ---- recordEventState ------------------------------------------------------------------------
  NCCLINSP_INLINE result_t record_state(void* handle, int state, const abi::state_args* args) noexcept {
    const std::uint64_t t = state == abi::st_kernel_ch_stop && args ? args->kernelCh.pTimer : 0;
    if (t && !cfg().traces) NCCLINSP_LIKELY
      return end_channel<false>(handle, t);
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
    if (type == abi::ev_proxy_step) proxy_.start_step(handle, d->parentObj, d->proxyStep.step);
    if (type == abi::ev_proxy_op)
      proxy_.start_op(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.peer, d->proxyOp.isSend != 0,
                      d->proxyOp.channelId);
    if constexpr (requires { d->ceColl; }) {
      if (type == abi::ev_ce_coll) return start_ce(context, handle, d);
    }
    return abi::success;
  }

  /// A CUDA-graph capture's CollApi/P2pApi (rare): the inert captured handle, and its communicator
  /// starts keeping its channels' last GPU ends (which its replays are checked against).
  NCCLINSP_OUTLINE result_t start_captured_api(void* context, void** handle) noexcept {
    *handle = as_handle(encode(handle_kind::auxiliary, 0, 0, 0, aux_captured_api));
    const auto in = reg_.enter();
    if (comm_state* cs = reg_.from_context(context); cs && !cs->graphs.load(std::memory_order_relaxed))
      cs->graphs.store(true, std::memory_order_relaxed);
    return abi::success;
  }

  /// stopEvent of a channel (traces on), an op (Coll, P2p, CE: enqueued) or an auxiliary handle (ProxyStep, inert).
  NCCLINSP_OUTLINE result_t stop_slow(const decoded k) noexcept {
    if (k.kind == handle_kind::channel) {
      const comm_registry::channel_hold h(reg_, k);
      if (!h) return abi::success;
      op_slot& s = h.op();
      if (cfg().stale_channel_stops && s.expected_ch <= 64) {  // a channel ends once (see end_channel)
        const std::uint64_t bit = std::uint64_t(1) << (k.channel_id() & 63),
                            seen = s.ch_stop_seen.load(std::memory_order_relaxed);
        if (seen & bit) return abi::success;
        s.ch_stop_seen.store(seen | bit, std::memory_order_relaxed);
      }
      if (h.comm().traces) h.comm().traces[k.slot].channel_stopped(k.channel_id());
      count_channel_end(h.comm(), s, k.slot);
      return abi::success;
    }
    const auto in = reg_.enter();
    if (k.kind == handle_kind::auxiliary) {
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
    if (state == abi::st_kernel_ch_stop) return end_channel<true>(handle, args ? args->kernelCh.pTimer : 0);
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
    if (gpu_start) {
      relaxed_min(s.gpu_lo, gpu_start);
      // A channel runs one work at a time: a replay's start before the channel's last accepted stop is
      // an earlier work's (up to 2.30 a replay after an eager launch reads the previous device-ring slot).
      if (s.replay && gpu_start < h.comm().ch_last_stop[channel & 63].load(std::memory_order_relaxed)) NCCLINSP_UNLIKELY
        reject(s, filter_reason::foreign_timestamps);
    }
    // A channel that ran work to this rank itself reads an earlier work's slot from then on (ABI <= 6).
    if ((h.comm().shifted_channels.load(std::memory_order_relaxed) >> (channel & 63)) & 1) NCCLINSP_UNLIKELY
      reject(s, filter_reason::foreign_timestamps);
    if (s.expected_ch == unknown_channels) NCCLINSP_UNLIKELY
      s.ch_started.store(s.ch_started.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Counted (ABI 7); the first KernelCh of a later plan (base >= the count) checks the earlier ones'.
    if (const std::uint64_t key = s.plan_key.load(std::memory_order_relaxed)) {
      std::atomic<std::uint64_t>& started = h.comm().plan_ch.started;
      const std::uint64_t n = started.load(std::memory_order_relaxed);
      if (key >> 8 < n) NCCLINSP_LIKELY
        started.store(n + 1, std::memory_order_relaxed);
      else
        next_plan(h.comm(), key >> 8);
    }
    s.ch_begun.store(s.ch_begun.load(std::memory_order_relaxed) | std::uint64_t(1) << (channel & 63),
                     std::memory_order_relaxed);  // the state dump's progress (one writer)
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
  /// It takes the raw handle (one register) and decodes it here: a `decoded` passed by value goes
  /// through the stack and stalls on store forwarding (bench/README.md, "Where a collective's time
  /// goes").
  template <bool Rare>
  NCCLINSP_OUTLINE result_t end_channel(void* handle, std::uint64_t gpu_stop) noexcept {
    const decoded k = decode(handle);
    if (k.kind != handle_kind::channel) return abi::success;
    const comm_registry::channel_hold h(reg_, k);
    if (!h) return abi::success;
    op_slot& s = h.op();
    // A channel ends once: a second stop names a stale kernelEventHandle (NCCL up to 2.31.0a0).
    if (cfg().stale_channel_stops && s.expected_ch <= 64) {
      const std::uint64_t bit = std::uint64_t(1) << (k.channel_id() & 63),
                          seen = s.ch_seen.load(std::memory_order_relaxed);
      if (seen & bit) NCCLINSP_UNLIKELY
        return abi::success;
      s.ch_seen.store(seen | bit, std::memory_order_relaxed);
    }
    s.ch_ended.store(s.ch_ended.load(std::memory_order_relaxed) | std::uint64_t(1) << (k.channel_id() & 63),
                     std::memory_order_relaxed);  // the state dump's progress (one writer)
    if (gpu_stop) {
      if (gpu_stop <= s.gpu_lo.load(std::memory_order_relaxed)) NCCLINSP_UNLIKELY {
        reject(s, filter_reason::rejected_timestamps);  // ends before the op began: another work's end
      } else {
        relaxed_max(s.gpu_hi, gpu_stop);
      }
    } else {
      s.gpu_missing.store(true, std::memory_order_relaxed);
    }
    if constexpr (Rare) {
      if (cfg().traces) {
        if (h.comm().traces) h.comm().traces[k.slot].channel_recorded(k.channel_id(), gpu_stop);
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
    // An op of unknown channel count ends with the last channel that started: NCCL's proxy starts an
    // op's channels in one pass, before any of them ends (its channels run in one kernel).
    if (ended != s.expected_ch &&
        (s.expected_ch != unknown_channels || ended != s.ch_started.load(std::memory_order_relaxed)))
      return;
    ops_.complete(cs, s, /*enqueue_only=*/false);
    op_lifecycle::release(cs, slot, s);
  }

  /// The first KernelCh of a later plan (channel thread): every KernelCh of earlier plans has
  /// started (comm_state::plan_order_enqueue), unless NCCL dropped some; then their ops are settled.
  NCCLINSP_OUTLINE void next_plan(comm_state& cs, std::uint64_t base) noexcept {
    if (cs.plan_ch.started.load(std::memory_order_relaxed) < base &&
        !cs.plans.unordered.load(std::memory_order_relaxed))
      settle_dropped(cs, base);
    cs.plan_ch.started.store(base + 1, std::memory_order_relaxed);
  }

  /// Settles every op of a plan before `base` that is still short of KernelCh starts: NCCL dropped
  /// them (nccl_behaviour::kernel_ch_dropped_on_alloc_failure). Counted as no_kernel_events, never
  /// GPU-timed (its KernelCh that did come are a part of its span); a late KernelCh of it names a
  /// released slot and is ignored. Rare (a shortfall only): scans the communicator's slots. Only
  /// this thread completes a numbered op, so the slots it settles are its own to release.
  void settle_dropped(comm_state& cs, std::uint64_t base) noexcept {
    for (std::uint32_t i = 0; i < cs.ops.size(); ++i) {
      op_slot& o = cs.ops[i];
      if (!o.started_at.load(std::memory_order_acquire)) continue;  // free, or completed
      const std::uint64_t key = o.plan_key.load(std::memory_order_relaxed);
      if (!key || key >> 8 >= base) continue;
      if (std::uint64_t(__builtin_popcountll(o.ch_begun.load(std::memory_order_relaxed))) >= (key & 0xFF)) continue;
      o.ts_reject.store(filter_reason::no_kernel_events, std::memory_order_relaxed);
      ops_.complete(cs, o, /*enqueue_only=*/false);
      op_lifecycle::release(cs, i, o);
    }
  }

  /// The op's KernelCh timestamps cannot be its own (the first reason found is kept).
  NCCLINSP_INLINE static void reject(op_slot& s, filter_reason why) noexcept {
    if (s.ts_reject.load(std::memory_order_relaxed) == no_filter) s.ts_reject.store(why, std::memory_order_relaxed);
  }

  template <class Descr>
  result_t start_coll(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = reg_.from_context(context);
    if (!cs) return abi::success;
    const algo alg = d->coll.algo ? parse_algo(d->coll.algo) : algo::unknown;
    std::uint32_t channels = d->coll.nChannels;
    filter_reason settle = no_kernel_events_now() ? filter_reason::no_kernel_events : no_filter;
    // CollNet (2.27 - 2.30): scheduleCollTasksToPlan leaves nChannels 0, yet KernelCh arrive.
    if (channels == 0 && (alg == algo::collnet_direct || alg == algo::collnet_chain)) channels = unknown_channels;
    if constexpr (requires { d->coll.isSymColl; }) {
      // 2.31.2 runs a captured symmetric collective's uninstrumented kernel: channels announced, no
      // KernelCh ever (symmetric_sched.cc).
      if (d->coll.isSymColl && is_captured(d->parentObj)) settle = filter_reason::no_kernel_events;
    }
    if (settle != no_filter) channels = 0;  // settled at its stop
    const std::uint32_t idx =
        ops_.begin(*cs, parse_func(d->coll.func), d->coll.count, d->coll.datatype, channels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    cs->ops[idx].settle = settle;
    cs->ops[idx].replay = is_captured(d->parentObj);
    r.seq = d->coll.seqNumber;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % cfg().proxy_sample == 0;  // same ops on every rank
    r.alg = alg;
    r.pro = d->coll.proto ? parse_proto(d->coll.proto) : proto::unknown;
    if constexpr (requires { d->coll.userTag; }) {
      r.user_tag = d->coll.userTag;
      if (d->coll.isSymColl) {
        r.alg = algo::sym;
        r.pro = proto::none;
      }
    }
    if constexpr (requires { d->coll.parentGroup; }) {
      if (cfg().kernel_ch_drops) note_plan(*cs, cs->ops[idx], d->coll.parentGroup);
    }
    *handle = ops_.publish(*cs, idx);
    return abi::success;
  }

  /// Whether NCCL's mask has KernelCh off now (a RAS override): no op started now gets KernelCh.
  bool no_kernel_events_now() const noexcept {
    int* m = mask_.load(std::memory_order_relaxed);
    return m && !(std::atomic_ref<int>(*m).load(std::memory_order_relaxed) & abi::ev_kernel_ch);
  }
  static bool is_captured(const void* parent) noexcept {
    const decoded k = decode(parent);
    return k.kind == handle_kind::auxiliary && (k.aux & aux_kind_mask) == aux_captured_api;
  }

  template <class Descr>
  result_t start_p2p(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = reg_.from_context(context);
    if (!cs) return abi::success;
    // Send/Recv to this rank itself (also the self chunk of an all-to-all, Gather/Scatter's root):
    // NCCL announces channels but makes no proxy op for it, so no KernelCh comes (real 2.28.9 trace
    // tests/traces/nccl-2.28.9-h200-onerank-cases.trace; enqueue.cc addP2pToPlan, proxy.cc
    // ncclProxySaveOp). Settled at its stop, as with a mask without KernelCh; 2.31.2 posts KernelCh
    // for it, which then name a released op and are ignored. Up to 2.31.0a it shifts its channels.
    const bool self = d->p2p.peer == cs->rank;
    if (self && cfg().self_p2p_shifts_channels) NCCLINSP_UNLIKELY
      note_shifted(*cs, d->p2p.nChannels);
    if (!cfg().filter.p2p) return abi::success;
    const bool no_kernel_events = self || no_kernel_events_now();
    const std::uint32_t idx = ops_.begin(*cs, parse_func(d->p2p.func), d->p2p.count, d->p2p.datatype,
                                         no_kernel_events ? 0 : d->p2p.nChannels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    if (no_kernel_events) cs->ops[idx].settle = filter_reason::no_kernel_events;
    cs->ops[idx].replay = is_captured(d->parentObj);
    r.peer = d->p2p.peer;
    r.seq = cs->p2p_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % cfg().proxy_sample == 0;
    r.alg = algo::none;
    r.pro = proto::none;
    if constexpr (requires { d->p2p.userTag; }) r.user_tag = d->p2p.userTag;
    if constexpr (requires { d->p2p.parentGroup; }) {
      if (cfg().kernel_ch_drops) note_plan(*cs, cs->ops[idx], d->p2p.parentGroup);
    }
    *handle = ops_.publish(*cs, idx);
    return abi::success;
  }

  /// A Group handle of its own (ABI 7): this thread's tag (gen field) and its plan count (comm and
  /// slot fields), never 0. Thread-local: nothing shared is written.
  static void* plan_handle() noexcept {
    thread_local std::uint64_t plans = 0;  // tag << 32 | plans started on this thread
    if (!plans) NCCLINSP_UNLIKELY
      plans = std::uint64_t(next_thread_tag()) << 32;
    ++plans;
    return as_handle(encode(handle_kind::auxiliary, std::uint32_t(plans >> 32), std::uint32_t(plans >> 16),
                            std::uint32_t(plans), aux_inert_group));
  }
  static std::uint32_t next_thread_tag() noexcept {
    static std::atomic<std::uint32_t> tags{0};
    return tags.fetch_add(1, std::memory_order_relaxed) % gen_mask + 1;
  }

  /// Gives an op that awaits KernelCh the key of its plan (comm_state::plan_order_enqueue), on the
  /// thread that starts it, before NCCL has its handle. Not numbered: ops that await no KernelCh or
  /// an unknown count, ops under no plan handle, and every op once plans came from two threads.
  static void note_plan(comm_state& cs, op_slot& s, const void* group) noexcept {
    plan_order_enqueue& po = cs.plans;
    const decoded g = decode(group);
    if (s.expected_ch == 0 || s.expected_ch > 64 || s.is_ce || s.settle != no_filter ||
        g.kind != handle_kind::auxiliary || (g.aux & aux_kind_mask) != aux_inert_group ||
        po.unordered.load(std::memory_order_relaxed))
      return;
    if (group != po.group.load(std::memory_order_relaxed)) {  // the plan's first op
      const std::uint32_t last = po.thread.load(std::memory_order_relaxed);
      if (last && last != g.gen) {
        po.unordered.store(true, std::memory_order_relaxed);
        return;
      }
      po.thread.store(g.gen, std::memory_order_relaxed);
      po.group.store(group, std::memory_order_relaxed);
      po.base.store(po.sum.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    po.sum.store(po.sum.load(std::memory_order_relaxed) + s.expected_ch, std::memory_order_relaxed);
    s.plan_key.store(po.base.load(std::memory_order_relaxed) << 8 | s.expected_ch, std::memory_order_relaxed);
  }

  /// Channels 0..nch-1 ran work the host does not count (comm_state::shifted_channels).
  static void note_shifted(comm_state& cs, unsigned nch) noexcept {
    const std::uint64_t m = nch >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << nch) - 1;
    if ((cs.shifted_channels.load(std::memory_order_relaxed) & m) != m)
      cs.shifted_channels.fetch_or(m, std::memory_order_relaxed);
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
    *handle = ops_.publish(*cs, idx);
    return abi::success;
  }

  const adapter_config& cfg() const noexcept { return ops_.config(); }

  comm_registry& reg_;
  op_lifecycle ops_;
  proxy_events proxy_;
  std::atomic<int*> mask_{nullptr};  // NCCL's activation mask (watch_mask)
};

}  // namespace ncclinsp::plugin
