#pragma once
/// The plugin's event adapter: NCCL's startEvent / stopEvent / recordEventState (profiler ABI
/// v4-v7) turned into op records for the collector. This is the hot path.
///
/// Rules kept here (NCCL's ext-profiler/README.md; the simulator reproduces them, sim/nccl_driver.hpp):
///  - Handles are tagged integers (handle.hpp): decoded, bounds- and generation-checked, or ignored.
///  - Coll/P2p stop means "enqueued"; an op completes when all its KernelCh channels stopped, so
///    the stop of an op with channels does nothing (its handle says so) unless traces are on.
///    NCCL (2.27, the first with ABI v4, through 2.32) ends a channel with recordEventState(22)
///    and stopEvent back to back on one thread (ncclProfilerStopKernelChEvent), so the record does
///    the channel's work and the stop returns on the handle's kind alone; with traces on, the stop
///    does it, since its own time is part of the trace. A stop without its record leaves the op in
///    flight until finalize counts it abandoned (test_plugin; re-check for a new ABI).
///    Duration = latest GPU channel stop - earliest GPU channel start (the span, not Inspector's
///    max-of-channels); channels are keyed by their real id, which need not start at 0.
///  - No throw crosses the C ABI; no I/O on NCCL's threads.
///  - Every event that looks up a communicator is seen by finalize (plugin_state.hpp), which
///    retires a communicator only once no event is still inside its state: KernelCh events mark
///    their op slot (channel_hold: no TLS read per channel callback), the others run inside a
///    reader_gate section. A communicator's state is never freed, only reused (type-stable).
/// Hot path (Coll, P2p, KernelCh): no lock, no allocation, a few relaxed atomics on the op's own
/// slot. Events of the types we do not follow return before the reader section.
/// Proxy accounting (NCCLINSP_PROXY=1, off by default): for 1 op in NCCLINSP_PROXY_SAMPLE (by
/// sequence number, so every rank samples the same ops) the ProxyOps get a handle; the others get
/// NULL, so NCCL emits no steps for them. Each step's state transitions are timed on the proxy
/// thread (CLOCK_MONOTONIC) into the communicator's proxy_table, from a fixed step pool.
/// Over ~350 lines: one class whose members are the callbacks of one ABI, kept together.

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "ncclinsp/abi/nccl_profiler.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/reader_gate.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/handle.hpp"

namespace ncclinsp::plugin {

using abi::result_t;

// Clocks (detail/clock.hpp): coarse_ns for in-flight ages, precise_ns (CLOCK_MONOTONIC) for CPU spans.
using detail::clock_ns;
using detail::coarse_ns;
inline std::uint64_t precise_ns() noexcept { return detail::steady_ns(); }

/// The callbacks' state: what the events read (env_options, collector, communicator table, reader
/// gate). plugin_state (plugin_state.hpp) derives from it and fills it at init.
class event_adapter {
 public:
  // ---- events (hot) ----------------------------------------------------------------------------
  // The callbacks' fast paths make no call that returns into them (rare work is a tail call to an
  // out-of-line function), so they save no registers.
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
    // Types that get no handle (the API and Group ancestors NCCL emits anyway, types a RAS mask
    // override enables, KernelPhase) return before the reader section: nothing is looked up.
    if (!(type &
          (abi::ev_kernel_ch | abi::ev_coll | abi::ev_p2p | abi::ev_proxy_step | abi::ev_proxy_op | abi::ev_ce_coll)))
      return abi::success;
    if (type == abi::ev_kernel_ch) {
      const std::uint64_t t = d->kernelCh.pTimer;
      return t && !traced_ ? start_channel<false>(handle, d->parentObj, d->kernelCh.channelId, t)
                           : start_channel<true>(handle, d->parentObj, d->kernelCh.channelId, t);
    }
    return start_task(context, handle, d);
  }

