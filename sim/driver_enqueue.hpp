#pragma once
/// The user-thread side of `comm_driver`: the callback sequence NCCL emits for one outermost group of API
/// calls (ncclGroupStart / taskAppend / ncclGroupEnd, then the launch's hostStreamPlanTask), per ABI
/// version. Steps: GroupApi open → per op: its pending token + channels, its CollApi/P2pApi → KernelLaunch →
/// Group with the Coll/P2p tasks in plan order → CE collectives → GroupApi stop.
/// Thread-safety: runs on the rank's user thread; touches only the caller's sequence counters.

#include "driver_ce.hpp"
#include "driver_types.hpp"
#include "event_emitter.hpp"
#include "kernel_plans.hpp"
#include "nccl_vocab.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

namespace ncclinsp::sim::detail {

/// seqNumber counters of one communicator (NCCL's per-function `seqNumber`, and the CE sequence).
struct seq_counters {
  std::uint64_t coll[num_funcs] = {};
  std::uint64_t ce = 0;
};

template <int V>
class enqueue_sequence {
 public:
  using descr = typename emitter<V>::descr;

  enqueue_sequence(const emitter<V>& e, seq_counters& seq, enqueue_mode mode = enqueue_mode::eager,
                   captured_graph* graph = nullptr)
      : e_(e),
        cfg_(e.cfg),
        prof_(e.prof),
        seq_(seq),
        bcast_coll_(cfg_.broadcast_coll >= 0 ? cfg_.broadcast_coll != 0
                                             : !prof_.has(nccl_behaviour::broadcast_no_coll)),
        mask_(load_mask()),
        mode_(mode),
        graph_(graph) {}

  void run(std::span<const op_desc> ops, std::span<pending_op> out, bool grouped) {
    const bool replay = mode_ == enqueue_mode::replay;
    bool api_open = false;
    std::uint8_t cursor = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      prepare(ops[i], out[i], cursor);
      // taskAppend returned before any profiler call (pending_op::no_task).
      if (out[i].no_task) continue;
      if (replay) {
        out[i].api_handle = graph_ && i < graph_->n ? graph_->api_handles[i] : nullptr;  // stale by now
      } else {
        // The GroupApi starts with the first API call that reaches the profiler (collTaskAppend,
        // p2pTaskAppend: ncclProfilerStartGroupApiEvent), with that call's capture state.
        if (!api_open) open_group_api(ops[i], grouped);
        api_open = true;
        api_event(ops[i], out[i]);
        if (graph_ && i < max_graph_ops) graph_->api_handles[i] = out[i].api_handle;
      }
    }
    if (!replay && !api_open) return;  // only ops without a task: no profiler call at all
    if constexpr (V >= 5)
      if (!replay) e_.record(group_api_, abi::st_group_end_api_start, e_.no_args(scratch_));
    const plan_list plans = schedule_plans(ops, out, cfg_, prof_, mode_, graph_);
    for (std::uint8_t k = 0; k < plans.n; ++k) {
      // ncclLaunchKernel (KernelLaunch), then ncclLaunchKernelAfter_NoCuda runs hostStreamPlanTask at once
      // unless ncclLaunchPrepare gave the plan a host callback: under capture, a plan with proxy ops only.
      if (!replay) kernel_launch(ops);
      const bool now = mode_ == enqueue_mode::eager || (mode_ == enqueue_mode::capture) != plans.has_proxy[k];
      if (now) plan_tasks(ops, out, plans, k);
    }
    if (replay)  // a captured plan without proxy ops has no host callback: its replays emit nothing
      for (std::size_t i = 0; i < ops.size(); ++i)
        if (!out[i].plan_has_proxy) out[i].kernel_events = false;
    if constexpr (V >= 6)
      if (mode_ == enqueue_mode::eager) ce_collectives(e_, ops, out, mask_, seq_.ce);
    if constexpr (V >= 5)
      if (!replay) e_.stop(group_api_);
  }

