#pragma once
/// An op's life in its in-flight slot, for the event adapter (event_adapter.hpp): taken at its
/// start (filtered by size, counted as started), built into an op_record at completion (the timing
/// source chosen from what arrived) and handed to the collector, freed by its last reference.
/// Also the adapter's configuration (adapter_config), which plugin_state fills from env_options.
/// Thread-safety: begin on the enqueuing thread; complete and release on the completing thread
/// (the op's channel thread, or the enqueuing thread for an op without channels). Hot: no lock,
/// no allocation.
///
/// Design. A slot is constructed in place, then written field by field: a whole op_record copied
/// from the stack stalled on store forwarding (narrow stores read back as 16-byte loads), about 20%
/// of begin in perf.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <new>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/no_index.hpp"
#include "ncclinsp/op_filter.hpp"
#include "ncclinsp/plugin/comm_state.hpp"
#include "ncclinsp/plugin/handle.hpp"

namespace ncclinsp::plugin {

/// What the adapter needs of the configuration (plugin_state fills it from env_options).
struct adapter_config {
  op_filter filter{};                  ///< the size threshold and Send/Recv, as in embedded mode (op_filter.hpp)
  std::uint32_t proxy_sample = 1;      ///< 1 op in N gets proxy accounting (where the comm has a proxy table)
  bool require_kernel_timing = false;  ///< ops without GPU timing are filtered (CE ops exempt)
  bool traces = false;                 ///< per-callback traces (verbose JSON, trace sink)
  pid_t pid = 0;                       ///< this process (ProxyOps of another pid are PXN ops)
  /// NCCL up to 2.31.0a0 (ABI <= 6) can stop a KernelCh on a stale kernelEventHandle: each channel
  /// of an op is then ended once only (a per-op bitmask; 2.31.2 guards it, so v7 skips the check).
  bool stale_channel_stops = true;
  /// NCCL up to 2.31.0a (ABI <= 6): Send/Recv to the rank itself shifts the work counter of its
  /// channels for good (comm_state::shifted_channels); 2.31.2 counts it on the host too.
  bool self_p2p_shifts_channels = true;
  /// NCCL 2.31.2+ (ABI 7): the profiler thread drops the KernelCh of an op it cannot allocate; ops
  /// whose KernelCh a later plan's overtake are settled (comm_state::plan_order_enqueue).
  bool kernel_ch_drops = false;
};

// An op's channel fields have one writer (its channel thread): load+store, 0 = unset.
inline void relaxed_min(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  if (const std::uint64_t cur = a.load(std::memory_order_relaxed); cur == 0 || v < cur)
    a.store(v, std::memory_order_relaxed);
}
inline void relaxed_max(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
}

/// How much longer than its host-observed life an op's GPU span may be before it is rejected: the
/// coarse clock's grain (a few ms), GPU and host clock rates, and the simulator's compressed time.
inline constexpr std::uint64_t max_clock_grain_ns = 1'000'000'000;

/// Begins, builds and frees the ops of every communicator (one per adapter).
class op_lifecycle {
 public:
  op_lifecycle(collector<>& col, const adapter_config& cfg) noexcept : col_(col), cfg_(cfg) {}
  const adapter_config& config() const noexcept { return cfg_; }