  /// startEvent of the types that look up a communicator through the reader gate.
  template <class Descr>
  NCCLINSP_OUTLINE result_t start_task(void* context, void** handle, const Descr* d) noexcept {
    const std::uint64_t type = d->type;
    const auto in = gate_.enter();
    if (type == abi::ev_coll) return start_coll(context, handle, d);
    if (type == abi::ev_p2p) return start_p2p(context, handle, d);
    if (type == abi::ev_proxy_step) return start_step(handle, d->parentObj);
    if (type == abi::ev_proxy_op)
      return start_proxy_op(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.peer, d->proxyOp.isSend != 0);
    if constexpr (requires { d->ceColl; }) {
      if (type == abi::ev_ce_coll) return start_ce(context, handle, d);
    }
    // Everything else (ancestors NCCL emits anyway, ProxyOp incl. foreign-pid PXN ops, types a RAS
    // mask override enables, KernelPhase): no handle, nothing dereferenced.
    return abi::success;
  }

  NCCLINSP_INLINE result_t stop_event(void* handle) noexcept {
    const handle_kind kind = kind_of(handle);
    // Nothing to do: a KernelCh stop (its record(22) ended the channel), or the stop of an op its
    // channels complete (aux_ends_at_channels; set only without traces).
    if (kind == handle_kind::none || (kind == handle_kind::channel && !traced_) ||
        (kind == handle_kind::op && (aux_of(handle) & aux_ends_at_channels)))
      return abi::success;
    return kind == handle_kind::channel ? stop_channel(decode(handle)) : stop_task(decode(handle));
  }

  /// stopEvent of an op (Coll, P2p, CE: enqueued) or of a group handle (ProxyStep, inert).
  NCCLINSP_OUTLINE result_t stop_task(const decoded k) noexcept {
    const auto in = gate_.enter();
    if (k.kind == handle_kind::group)
      return (k.channel & aux_kind_mask) == aux_proxy_step ? stop_step(k) : abi::success;
    if (k.kind != handle_kind::op) return abi::success;
    comm_state* cs = nullptr;
    op_slot* op = find_op(k, cs);
    if (!op) return abi::success;  // stale or already released
    op_slot& s = *op;
    // Here: an op without channels (CE, nChannels 0), which this stop completes, or, with traces
    // on, an op with channels whose stop time is traced. Either way this stop holds a reference
    // (begin_op). Without traces an op with channels never comes here: its handle says so
    // (aux_ends_at_channels) and stop_event returns at once, so the stop touches no slot that the
    // channel side may free and another thread take again meanwhile (a graph replay's CUDA
    // host-callback thread and the user thread both take slots of one communicator).
    // Only a forged handle (the flag cleared) gets here for such an op: it holds no reference.
    if (!traced_ && !s.is_ce && s.expected_ch != 0) return abi::success;
    // Stopped twice: one reference only. NCCL stops an op from one thread, so no locked RMW here.
    if (s.enq_stopped.load(std::memory_order_relaxed)) return abi::success;
    s.enq_stopped.store(true, std::memory_order_relaxed);
    if (cs->traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs->traces[k.slot];
      tr.stop_cpu_ns.store(clock_ns(CLOCK_REALTIME), std::memory_order_relaxed);
      tr.stop_sn.store(tr.next_sn(), std::memory_order_release);
    }
    if (s.is_ce || s.expected_ch == 0) complete(*cs, s, /*enqueue_only=*/true);
    drop_ref(*cs, k.slot, s);
    return abi::success;
  }

  NCCLINSP_INLINE result_t record_state(void* handle, int state, const abi::state_args* args) noexcept {
    if (state != abi::st_kernel_ch_stop) return record_proxy_state(handle, state, args);
    const std::uint64_t t = args ? args->kernelCh.pTimer : 0;
    if (!t || traced_) NCCLINSP_UNLIKELY
      return record_channel_rare(handle, t);
    const decoded k = decode(handle);
    if (k.kind != handle_kind::channel) return abi::success;
    channel_hold in(*this, k);
    op_slot* s = in.op();
    if (!s) return abi::success;
    relaxed_max(s->gpu_hi, t);
    // end_channel, with its calls as tail calls that take the hold over.
    if (s->gpu_missing.load(std::memory_order_relaxed)) NCCLINSP_UNLIKELY
      return end_channel_and_leave(*in.comm(), *s, k.slot, in.hand_over());
    if (count_channel(*s)) return finish_and_leave(*in.comm(), *s, k.slot, in.hand_over());
    return abi::success;
  }