 private:
  /// ncclGroupStart (v5+): GroupApi start and its GroupStartApiStop state.
  void open_group_api(const op_desc& first, bool grouped) {
    if constexpr (V >= 5) {
      if (!(mask_ & gate::group_api)) return;
      e_.clear(d_);
      d_.type = abi::ev_group_api;
      d_.groupApi.graphCaptured = first.graph_captured;
      d_.groupApi.groupDepth = grouped ? 2 : 1;
      group_api_ = e_.start(d_);
      e_.record(group_api_, abi::st_group_start_api_stop, e_.no_args(scratch_));
    }
  }

  /// The op's pending token: mask snapshot, payload, channels (collectives: the group's cursor unless given;
  /// symmetric kernels from 0; P2P: a peer-derived non-zero base unless given).
  void prepare(const op_desc& op, pending_op& p, std::uint8_t& cursor) const {
    p = pending_op{};
    p.mask = mask_;
    p.kind = op.kind;
    p.func = op.func;
    p.peer = op.peer;
    p.network = cfg_.n_nodes > 1;
    p.bytes = op.count * dtype_size(op.dtype);
    p.symmetric = V >= 7 && op.kernel_variant != nullptr && op.kind == op_kind::coll;
    p.n_channels = op.n_channels;
    p.replay = mode_ == enqueue_mode::replay;
    p.proxy_unstopped = op.collnet;  // CollNet proxies start their ProxyOps and never stop them
    p.collnet = op.collnet;
    if (op.kind == op_kind::coll) {
      if (p.symmetric) {
        p.channel_lo = 0;
      } else if (op.channel_lo >= 0) {
        p.channel_lo = std::uint8_t(op.channel_lo);
      } else {
        if (cursor + op.n_channels > 64) cursor = 0;
        p.channel_lo = cursor;
        cursor = std::uint8_t(cursor + op.n_channels);
      }
    }
    // taskAppend discards an empty collective and runs a one-rank one as ncclLaunchOneRank
    // (nccl_behaviour::zero_count_silent, one_rank_silent).
    p.no_task = op.kind != op_kind::p2p && (op.count == 0 || cfg_.n_ranks == 1);
    p.self_p2p = op.kind == op_kind::p2p && op.peer == cfg_.rank;
    if (op.kind == op_kind::p2p) {  // a self pair runs in round 0, whose base is reverseBits(0) = 0
      p.channel_lo = op.channel_lo >= 0 ? std::uint8_t(op.channel_lo)
                     : p.self_p2p       ? std::uint8_t(0)
                                        : std::uint8_t(1 + ((op.peer < 0 ? 0 : op.peer) % 8) * 2);
    }
    if (p.self_p2p) p.network = false;  // a copy inside the rank's own kernel
    if (op.kind == op_kind::coll && !p.no_task) (void)coll_channels(op, p);
    // KernelCh for a self P2P only where ncclProfilerPostPlanWork posts them (2.31.2).
    if (op.kind == op_kind::p2p) p.kernel_events = !p.self_p2p || prof_.has(nccl_behaviour::self_p2p_kernel_ch);
  }

  /// A collective's KernelCh children (`p.kernel_events`) and the channel count its Coll announces, as the
  /// release plans it; -1: no Coll event at all.
  int coll_channels(const op_desc& op, pending_op& p) const {
    p.kernel_events = false;
    if (op.func == nccl_func::broadcast && !bcast_coll_) return -1;  // no Coll, no KernelCh (NVIDIA/nccl #2278)
    // Before 2.31.2 ncclSymmetricTaskScheduler frees symmetric tasks: no Coll, no KernelCh.
    if (op.symmetric && prof_.has(nccl_behaviour::symmetric_invisible)) return -1;
    int announced = op.n_channels;
    p.kernel_events = true;
    if (op.collnet && prof_.has(nccl_behaviour::collnet_zero_channels)) announced = 0;  // KernelCh still come
    if (op.symmetric && op.sym_tail && prof_.has(nccl_behaviour::sym_head_only)) {
      announced = 0;  // only the plan's head task gets KernelCh
      p.kernel_events = false;
    }
    if (op.symmetric && p.replay && prof_.has(nccl_behaviour::captured_sym_no_kernel_ch))
      p.kernel_events = false;  // the uninstrumented kernel runs under capture; channels announced anyway
    return announced;
  }

