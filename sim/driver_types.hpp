#pragma once
/// The plain data the NCCL driver (`comm_driver`) takes and hands out: one API call (`op_desc`), the token
/// of an enqueued task (`pending_op`), kernel and ProxyStep times, and a communicator's configuration.
/// Thread-safety: plain data.

#include "nccl_release.hpp"
#include "nccl_vocab.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <unistd.h>

namespace ncclinsp::sim {

// ---- operations ------------------------------------------------------------------------------------

enum class op_kind : std::uint8_t { coll, p2p, ce_coll };

/// One NCCL API call (ncclAllReduce, ncclSend, ...). Counts are the user's (elements); the driver applies
/// NCCL's rewriting (AllGather/Broadcast Coll count in bytes, datatype "ncclInt8").
struct op_desc {
  op_kind kind = op_kind::coll;
  nccl_func func = nccl_func::all_reduce;
  nccl_dtype dtype = nccl_dtype::bfloat16;
  std::size_t count = 0;  ///< AllGather: per-rank send count; ReduceScatter: per-rank recv count.
  int root = 0;
  int peer = -1;  ///< P2P peer rank
  const void* send_buff = nullptr;
  void* recv_buff = nullptr;
  const char* algo = "RING";
  const char* proto = "SIMPLE";
  std::uint8_t n_channels = 1;
  /// -1: collectives use the group's channel cursor; P2P to the rank itself round 0's base, 0
  /// (ncclP2pChannelBaseForRound); to a peer a peer-derived non-zero base.
  int channel_lo = -1;
  /// P2P: the round of comm->p2pSchedule (init.cc ncclP2pSchedule) that pairs this op; -1: the driver's
  /// (rank +/- round) mod nRanks. The Send and the Recv of one round form one work per channel.
  int p2p_round = -1;
  std::uint8_t n_warps = 16;
  std::uint64_t user_tag = 0;            ///< v7 only
  const char* kernel_variant = nullptr;  ///< v7 symmetric kernel name, e.g. "AllReduce_AGxLL_R"; NULL = regular
  void* stream = reinterpret_cast<void*>(0x5000);
  bool graph_captured = false;
  /// The release's behaviours for this op (nccl_release.hpp): a CollNet (SHARP) collective, a symmetric
  /// collective (v7 needs kernel_variant too), a symmetric task that is not the head of its plan.
  bool collnet = false;
  bool symmetric = false;
  bool sym_tail = false;
};

/// What `enqueue` hands to the proxy side: the handles and the mask snapshot of one task. Plain data.
struct pending_op {
  void* task_handle = nullptr;  ///< Coll / P2p handle (parent of KernelCh, ProxyOp); NULL if the plugin said so
  void* api_handle = nullptr;   ///< CollApi / P2pApi handle (v5+)
  void* ce_handle = nullptr;    ///< CeColl handle (v6+ CE collectives)
  int mask = 0;                 ///< activation-mask snapshot taken at the API call
  op_kind kind = op_kind::coll;
  nccl_func func = nccl_func::all_reduce;
  bool kernel_events = false;  ///< KernelCh/ProxyOp children exist (false for CE ops and mask-off / Broadcast)
  /// A Send/Recv to the rank itself (peer == rank): P2p events with their channels, never a KernelCh or
  /// ProxyOp (enqueue.cc addP2pToPlan gives a self send no proxy op; proxy.cc ncclProxySaveOp returns
  /// early for op->root == comm->rank).
  bool self_p2p = false;
  /// enqueue.cc taskAppend returned before any profiler call: NCCL issued no task and emitted nothing
  /// for it (enqueue_sequence::prepare says when: the rows of nccl_behaviours.hpp it reproduces).
  bool no_task = false;
  bool symmetric = false;
  bool network = false;  ///< the communicator spans nodes: ProxyOps exist
  std::uint8_t channel_lo = 0;
  std::uint8_t n_channels = 0;
  int peer = -1;
  std::size_t bytes = 0;  ///< per-rank payload bytes
  std::uint64_t seq = 0;  ///< coll.seqNumber / ceColl.seqNumber given to the plugin
  bool replay = false;    ///< emitted by a CUDA-graph replay (hostStreamPlanCallback), not at the API call
  /// Its plan has proxy ops (a network connection, or a profiler proxy op: KernelCh in the mask and not a
  /// self P2P): enqueue.cc ncclLaunchPrepare enqueues a host callback for it under capture, so its events
  /// come at every replay. A plan without runs hostStreamPlanTask at capture (ncclLaunchKernelAfter_NoCuda).
  bool plan_has_proxy = false;
  /// KernelCh read another work's device-ring slot (a replay after an eager launch up to 2.30, a
  /// counter drift after a Broadcast in 2.31): `complete` sends those timestamps, not the op's.
  bool stale_timestamps = false;
  bool drifted = false;          ///< 2.31 drift: start is the op's, stop the channel's previous work's
  bool proxy_unstopped = false;  ///< CollNet/SHM/P2P proxies: ProxyOps started, never stopped
  bool collnet = false;          ///< CollNet: KernelCh starts of every channel come before any stop (one proxy pass)
  /// Its work's number in the device ring of its first channel as the host counts it (the proxy's
  /// sub->base, the slot its KernelCh read), 1-based; 0: none. The Send and Recv of one pair share it.
  std::uint64_t work = 0;
  /// The number the device gives the same work (the slot it stamps); differs from `work` once the
  /// channel ran works the host did not count (a self P2P up to 2.31.0a: nccl_behaviour::self_p2p_shifts_counter).
  std::uint64_t dev_work = 0;
  /// One of its channels ran such works before it: its KernelCh read an earlier work's slot, delivered
  /// as soon as that slot is written (comm_driver::device_ring).
  bool shifted = false;
  /// Its place in its group's kernel plans (Coll/P2p order), and whether it is the second op of a
  /// send/recv pair that shares one work per channel with the op before it; 0xFFFF: not planned.
  std::uint16_t plan_pos = 0xFFFF;
  bool pair_second = false;
};

/// A captured CUDA graph of one communicator: the ops of its API calls and the CollApi/P2pApi handles
/// NCCL emitted once, at capture (a replay's Coll/P2p carry them as parentObj, stale by then).
inline constexpr std::size_t max_graph_ops = 8;
struct captured_graph {
  op_desc ops[max_graph_ops];
  void* api_handles[max_graph_ops] = {};
  /// Op i's plan had proxy ops at capture: its host callback is in the graph and runs at every replay.
  bool host_callback[max_graph_ops] = {};
  std::size_t n = 0;
};

struct kernel_time {
  std::uint64_t start_ns = 0;  ///< GPU %globaltimer at work start
  std::uint64_t stop_ns = 0;   ///< GPU %globaltimer at work end
};
/// A time that never comes: a hung kernel's stop, a stalled ProxyStep's later states (no event is emitted).
inline constexpr std::uint64_t never_ns = ~std::uint64_t(0);

/// When one ProxyStep changes state (src/transport/net.cc), on the caller's clock:
///  send: post = start + SendGPUWait, ready = SendPeerWait (the GPU produced the chunk), sent = SendWait
///        (isend accepted: the receiver had a buffer), done = stop (network completion);
///  recv: post = start + RecvWait (irecv posted), ready = RecvFlushWait (data received), sent = RecvGPUWait
///        (flushed, handed to the GPU), done = stop (the GPU consumed it).
struct proxy_step_times {
  std::uint64_t post = 0, ready = 0, sent = 0, done = 0;
};
inline constexpr int max_proxy_steps = 4;
/// One ProxyOp of a network connection (channel, direction, peer) and its steps.
struct proxy_plan {
  std::uint8_t channel = 0;  ///< index into the op's channels (channel id = channel_lo + channel)
  bool is_send = true;
  int peer = 0;             ///< peer's rank in the communicator
  std::uint64_t start = 0;  ///< ProxyOp start (append at launch) and ProxyOpInProgress
  std::size_t step_bytes = 0;
  int n_steps = 0;  ///< <= max_proxy_steps
  proxy_step_times steps[max_proxy_steps];
};
/// One op of a group for `complete_timed`.
struct timed_op {
  const pending_op* op = nullptr;
  std::span<const kernel_time> kernel;  ///< per channel (as `complete`)
  std::span<const proxy_plan> proxies;  ///< this rank's network ProxyOps of the op (empty: none)
  /// What the KernelCh events carry, per channel, when it is not `kernel` (a release's device-ring
  /// effects, set by comm_driver); the events still come at `kernel`'s times. Empty: `kernel`.
  std::span<const kernel_time> sent{};
};

struct comm_config {
  std::uint64_t comm_hash = 0;  ///< identical on all ranks of the communicator
  std::string name;             ///< commName; empty → NULL
  bool null_name = false;       ///< pass NULL even if `name` is set (NCCL: commName unset)
  int n_nodes = 1;
  int n_ranks = 1;
  int rank = 0;
  int mask_override = -1;  ///< RAS override: after init, store this into the global mask (e.g. 0xFFFF)
  /// No release given: drive the table as the newest release does through its shim (the shim rows of
  /// nccl_behaviours.hpp: garbage bytes, a v4 P2p without nChannels, v5 garbage args).
  bool shim_quirks = false;
  int broadcast_coll = -1;  ///< Broadcast emits Coll/KernelCh: -1 auto (only v4/v5 native), 0 no, 1 yes
  int proxy_steps = 2;      ///< ProxyStep events per ProxyOp when enabled
  pid_t pid = ::getpid();   ///< `proxyOp.pid` for local ops
  /// The NCCL release reproduced (nccl_release.hpp); nullptr: the simulator's model, which default runs
  /// keep (nccl_profile::of says which behaviours each reproduces).
  const nccl_release* release = nullptr;
  int recv_step_restarts = 0;  ///< a recv ProxyStep is re-started this many times (irecv gave no request)
  /// --drop-kernel-ch N (releases with nccl_behaviour::kernel_ch_dropped_on_alloc_failure): NCCL's
  /// profiler thread fails to allocate every Nth KernelCh op (profilerEnqueueOp), whose start and stop
  /// then never come; 0: never.
  int drop_kernel_ch = 0;
  /// KernelCh ops allocated so far: the proxy thread's (it stands for the profiler thread, one per
  /// communicator; emitter::kernel_ch).
  mutable std::uint64_t kernel_ch_ops = 0;
};
}  // namespace ncclinsp::sim