 protected:
  event_adapter() = default;

  comm_state* live_comm(std::uint32_t idx) const noexcept {
    // seq_cst (a plain load on x86): ordered after this thread's reader_gate mark, see finalize.
    return idx < max_plugin_comms ? comms_[idx].load(std::memory_order_seq_cst) : nullptr;
  }
  /// The live op a decoded handle names, or nullptr (unknown comm, out of range, stale generation).
  NCCLINSP_INLINE op_slot* find_op(const decoded& k, comm_state*& cs) const noexcept {
    cs = live_comm(k.comm);
    if (!cs || k.slot >= cs->ops.size()) return nullptr;
    op_slot& s = cs->ops[k.slot];
    return handle_gen(s.gen.load(std::memory_order_acquire)) == k.gen ? &s : nullptr;
  }

  comm_state* comm_from_context(void* context) const noexcept {
    const decoded k = decode(context);
    if (k.kind != handle_kind::op || k.slot != context_slot) return nullptr;
    comm_state* cs = live_comm(k.comm);
    return cs && handle_gen(cs->gen) == k.gen ? cs : nullptr;
  }

  /// A KernelCh event's hold on the op its handle names, without the reader gate (no TLS read per
  /// channel callback): the mark is the op slot's own ch_inside, which finalize scans after its
  /// quiesce (plugin_state::finalize), as it scans the threads' gate marks.
  /// Why a stale pointer is safe: comm_state memory is type-stable. finalize never frees a
  /// communicator's state; it parks it for the next init (plugin_state::spare_), which recycles
  /// it, moving every op slot to its next generation. So `cs` loaded here always points to a
  /// comm_state (maybe finalized, maybe another communicator's by now), and bounds come from its
  /// own constant table size. ABA: the communicator index in a handle may name a reused
  /// comm_state, even the same object again; what decides is the op slot's generation, which only
  /// grows (completion and recycling both bump it, never reset), so a handle of an earlier op or an
  /// earlier communicator never matches (up to the 22-bit wrap, as for any stale handle). Order:
  /// mark, then re-read the published pointer and the generation. The reclaimer unpublishes, runs
  /// membarrier (reader_gate::quiesce), then scans the marks: either it sees this mark and waits
  /// for the release below, or this thread's re-read comes after the unpublish and fails. The
  /// re-read of the pointer is seq_cst and pairs with init's release publication, so the second
  /// generation load sees recycle()'s bump when the object was reused at the same index.
  /// A stale handle is rejected by generation before it marks, so the mark keeps one writer: the
  /// thread that delivers the live op's channel events (see relaxed_min below).
  class channel_hold {
   public:
    NCCLINSP_INLINE channel_hold(const event_adapter& a, const decoded& k) noexcept {
      comm_state* cs = k.comm < max_plugin_comms ? a.comms_[k.comm].load(std::memory_order_acquire) : nullptr;
      if (!cs || k.slot >= cs->ops.size()) return;
      op_slot& s = cs->ops[k.slot];
      if (handle_gen(s.gen.load(std::memory_order_relaxed)) != k.gen) return;
      const std::uint32_t m = s.ch_inside.load(std::memory_order_relaxed) + 1;  // odd: inside
      if (a.gate_.expedited()) NCCLINSP_LIKELY {
        s.ch_inside.store(m, std::memory_order_relaxed);  // ordered by finalize's membarrier
        std::atomic_signal_fence(std::memory_order_seq_cst);
      } else {
        s.ch_inside.exchange(m, std::memory_order_seq_cst);
      }
      if (a.comms_[k.comm].load(std::memory_order_seq_cst) != cs ||
          handle_gen(s.gen.load(std::memory_order_acquire)) != k.gen) {
        s.ch_inside.store(m + 1, std::memory_order_release);
        return;
      }
      s_ = &s;
      cs_ = cs;
      mark_ = m;
    }
    ~channel_hold() {
      if (s_) leave(*s_, mark_);
    }
    channel_hold(const channel_hold&) = delete;
    channel_hold& operator=(const channel_hold&) = delete;
    op_slot* op() const noexcept { return s_; }
    comm_state* comm() const noexcept { return cs_; }
    /// The mark, for a callee to leave the op with (leave()); this hold then leaves nothing.
    std::uint32_t hand_over() noexcept {
      s_ = nullptr;
      return mark_;
    }
    static void leave(op_slot& s, std::uint32_t mark) noexcept {
      s.ch_inside.store(mark + 1, std::memory_order_release);  // even: left
    }

