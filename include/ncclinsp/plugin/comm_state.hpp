#pragma once
/// Per-communicator state of the plugin: the in-flight op slots (detail::inflight_table, shared
/// with the embedded mode), their optional callback traces, the proxy step pool, and the last
/// completed ops (op_history.hpp, for the state dump). Data only:
/// the event adapter (event_adapter.hpp) and proxy_events.hpp read and write it; comm_registry.hpp
/// owns every comm_state, says when one may be reused, and never frees one while events may come.
/// Thread-safety: see each struct; no lock anywhere.

#include <time.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/inflight_table.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/detail/slot_bitmap.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/plugin/op_history.hpp"

namespace ncclinsp::plugin {

inline constexpr std::uint32_t max_plugin_comms = default_traits::max_comms;
/// Proxy steps in flight per communicator (NCCLINSP_PROXY).
inline constexpr std::uint32_t proxy_steps_per_comm = 1024;

/// op_slot::expected_ch of an op whose channel count NCCL does not give (a CollNet op announces 0
/// and its KernelCh arrive): it completes when every channel that started has ended.
inline constexpr std::uint32_t unknown_channels = 0xFFFFFFFFu;

/// op_slot::settle and ts_reject when no reason applies (filter_reason's 0 is min_size, a reason).
inline constexpr filter_reason no_filter = filter_reason::count_;

/// One in-flight op. Written by the enqueuing thread at start, by the completing thread after.
struct alignas(detail::cache_line) op_slot {
  std::atomic<std::uint32_t> gen{1};
  std::atomic<std::uint32_t> refs{0};        // enqueue-stop + kernel completion
  std::atomic<std::uint32_t> ch_stopped{0};  // channels stopped; one writer (the op's channel thread)
  std::atomic<std::uint32_t> ch_inside{0};   // odd while a KernelCh event is inside (comm_registry::channel_hold)
  std::atomic<std::uint64_t> started_at{0};  // coarse CPU ns at enqueue, 0 = free or completed
  std::atomic<std::uint64_t> gpu_lo{0}, gpu_hi{0}, cpu_lo{0}, cpu_hi{0};
  std::atomic<bool> gpu_missing{false};
  std::atomic<bool> enq_stopped{false};  // the op's own stopEvent was seen (a second one is ignored)
  bool proxy_sampled = false;            // its ProxyOps get handles (NCCLINSP_PROXY)
  // The channel thread's checks (one writer): channels started (ops whose count NCCL does not give),
  // channel ids ended (a second stop of one, on a stale kernelEventHandle, is ignored), and why its
  // KernelCh timestamps cannot be its own (no_filter: they can).
  std::atomic<std::uint32_t> ch_started{0};
  std::atomic<std::uint64_t> ch_seen{0};       // record(22) per channel id mod 64 (ops of <= 64 channels)
  std::atomic<std::uint64_t> ch_stop_seen{0};  // stopEvent per channel id (traces on: the stop ends it)
  std::atomic<filter_reason> ts_reject{no_filter};
  filter_reason settle = no_filter;  // why no KernelCh can come for the op (no_filter: they can); set at start
  bool replay = false;               // a CUDA-graph replay (parentObj: a captured CollApi/P2pApi); set at start
  bool is_ce = false;
  std::uint32_t expected_ch = 0;  // unknown_channels: CollNet ops (nChannels 0, KernelCh arrive)
  /// Its plan's place in the communicator's order (ABI 7, plan_order_enqueue): base << 8 | channels
  /// awaited; 0: not numbered. Written at its start, before NCCL has its handle; read by its channel
  /// thread. (Fields ordered so that the slot stays three cache lines.)
  std::atomic<std::uint64_t> plan_key{0};
  op_record rec;
  // What the state dump reads of an op in flight (plugin/state_dumper.hpp), atomics only: its
  // identity, stored once its start filled rec (op_lifecycle::publish), and which channel ids
  // (mod 64) started and ended, one writer each (the op's channel thread).
  std::atomic<std::uint64_t> ident{0};       // op_ident::pack_id (op_history.hpp)
  std::atomic<std::uint64_t> ident_xfer{0};  // op_ident::pack_xfer
  std::atomic<std::uint64_t> ch_begun{0};    // KernelCh started, per channel id mod 64
  std::atomic<std::uint64_t> ch_ended{0};    // KernelCh recordEventState(22) seen, per channel id mod 64
};

/// proxy_step_slot::wait before the step's first transition.
inline constexpr std::uint8_t no_wait = 0xFF;

/// One network step in flight (ProxyStep start -> state transitions -> stop), on the proxy thread.
struct proxy_step_slot {
  std::atomic<std::uint32_t> gen{1};
  std::uint32_t entry = 0;      // proxy_table entry (peer, direction)
  std::uint8_t wait = no_wait;  // current proxy_wait
  std::uint64_t since_ns = 0;   // CLOCK_MONOTONIC at the last transition
  std::uint64_t bytes = 0;      // latest transSize
  std::uint32_t key = 0;        // (ProxyOp: entry | channel << 7) << 16 | step: a re-start finds it
  bool open = false;
};

/// Callback detail of one in-flight op, only when traces are recorded (verbose JSON, trace sink).
/// The op's start/stop fields are written by the enqueuing thread, the channel entries by the
/// thread that delivers channel events, which also completes the op and reads them all.
struct traced_op {
  op_trace t;
  std::atomic<std::uint16_t> last_sn{0};
  std::atomic<std::uint16_t> stop_sn{0};
  std::atomic<std::uint64_t> stop_cpu_ns{0};
  std::array<std::uint8_t, 256> entry_of{};  // channel id (any byte) -> index in t.channels + 1 (0 = none)