  /// Takes a slot and fills the common fields; returns its index, or no_index (pool full, filtered).
  std::uint32_t begin(comm_state& cs, func f, std::uint64_t count, const char* dtype_name, std::uint32_t channels,
                      bool ce) noexcept {
    op_record rec;  // only its size fields are used before the slot is taken (registers, not a copy)
    rec.fn = f;
    set_size(rec, count, parse_dtype(dtype_name));
    if (cfg_.filter.too_small(rec.bytes_valid, rec.bytes)) {
      col_.note_filtered(cs.handle, filter_reason::min_size);
      return no_index;
    }
    const std::uint32_t idx = cs.ops.alloc();
    if (idx == no_index) NCCLINSP_UNLIKELY {
      col_.note_dropped(cs.handle, drop_reason::op_pool_full);
      return no_index;
    }
    op_slot& s = cs.ops[idx];
    ::new (static_cast<void*>(&s.rec)) op_record();  // in place, then field by field (see Design)
    s.rec.fn = f;
    s.rec.count = rec.count;
    s.rec.dt = rec.dt;
    s.rec.bytes = rec.bytes;
    s.rec.bytes_valid = rec.bytes_valid;
    s.rec.channels = static_cast<std::uint16_t>(channels == unknown_channels ? 0 : channels);
    s.expected_ch = channels;
    s.is_ce = ce;
    s.proxy_sampled = false;
    s.ch_stopped.store(0, std::memory_order_relaxed);
    for (auto* t : {&s.gpu_lo, &s.gpu_hi, &s.cpu_lo, &s.cpu_hi}) t->store(0, std::memory_order_relaxed);
    s.gpu_missing.store(false, std::memory_order_relaxed);
    s.enq_stopped.store(false, std::memory_order_relaxed);
    s.ch_started.store(0, std::memory_order_relaxed);
    for (auto* t : {&s.ch_seen, &s.ch_stop_seen, &s.ch_begun, &s.ch_ended}) t->store(0, std::memory_order_relaxed);
    s.ts_reject.store(no_filter, std::memory_order_relaxed);
    s.plan_key.store(0, std::memory_order_relaxed);
    s.settle = no_filter;
    s.replay = false;
    // References: the channel side (the last channel completes the op), and the op's stop when it
    // completes the op (no channels) or, with traces, records its time (event_adapter::stop_slow).
    s.refs.store(channels && !ce && cfg_.traces ? 2 : 1, std::memory_order_relaxed);
    if (cs.traces) NCCLINSP_UNLIKELY
      cs.traces[idx].op_started();
    s.started_at.store(detail::coarse_ns(), std::memory_order_release);
    col_.note_started(cs.handle);
    return idx;
  }

  /// The op in slot `idx` is started and its record filled: its identity becomes readable by the
  /// state dump (seq, function, channels, size, peer: two plain stores into the slot), and this is
  /// the handle NCCL gets for it.
  void* publish(comm_state& cs, std::uint32_t idx) const noexcept {
    op_slot& s = cs.ops[idx];
    const op_record& r = s.rec;
    s.ident.store(op_ident::pack_id(r.seq, r.fn, r.channels, s.gen.load(std::memory_order_relaxed)),
                  std::memory_order_relaxed);
    s.ident_xfer.store(op_ident::pack_xfer(r.bytes, r.bytes_valid, r.peer), std::memory_order_relaxed);
    const std::uint32_t aux = !cfg_.traces && s.expected_ch && !s.is_ce ? aux_ends_at_channels : 0;
    return as_handle(encode(handle_kind::op, s.gen.load(std::memory_order_relaxed), cs.handle, idx, aux));
  }

  /// Builds the record from the channel timestamps and hands it to the collector. Never published
  /// as GPU-timed, counted by why instead: KernelCh that cannot come (settle), KernelCh timestamps
  /// that cannot be the op's (ts_reject), a span that is the host enqueue only (copy-engine
  /// collectives, ops without channels: enqueue_only), no GPU timestamps (no_gpu_timing).
  /// Either way the op goes into its communicator's history (op_history) for the state dump.
  NCCLINSP_OUTLINE void complete(comm_state& cs, op_slot& s, bool enqueue_only) noexcept {
    const std::uint64_t began = s.started_at.load(std::memory_order_relaxed);
    s.started_at.store(0, std::memory_order_relaxed);
    const std::uint64_t now = detail::coarse_ns();
    const std::uint64_t gpu_ns = publish_record(cs, s, enqueue_only, began, now);
    cs.history.note(enqueue_only ? op_history::at_stop : op_history::by_channels,
                    s.ident.load(std::memory_order_relaxed), s.ident_xfer.load(std::memory_order_relaxed), s.rec.seq,
                    s.rec.fn, began, now, gpu_ns);
  }