   private:
    op_slot* s_ = nullptr;
    comm_state* cs_ = nullptr;
    std::uint32_t mark_ = 0;
  };

  // Threading assumption of the channel path (NCCL up to 2.30: KernelCh events come from the proxy
  // thread, profilerProxyProgress; since 2.31 KernelCh start/record/stop arrive on the
  // communicator's profiler thread): every KernelCh callback of one op comes from
  // the one thread that progresses its communicator (one proxy/profiler thread per communicator,
  // shared by shareResources children, so still one per op). Hence the channel fields of op_slot
  // (gpu/cpu min/max, ch_stopped) have a single writer and are plain load+store: no locked
  // instruction per channel. The slot's reset in begin_op happens before NCCL hands the op to that
  // thread (NCCL's own queue orders it); the Coll stop on the user thread reads none of them.
  static void relaxed_min(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    const std::uint64_t cur = a.load(std::memory_order_relaxed);
    if (cur == 0 || v < cur) a.store(v, std::memory_order_relaxed);
  }
  static void relaxed_max(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
  }

  /// Takes a slot and fills the common fields; returns the slot index, or no_index (the pool is full, or the op was filtered).
  std::uint32_t begin_op(comm_state& cs, func f, std::uint64_t count, const char* dtype_name, std::uint32_t channels,
                         bool ce) noexcept {
    op_record rec;  // only its size fields are used before the slot is taken (registers, not a copy)
    rec.fn = f;
    set_size(rec, count, parse_dtype(dtype_name));
    if (rec.bytes_valid && rec.bytes < opts_.min_size_bytes) {
      col_->note_filtered(cs.handle, filter_reason::min_size);
      return no_index;
    }
    const std::uint32_t idx = cs.ops.alloc();
    if (idx == no_index) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs.handle, drop_reason::op_pool_full);
      return no_index;
    }
    op_slot& s = cs.ops[idx];
    // Constructed in place, then field by field: a whole-struct copy from the stack stalled on
    // store forwarding (narrow stores read back as 16-byte loads), ~20% of begin_op in perf.
    ::new (static_cast<void*>(&s.rec)) op_record();
    s.rec.fn = f;
    s.rec.count = rec.count;
    s.rec.dt = rec.dt;
    s.rec.bytes = rec.bytes;
    s.rec.bytes_valid = rec.bytes_valid;
    s.rec.channels = static_cast<std::uint16_t>(channels);
    s.expected_ch = channels;
    s.is_ce = ce;
    s.proxy_sampled = false;
    s.ch_stopped.store(0, std::memory_order_relaxed);
    s.gpu_lo.store(0, std::memory_order_relaxed);
    s.gpu_hi.store(0, std::memory_order_relaxed);
    s.cpu_lo.store(0, std::memory_order_relaxed);
    s.cpu_hi.store(0, std::memory_order_relaxed);
    s.gpu_missing.store(false, std::memory_order_relaxed);
    s.enq_stopped.store(false, std::memory_order_relaxed);
    // References: the channel side (the last channel completes the op), and the op's stop when it
    // completes the op (no channels) or, with traces, records its time (see stop_task).
    s.refs.store(channels && !ce && traced_ ? 2 : 1, std::memory_order_relaxed);
    if (cs.traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs.traces[idx];
      tr.t.n_channels = 0;
      tr.t.start_sn = 1;
      tr.t.start_cpu_ns = clock_ns(CLOCK_REALTIME);
      tr.entry_of.fill(0);
      tr.stop_sn.store(0, std::memory_order_relaxed);
      tr.stop_cpu_ns.store(0, std::memory_order_relaxed);
      tr.last_sn.store(1, std::memory_order_relaxed);
    }
    s.started_at.store(coarse_ns(), std::memory_order_release);
    col_->note_started(cs.handle);
    return idx;
  }

  void* op_handle(const comm_state& cs, std::uint32_t idx) noexcept {
    const op_slot& s = cs.ops[idx];
    const std::uint32_t aux = !traced_ && s.expected_ch && !s.is_ce ? aux_ends_at_channels : 0;
    return as_handle(encode(handle_kind::op, s.gen.load(std::memory_order_relaxed), cs.handle, idx, aux));
  }

  template <class Descr>
  result_t start_coll(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const func f = parse_func(d->coll.func);
    const std::uint32_t idx = begin_op(*cs, f, d->coll.count, d->coll.datatype, d->coll.nChannels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    r.seq = d->coll.seqNumber;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % opts_.proxy_sample == 0;  // same ops on every rank
    r.alg = d->coll.algo ? parse_algo(d->coll.algo) : algo::unknown;
    r.pro = d->coll.proto ? parse_proto(d->coll.proto) : proto::unknown;
    if constexpr (requires { d->coll.userTag; }) {
      r.user_tag = d->coll.userTag;
      if (d->coll.isSymColl) {
        r.alg = algo::sym;
        r.pro = proto::none;
      }
    }
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_p2p(void* context, void** handle, const Descr* d) noexcept {
    if (!opts_.enable_p2p) return abi::success;
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const func f = parse_func(d->p2p.func);
    const std::uint32_t idx = begin_op(*cs, f, d->p2p.count, d->p2p.datatype, d->p2p.nChannels, false);
    if (idx == no_index) return abi::success;
    op_record& r = cs->ops[idx].rec;
    r.peer = d->p2p.peer;
    r.seq = cs->p2p_seq.fetch_add(1, std::memory_order_relaxed) + 1;
    cs->ops[idx].proxy_sampled = cs->proxy && r.seq % opts_.proxy_sample == 0;
    r.alg = algo::none;
    r.pro = proto::none;
    if constexpr (requires { d->p2p.userTag; }) r.user_tag = d->p2p.userTag;
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  template <class Descr>
  result_t start_ce(void* context, void** handle, const Descr* d) noexcept {
    comm_state* cs = comm_from_context(context);
    if (!cs) return abi::success;
    const std::uint32_t idx = begin_op(*cs, parse_func(d->ceColl.func), d->ceColl.count, d->ceColl.datatype, 0, true);
    if (idx == no_index) return abi::success;
    op_slot& s = cs->ops[idx];
    s.rec.seq = d->ceColl.seqNumber;
    s.rec.alg = algo::none;
    s.rec.pro = proto::none;
    if constexpr (requires { d->ceColl.userTag; }) s.rec.user_tag = d->ceColl.userTag;
    s.cpu_lo.store(precise_ns(), std::memory_order_relaxed);
    *handle = op_handle(*cs, idx);
    return abi::success;
  }

  /// KernelCh start. Rare: no GPU timer (proxy CPU time instead) or traces on; out of line either way.
  template <bool Rare>
  NCCLINSP_OUTLINE result_t start_channel(void** handle, void* parent, std::uint8_t channel,
                                          std::uint64_t gpu_start) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return abi::success;
    const channel_hold in(*this, k);
    op_slot* s = in.op();
    if (!s) return abi::success;
    if (gpu_start) relaxed_min(s->gpu_lo, gpu_start);
    if constexpr (Rare) {
      if (!gpu_start) note_cpu_start(*s);
      if (in.comm()->traces) trace_channel_start(*in.comm(), k, channel, gpu_start);
    }
    *handle = as_handle(encode(handle_kind::channel, k.gen, k.comm, k.slot, channel));
    return abi::success;
  }

  /// recordEventState(22) without a GPU timer, or with traces on.
  NCCLINSP_OUTLINE result_t record_channel_rare(void* handle, std::uint64_t t) noexcept {
    const decoded k = decode(handle);
    if (k.kind != handle_kind::channel) return abi::success;
    const channel_hold in(*this, k);
    op_slot* s = in.op();
    if (!s) return abi::success;
    if (t)
      relaxed_max(s->gpu_hi, t);
    else
      s->gpu_missing.store(true, std::memory_order_relaxed);
    if (traced_) {
      if (in.comm()->traces) trace_channel_record(*in.comm(), k, t);
      return abi::success;  // the stop that follows ends the channel (stop_channel)
    }
    end_channel(*in.comm(), *s, k.slot);
    return abi::success;
  }

  /// KernelCh stop with traces on (otherwise its record(22) ended the channel).
  NCCLINSP_OUTLINE result_t stop_channel(const decoded k) noexcept {
    const channel_hold in(*this, k);
    if (!in.op()) return abi::success;
    if (in.comm()->traces) trace_channel_stop(*in.comm(), k);
    end_channel(*in.comm(), *in.op(), k.slot);
    return abi::success;
  }

  /// One channel of the op ended: counted; the last one completes the op. Inside a channel_hold.
  NCCLINSP_INLINE void end_channel(comm_state& cs, op_slot& s, std::uint32_t slot) noexcept {
    if (s.gpu_missing.load(std::memory_order_relaxed)) note_cpu_stop(s);
    if (count_channel(s)) finish(cs, s, slot);
  }
  /// Counts an ended channel; true for the last one, which completes the op (exactly once).
  /// Single writer: every KernelCh event of one op comes from one thread (see relaxed_min), so the
  /// count is a plain load+store on the op's own line, not a locked RMW. The enqueue side (the op's
  /// stop, another thread) never touches ch_stopped; with traces the two sides meet in refs.
  NCCLINSP_INLINE static bool count_channel(op_slot& s) noexcept {
    const std::uint32_t stopped = s.ch_stopped.load(std::memory_order_relaxed) + 1;
    s.ch_stopped.store(stopped, std::memory_order_relaxed);
    return stopped == s.expected_ch;
  }

  // Out of line, so that the channel callbacks above stay short (no spills): what they do rarely.
  // Each runs inside the caller's channel_hold.
  NCCLINSP_OUTLINE static void note_cpu_start(op_slot& s) noexcept {  // no GPU timer: proxy CPU time
    s.gpu_missing.store(true, std::memory_order_relaxed);
    relaxed_min(s.cpu_lo, precise_ns());
  }
  NCCLINSP_OUTLINE static void note_cpu_stop(op_slot& s) noexcept { relaxed_max(s.cpu_hi, precise_ns()); }
  NCCLINSP_OUTLINE void finish(comm_state& cs, op_slot& s, std::uint32_t slot) noexcept {  // the last channel stopped
    complete(cs, s, /*enqueue_only=*/false);
    drop_ref(cs, slot, s);
  }
  // The same, then leaving the op (the caller's channel_hold was handed over): tail-callable.
  NCCLINSP_OUTLINE result_t finish_and_leave(comm_state& cs, op_slot& s, std::uint32_t slot,
                                             std::uint32_t mark) noexcept {
    finish(cs, s, slot);
    channel_hold::leave(s, mark);
    return abi::success;
  }
  NCCLINSP_OUTLINE result_t end_channel_and_leave(comm_state& cs, op_slot& s, std::uint32_t slot,
                                                  std::uint32_t mark) noexcept {
    end_channel(cs, s, slot);
    channel_hold::leave(s, mark);
    return abi::success;
  }
  NCCLINSP_COLD static void trace_channel_start(comm_state& cs, const decoded& k, std::uint8_t channel,
                                                std::uint64_t gpu_start) noexcept {
    traced_op& tr = cs.traces[k.slot];
    if (!tr.entry_of[channel] && tr.t.n_channels < max_traced_channels) {
      tr.entry_of[channel] = static_cast<std::uint8_t>(tr.t.n_channels + 1);
      tr.t.channels[tr.t.n_channels++] = {.start_cpu_ns = clock_ns(CLOCK_REALTIME),
                                          .gpu_start_ns = gpu_start,
                                          .start_sn = tr.next_sn(),
                                          .channel = channel};
    }
  }
  NCCLINSP_COLD static void trace_channel_record(comm_state& cs, const decoded& k, std::uint64_t gpu_stop) noexcept {
    traced_op& tr = cs.traces[k.slot];
    if (channel_trace* c = tr.channel(k.channel)) {
      c->record_sn = tr.next_sn();
      c->record_cpu_ns = clock_ns(CLOCK_REALTIME);
      c->gpu_stop_ns = gpu_stop;
    }
  }
  NCCLINSP_COLD static void trace_channel_stop(comm_state& cs, const decoded& k) noexcept {
    traced_op& tr = cs.traces[k.slot];
    if (channel_trace* c = tr.channel(k.channel)) {
      c->stop_sn = tr.next_sn();
      c->stop_cpu_ns = clock_ns(CLOCK_REALTIME);
    }
  }

  // ---- proxy accounting (proxy thread) ---------------------------------------------------------

  /// ProxyOp of a sampled op of ours: a handle naming the (peer, direction) entry; NULL otherwise
  /// (unsampled, PXN op of another process, proxy accounting off), so NCCL emits no steps for it.
  result_t start_proxy_op(void** handle, void* parent, pid_t pid, int peer, bool send) noexcept {
    if (pid != pid_) return abi::success;  // PXN: parent and context belong to another process
    const decoded k = decode(parent);
    if (k.kind != handle_kind::op) return abi::success;
    comm_state* cs = nullptr;
    op_slot* s = find_op(k, cs);
    if (!s || !s->proxy_sampled || !cs->proxy) return abi::success;
    const std::uint32_t e = cs->proxy->entry(peer, send);
    if (e == no_index) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs->handle, drop_reason::table_full);
      return abi::success;
    }
    *handle = as_handle(encode(handle_kind::group, cs->gen, cs->handle, e, aux_proxy_op | (send ? aux_send : 0)));
    return abi::success;
  }

  result_t start_step(void** handle, void* parent) noexcept {
    const decoded k = decode(parent);
    if (k.kind != handle_kind::group || (k.channel & aux_kind_mask) != aux_proxy_op) return abi::success;
    comm_state* cs = live_comm(k.comm);
    if (!cs || handle_gen(cs->gen) != k.gen || !cs->proxy || k.slot >= proxy_table::capacity) return abi::success;
    const std::uint32_t idx = cs->step_free.alloc();
    if (idx == no_index) NCCLINSP_UNLIKELY {
      col_->note_dropped(cs->handle, drop_reason::table_full);
      return abi::success;
    }
    proxy_step_slot& st = cs->steps[idx];
    st.entry = k.slot;
    st.wait = no_wait;
    st.since_ns = 0;
    st.bytes = 0;
    *handle =
        as_handle(encode(handle_kind::group, st.gen.load(std::memory_order_relaxed), cs->handle, idx, aux_proxy_step));
    return abi::success;
  }

  /// The step slot a decoded ProxyStep handle names, or nullptr (stale, stopped, foreign, garbage).
  proxy_step_slot* find_step(const decoded& k, comm_state*& cs) const noexcept {
    if (k.kind != handle_kind::group || (k.channel & aux_kind_mask) != aux_proxy_step) return nullptr;
    cs = live_comm(k.comm);
    if (!cs || k.slot >= cs->step_count || !cs->proxy) return nullptr;
    proxy_step_slot& st = cs->steps[k.slot];
    return handle_gen(st.gen.load(std::memory_order_acquire)) == k.gen ? &st : nullptr;
  }

  /// recordEventState for anything but KernelChStop: ProxyStep transitions, or ignored.
  NCCLINSP_OUTLINE result_t record_proxy_state(void* handle, int state, const abi::state_args* args) noexcept {
    proxy_wait w;
    if (!proxy_wait_of(state, w)) return abi::success;
    const auto in = gate_.enter();
    return record_step(handle, w, args);
  }

  /// A transition: the time since the previous one goes to the previous state.
  result_t record_step(void* handle, proxy_wait w, const abi::state_args* args) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(decode(handle), cs);
    if (!st) return abi::success;
    const std::uint64_t now = precise_ns();
    if (st->wait != no_wait && now > st->since_ns)
      cs->proxy->add_wait(st->entry, static_cast<proxy_wait>(st->wait), now - st->since_ns);
    st->wait = static_cast<std::uint8_t>(w);
    st->since_ns = now;
    if (args) st->bytes = args->proxyStep.transSize;
    return abi::success;
  }

  result_t stop_step(const decoded& k) noexcept {
    comm_state* cs = nullptr;
    proxy_step_slot* st = find_step(k, cs);
    if (!st) return abi::success;
    const std::uint64_t now = precise_ns();
    if (st->wait != no_wait && now > st->since_ns)
      cs->proxy->add_wait(st->entry, static_cast<proxy_wait>(st->wait), now - st->since_ns);
    cs->proxy->add_step(st->entry, st->bytes);
    // One proxy thread starts and stops a communicator's steps: a plain generation bump.
    st->gen.store(st->gen.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    cs->step_free.release(k.slot);
    return abi::success;
  }

  /// Builds the record from the channel timestamps and hands it to the collector.
  void complete(comm_state& cs, op_slot& s, bool enqueue_only) noexcept {
    op_record r = s.rec;
    const std::uint64_t glo = s.gpu_lo.load(std::memory_order_relaxed), ghi = s.gpu_hi.load(std::memory_order_relaxed);
    if (!enqueue_only && !s.gpu_missing.load(std::memory_order_relaxed) && glo && ghi > glo) {
      r.timing = timing_source::kernel_gpu;
      r.start_ns = glo;
      r.end_ns = ghi;
    } else if (!enqueue_only && s.cpu_lo.load(std::memory_order_relaxed)) {
      r.timing = timing_source::kernel_cpu;  // proxy-observed channel times
      r.start_ns = s.cpu_lo.load(std::memory_order_relaxed);
      r.end_ns = s.cpu_hi.load(std::memory_order_relaxed);
    } else {
      r.timing = timing_source::collective_cpu;  // CE ops, ops without channels: enqueue span only
      r.start_ns = s.cpu_lo.load(std::memory_order_relaxed);
      r.end_ns = precise_ns();
      if (!r.start_ns) r.start_ns = r.end_ns;
    }
    s.started_at.store(0, std::memory_order_relaxed);
    if (r.timing != timing_source::kernel_gpu && opts_.require_kernel_timing && !s.is_ce)
      col_->note_filtered(cs.handle, filter_reason::no_gpu_timing);
    else if (cs.traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs.traces[cs.ops.index_of(s)];
      tr.t.stop_sn = tr.stop_sn.load(std::memory_order_acquire);  // 0: the op's stop came later
      tr.t.stop_cpu_ns = tr.stop_cpu_ns.load(std::memory_order_relaxed);
      col_->record(cs.handle, r, &tr.t);
    } else {
      col_->record(cs.handle, r);
    }
  }

  void drop_ref(comm_state& cs, std::uint32_t idx, op_slot& s) noexcept {
    // refs only decrease after begin_op; reading 1 (acquire, pairs with the other holder's acq_rel
    // decrement) means we hold the last reference: skip the locked RMW (always without traces,
    // where an op has one holder; with traces, when the op's stop came first). begin_op resets refs.
    if (s.refs.load(std::memory_order_acquire) == 1 || s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
      cs.ops.release(idx);
  }

  env_options opts_;
  std::unique_ptr<collector<>> col_;
  std::unique_ptr<std::atomic<comm_state*>[]> comms_ = std::make_unique<std::atomic<comm_state*>[]>(max_plugin_comms);
  pid_t pid_ = 0;             // ours: ProxyOps with another pid are PXN ops of another process
  bool traced_ = false;       // record_traces: KernelCh stops end channels, op stops hold a reference
  detail::reader_gate gate_;  // events inside a communicator's state (see plugin_state::finalize)
};

}  // namespace ncclinsp::plugin