  /// taskAppend (v5+): CollApi or P2pApi, started and stopped at once.
  void api_event(const op_desc& op, pending_op& p) {
    if constexpr (V >= 5) {
      const bool is_p2p = op.kind == op_kind::p2p;
      if (!(mask_ & (is_p2p ? gate::p2p_api : gate::coll_api))) return;
      e_.clear(d_);
      d_.parentObj = group_api_;
      if (is_p2p) {
        d_.type = abi::ev_p2p_api;
        d_.p2pApi.func = func_name(op.func);
        d_.p2pApi.count = op.count;
        d_.p2pApi.datatype = dtype_name(op.dtype);
        d_.p2pApi.stream = op.stream;
        d_.p2pApi.graphCaptured = op.graph_captured;
        if constexpr (V >= 7) d_.p2pApi.userTag = op.user_tag;
      } else {
        d_.type = abi::ev_coll_api;
        d_.collApi.func = func_name(op.func);
        d_.collApi.count = op.count;
        d_.collApi.datatype = dtype_name(op.dtype);
        d_.collApi.root = op.root;
        d_.collApi.stream = op.stream;
        d_.collApi.graphCaptured = op.graph_captured;
        if constexpr (V >= 7) d_.collApi.userTag = op.user_tag;
      }
      p.api_handle = e_.start(d_);
      e_.stop(p.api_handle);
    }
  }

  /// The launch (v5+): KernelLaunch, at the API call or at capture.
  void kernel_launch(std::span<const op_desc> ops) {
    if constexpr (V >= 5) {
      if (mask_ & abi::ev_kernel_launch) {
        e_.clear(d_);
        d_.type = abi::ev_kernel_launch;
        d_.parentObj = group_api_;
        d_.kernelLaunch.stream = ops.front().stream;
        e_.stop(e_.start(d_));
      }
    }
  }

  /// hostStreamPlanTask of plan `k` (eager; at capture for a plan without proxy ops) or
  /// hostStreamPlanCallback (replay of a plan with proxy ops): Group, Coll/P2p starts in plan order, their
  /// stops in the same order, Group stop.
  void plan_tasks(std::span<const op_desc> ops, std::span<pending_op> out, const plan_list& plans, std::uint8_t k) {
    void* group = nullptr;
    if (mask_ & gate::group) {
      e_.clear(d_);
      d_.type = abi::ev_group;
      group = e_.start(d_);
    }
    // 2.27 starts task events only under a non-NULL Group handle; later releases do not check.
    const bool tasks_allowed = group != nullptr || !prof_.has(nccl_behaviour::task_needs_group);
    for (std::size_t j = 0; j < plans.n_order; ++j) {
      const std::size_t i = plans.order[j];
      if (plans.plan_of[i] != k) continue;
      if (ops[i].kind == op_kind::coll)
        coll_task(ops[i], out[i], group, tasks_allowed);
      else
        p2p_task(ops[i], out[i], group, tasks_allowed);
    }
    for (std::size_t j = 0; j < plans.n_order; ++j)
      if (plans.plan_of[plans.order[j]] == k) e_.stop(out[plans.order[j]].task_handle);
    e_.stop(group);
  }