  /// Lets go of one reference; the last one frees the slot.
  static void release(comm_state& cs, std::uint32_t idx, op_slot& s) noexcept {
    // refs only decrease after begin; reading 1 (acquire, pairs with the other holder's acq_rel
    // decrement) means this is the last reference: no locked RMW (always without traces, where an
    // op has one holder; with traces, when the op's stop came first).
    if (s.refs.load(std::memory_order_acquire) == 1 || s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1)
      cs.ops.release(idx);
  }

 private:
  /// complete()'s record: built and handed to the collector, or counted by why not. Returns the
  /// GPU span it published (0: none).
  NCCLINSP_INLINE std::uint64_t publish_record(comm_state& cs, op_slot& s, bool enqueue_only, std::uint64_t began,
                                               std::uint64_t now) noexcept {
    filter_reason why = enqueue_only ? s.settle : s.ts_reject.load(std::memory_order_relaxed);
    if (enqueue_only && why == no_filter) why = filter_reason::enqueue_only;
    if (why != no_filter) {
      col_.note_filtered(cs.handle, why);
      return 0;
    }
    op_record r = s.rec;
    if (s.expected_ch == unknown_channels)
      r.channels = static_cast<std::uint16_t>(s.ch_started.load(std::memory_order_relaxed));
    const std::uint64_t glo = s.gpu_lo.load(std::memory_order_relaxed), ghi = s.gpu_hi.load(std::memory_order_relaxed);
    if (!s.gpu_missing.load(std::memory_order_relaxed) && glo && ghi > glo) {
      // The kernel ran inside the op's host-observed life (its start to this last channel end): a
      // longer GPU span is a garbage timer value (a KernelCh stop 584 years after its start was
      // published as 0 GB/s). max_clock_grain_ns covers the coarse clock and rate differences.
      if (ghi - glo > now - began + max_clock_grain_ns) NCCLINSP_UNLIKELY {
        col_.note_filtered(cs.handle, filter_reason::rejected_timestamps);
        return 0;
      }
      r.timing = timing_source::kernel_gpu;
      r.start_ns = glo;
      r.end_ns = ghi;
      // Its channels are busy until its end: a later replay starting on one before then is not itself
      // (kept on communicators that captured a graph, where replays can read stale slots, ABI <= 6).
      if (cs.graphs.load(std::memory_order_relaxed))
        for (std::uint64_t m = s.ch_seen.load(std::memory_order_relaxed); m; m &= m - 1)
          relaxed_max(cs.ch_last_stop[static_cast<std::size_t>(__builtin_ctzll(m))], ghi);
    } else if (s.cpu_lo.load(std::memory_order_relaxed) && !cfg_.require_kernel_timing) {
      r.timing = timing_source::kernel_cpu;  // proxy-observed channel times, on request
      r.start_ns = s.cpu_lo.load(std::memory_order_relaxed);
      r.end_ns = s.cpu_hi.load(std::memory_order_relaxed);
    } else {
      col_.note_filtered(cs.handle, filter_reason::no_gpu_timing);
      return 0;
    }
    if (cs.traces) NCCLINSP_UNLIKELY {
      traced_op& tr = cs.traces[cs.ops.index_of(s)];
      tr.t.stop_sn = tr.stop_sn.load(std::memory_order_acquire);  // 0: the op's stop came later
      tr.t.stop_cpu_ns = tr.stop_cpu_ns.load(std::memory_order_relaxed);
      col_.record(cs.handle, r, &tr.t);
    } else {
      col_.record(cs.handle, r);
    }
    return r.timing == timing_source::kernel_gpu ? r.end_ns - r.start_ns : 0;
  }

  collector<>& col_;
  const adapter_config cfg_;
};

}  // namespace ncclinsp::plugin