  std::uint16_t next_sn() noexcept {
    return static_cast<std::uint16_t>(last_sn.fetch_add(1, std::memory_order_relaxed) + 1);
  }
  channel_trace* channel(std::uint32_t id) noexcept {
    return id < entry_of.size() && entry_of[id] ? &t.channels[entry_of[id] - 1] : nullptr;
  }
  /// A new op in this slot (its start, on the enqueuing thread).
  void op_started() noexcept {
    t.n_channels = 0;
    t.start_sn = 1;
    t.start_cpu_ns = detail::unix_ns();
    entry_of.fill(0);
    stop_sn.store(0, std::memory_order_relaxed);
    stop_cpu_ns.store(0, std::memory_order_relaxed);
    last_sn.store(1, std::memory_order_relaxed);
  }
  /// The op's stopEvent (enqueuing thread).
  void op_stopped() noexcept {
    stop_cpu_ns.store(detail::unix_ns(), std::memory_order_relaxed);
    stop_sn.store(next_sn(), std::memory_order_release);
  }
  // KernelCh start, record(22) and stop of channel `id` (the op's channel thread).
  void channel_started(std::uint32_t id, std::uint64_t gpu_start) noexcept {
    if (id >= entry_of.size() || entry_of[id] || t.n_channels >= max_traced_channels) return;
    entry_of[id] = static_cast<std::uint8_t>(t.n_channels + 1);
    t.channels[t.n_channels++] = {.start_cpu_ns = detail::unix_ns(),
                                  .gpu_start_ns = gpu_start,
                                  .start_sn = next_sn(),
                                  .channel = static_cast<std::uint8_t>(id)};
  }
  void channel_recorded(std::uint32_t id, std::uint64_t gpu_stop) noexcept {
    if (channel_trace* c = channel(id)) {
      c->record_sn = next_sn();
      c->record_cpu_ns = detail::unix_ns();
      c->gpu_stop_ns = gpu_stop;
    }
  }
  void channel_stopped(std::uint32_t id) noexcept {
    if (channel_trace* c = channel(id)) {
      c->stop_sn = next_sn();
      c->stop_cpu_ns = detail::unix_ns();
    }
  }
};

/// The order of a communicator's plans, by which the KernelCh NCCL drops are told apart (2.31.2+,
/// ABI 7: its profiler thread drops the KernelCh of an op it cannot allocate, and the channel's work
/// counter still advances; nccl_behaviour::kernel_ch_dropped_on_alloc_failure). Each plan's Group
/// gets its own handle (event_adapter::plan_handle), which its Coll/P2p carry as parentGroup. An op
/// that awaits KernelCh gets the key of its plan: base = 1 + the channels awaited by every op of
/// earlier plans. The profiler thread starts KernelCh in post order and a communicator's kernels run
/// one after the other, so when a later plan's first KernelCh starts, every KernelCh of earlier plans
/// has started: a shortfall is KernelCh NCCL dropped, and their ops are settled (event_adapter::next_plan).
/// One pass of that thread can read a later op's slot after an earlier one's: an earlier op's KernelCh
/// that comes after a later plan's finds its op settled (counted no_kernel_events, never a wrong number).
/// An op of a communicator's last plan has no later plan: it waits for the next one, or finalize.
/// Enqueue side: written by the thread that starts the plan's ops (one at a time per communicator;
/// plans from a second thread turn the order off for good: `unordered`).
struct alignas(detail::cache_line) plan_order_enqueue {
  std::atomic<const void*> group{nullptr};  // the Group handle of the last plan numbered
  std::atomic<std::uint32_t> thread{0};     // the tag of the thread that started it (its handle's gen)
  std::atomic<bool> unordered{false};       // plans came from two threads: no order to read
  std::atomic<std::uint64_t> base{1};       // the last plan's base
  std::atomic<std::uint64_t> sum{1};        // 1 + the channels awaited by every op numbered
};
/// Channel side: written by the communicator's channel thread (its profiler thread) only. A KernelCh
/// whose plan base is below `started` is of the current plan; at or above it, of a later plan, and
/// `started` below that base is a shortfall. (An earlier plan's op still short of starts at a later
/// plan's first is settled, so a late KernelCh of it names a released slot: never counted here.)
struct alignas(detail::cache_line) plan_order_channels {
  std::atomic<std::uint64_t> started{1};  // 1 + the KernelCh started of numbered ops
};

/// One communicator on this rank: its in-flight op table (plus traces), its proxy step pool.
struct comm_state {
  comm_state(std::uint32_t pool, bool traced, std::uint32_t proxy_steps)
      : ops(pool),
        traces(traced ? new traced_op[pool] : nullptr),
        step_count(proxy_steps),
        steps(proxy_steps ? new proxy_step_slot[proxy_steps] : nullptr),
        open_step(proxy_steps ? new std::uint32_t[proxy_steps]() : nullptr),
        step_free(proxy_steps) {}
  comm_handle handle = no_index;
  std::uint32_t gen = 0;  // generation of this comm table entry
  int nranks = 1;
  int rank = 0;  // this rank in the communicator: a P2P op to it gets no KernelCh (event_adapter::start_p2p)
  /// Channel ids (mod 64) whose host work counter lags the device's: NCCL up to 2.31.0a (ABI <= 6)
  /// runs Send/Recv to the rank itself on channels 0..nChannels-1 and the device counts the work
  /// (device/common.h profiler()), the host does not (no profiler proxy op, proxy.cc
  /// incWorkCounter). Every later KernelCh there reads an earlier work's slot. Set by the
  /// enqueuing thread (rarely: only new bits), read at every KernelCh start.
  std::atomic<std::uint64_t> shifted_channels{0};
  detail::inflight_table<op_slot> ops;  // lock-free slot allocation; release() by the last reference
  // handle and gen are written by comm_registry::publish before the state is published.
  std::unique_ptr<traced_op[]> traces;  // parallel to ops, or null
  std::atomic<std::uint64_t> p2p_seq{0};
  /// Per channel id (mod 64), the GPU end of the last op timed on it, written at that op's completion
  /// (the channel thread's only): a communicator's kernels run one after the other, so a replay's
  /// KernelCh starting before it names an earlier work's device-ring slot.
  std::array<std::atomic<std::uint64_t>, 64> ch_last_stop{};
  std::atomic<bool> graphs{false};  // a CUDA graph was captured on it: ch_last_stop is kept (set once)
  plan_order_enqueue plans;         // the order of its plans (ABI 7), enqueue side
  plan_order_channels plan_ch;      // and channel side
  op_history history;               // its last completed ops (the state dump), written by the completing threads
  proxy_table* proxy = nullptr;     // owned by the collector; null without NCCLINSP_PROXY
  std::uint32_t step_count;
  std::unique_ptr<proxy_step_slot[]> steps;
  /// Open steps by key hash (step slot + 1, 0 = none): a step NCCL re-starts on every pass
  /// (recvProxyProgress while irecv gives no request) gets its open slot back. Proxy thread only.
  std::unique_ptr<std::uint32_t[]> open_step;
  detail::slot_bitmap step_free;

  /// Ready for a new communicator (cold, no event inside): every op and step slot free and in its
  /// next generation, so no handle of the previous communicator names one of them.
  void recycle() noexcept {
    ops.recycle();
    for (std::uint32_t i = 0; i < step_count; ++i) {
      steps[i].gen.store(steps[i].gen.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      steps[i].open = false;
      open_step[i] = 0;
      step_free.release(i);
    }
    p2p_seq.store(0, std::memory_order_relaxed);
    shifted_channels.store(0, std::memory_order_relaxed);
    for (auto& t : ch_last_stop) t.store(0, std::memory_order_relaxed);
    graphs.store(false, std::memory_order_relaxed);
    plans.group.store(nullptr, std::memory_order_relaxed);
    plans.thread.store(0, std::memory_order_relaxed);
    plans.unordered.store(false, std::memory_order_relaxed);
    plans.base.store(1, std::memory_order_relaxed);
    plans.sum.store(1, std::memory_order_relaxed);
    plan_ch.started.store(1, std::memory_order_relaxed);
    history.clear();
  }
};

}  // namespace ncclinsp::plugin