  void coll_task(const op_desc& op, pending_op& p, void* group, bool tasks_allowed) {
    // One communicator's tasks can be planned on several threads at once (a replay's host callback
    // beside the user thread): the counter is taken atomically. ncclProfilerStartTaskEvents advances it
    // for a captured plan only when KernelCh is in the task's mask and a Group or CollApi handle exists.
    const bool advance =
        mode_ == enqueue_mode::eager || ((mask_ & abi::ev_kernel_ch) && (p.api_handle || (group && tasks_allowed)));
    std::atomic_ref<std::uint64_t> counter(seq_.coll[int(op.func)]);
    p.seq = advance ? counter.fetch_add(1, std::memory_order_relaxed) : counter.load(std::memory_order_relaxed);
    const int announced = coll_channels(op, p);
    if (announced < 0 || !(mask_ & gate::coll) || !tasks_allowed) return;
    e_.clear(d_);
    d_.type = abi::ev_coll;
    d_.rank = cfg_.rank;
    d_.coll.seqNumber = p.seq;
    d_.coll.func = func_name(op.func);
    d_.coll.sendBuff = op.send_buff;
    d_.coll.recvBuff = op.recv_buff;
    // NCCL rewrites AllGather/Broadcast to bytes of ncclInt8.
    const bool bytes = op.func == nccl_func::all_gather || op.func == nccl_func::broadcast;
    d_.coll.count = bytes ? op.count * dtype_size(op.dtype) : op.count;
    d_.coll.root = op.root;
    d_.coll.datatype = bytes ? "ncclInt8" : dtype_name(op.dtype);
    d_.coll.nChannels = std::uint8_t(announced);
    d_.coll.nWarps = op.n_warps;
    d_.coll.algo = op.algo;
    d_.coll.proto = op.proto;
    if constexpr (V == 4) {
      d_.parentObj = group;
    } else {
      d_.parentObj = p.api_handle;
      d_.coll.parentGroup = group;
    }
    if constexpr (V >= 7) {
      d_.coll.userTag = op.user_tag;
      if (p.symmetric) {
        d_.coll.isSymColl = true;
        d_.coll.kernelVariant = op.kernel_variant;
        d_.coll.algo = sym_algo(op.kernel_variant);
        d_.coll.proto = "";
      }
    }
    p.task_handle = e_.start(d_);
  }

  /// A P2p event announces its channels (addP2pToPlan sets the task's nChannels), a self one too.
  void p2p_task(const op_desc& op, pending_op& p, void* group, bool tasks_allowed) {
    if (!(mask_ & gate::p2p) || !tasks_allowed) return;
    e_.clear(d_);
    d_.type = abi::ev_p2p;
    d_.rank = cfg_.rank;
    d_.p2p.func = func_name(op.func);
    d_.p2p.buff =
        op.kind == op_kind::p2p && op.func == nccl_func::recv ? op.recv_buff : const_cast<void*>(op.send_buff);
    d_.p2p.datatype = dtype_name(op.dtype);
    d_.p2p.count = op.count;
    d_.p2p.peer = op.peer;
    if constexpr (V == 4) {
      d_.parentObj = group;
      if (!prof_.has(nccl_behaviour::shim_p2p_no_channels)) d_.p2p.nChannels = op.n_channels;
    } else {
      d_.p2p.nChannels = op.n_channels;
      d_.parentObj = p.api_handle;
      d_.p2p.parentGroup = group;
    }
    if constexpr (V >= 7) d_.p2p.userTag = op.user_tag;
    p.task_handle = e_.start(d_);
  }

  /// v7 symmetric kernels report the kernel name's text after the first '_' as the algorithm.
  static const char* sym_algo(const char* variant) noexcept {
    const char* u = std::strchr(variant, '_');
    return u ? u + 1 : variant;
  }

  const emitter<V>& e_;
  const comm_config& cfg_;
  const nccl_profile prof_;
  seq_counters& seq_;
  const bool bcast_coll_;
  const int mask_;  ///< ncclProfilerApiState.eActivationMask snapshot at the API call
  const enqueue_mode mode_;
  captured_graph* graph_;  ///< capture: receives the API handles; replay: gives them
  void* group_api_ = nullptr;
  abi::state_args scratch_;
  descr d_;
};

}  // namespace ncclinsp::sim::detail
