#pragma once
/// The kernel plans of one group of API calls (enqueue.cc ncclLaunchPrepare, scheduleCollTasksToPlan,
/// scheduleP2pTasksToPlan, addP2pToPlan), and which of them get a host callback under capture: the
/// order in which their Coll/P2p events come, for driver_enqueue.hpp.
/// Thread-safety: pure functions of their arguments (a capture writes its graph's host_callback).

#include "driver_types.hpp"
#include "nccl_release.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

namespace ncclinsp::sim::detail {

/// What one `enqueue_sequence::run` reproduces: an eager API call; a CUDA-graph capture (the API
/// events and the captured kernel launch only: the plan's host callback is recorded into the graph,
/// hostStreamPlanCallback); a graph replay (that callback running: Group, Coll/P2p with new seqNumbers,
/// parentObj the capture's CollApi/P2pApi handle, no API events).
enum class enqueue_mode : std::uint8_t { eager, capture, replay };

/// One group's kernel plans (enqueue.cc ncclLaunchPrepare): collectives first (scheduleCollTasksToPlan),
/// then P2P in p2pSchedule order (scheduleP2pTasksToPlan), a new plan when the next send/recv pair would
/// not fit the plan's kernel arguments (testBudget). `order` lists the ops of every plan in the order
/// their Coll/P2p events come.
inline constexpr std::size_t max_plan_ops = 256;  ///< ops of one group beyond this are not planned
inline constexpr std::uint8_t no_plan = 0xFF;
struct plan_list {
  std::uint8_t n = 0;
  std::uint8_t plan_of[max_plan_ops];
  std::uint16_t order[max_plan_ops];
  std::size_t n_order = 0;
  bool has_proxy[no_plan] = {};
};
/// device.h ncclMaxKernelArgsSize (4 KiB) less sizeof(ncclDevKernelArgs) (32), in 16-byte
/// ncclDevWorkBatch: a plan holds at most 254 work batches. A send/recv pair reserves one batch per
/// channel (testBudget(nWorkBatches + nChannelsMax)) and adds a new one per channel when its round is
/// already in the channel's batch (always for self pairs, which all run in round 0), else it may share
/// one (addWorkBatchToPlan: up to 8 rounds per batch). Counted here as a new batch per channel for every
/// pair: exact for self pairs (NCCL 2.28.9: 3 self pairs of 64 channels per plan,
/// tests/traces/nccl-2.28.9-h200-onerank-cases.trace), an upper bound otherwise.
inline constexpr int plan_batches = (4096 - 32) / 16;

inline plan_list schedule_plans(std::span<const op_desc> ops, std::span<pending_op> out, const comm_config& cfg,
                                const nccl_profile& prof, enqueue_mode mode, captured_graph* graph) {
  plan_list pl;
  std::memset(pl.plan_of, no_plan, sizeof pl.plan_of);
  const std::size_t n = std::min(ops.size(), max_plan_ops);
  int batches = 0;
  bool any = false;
  // Collectives (not the CE ones, which are no kernel plan): all in the first plan.
  for (std::size_t i = 0; i < n; ++i) {
    if (ops[i].kind != op_kind::coll || out[i].no_task) continue;
    pl.plan_of[i] = 0;
    pl.order[pl.n_order++] = std::uint16_t(i);
    batches += out[i].n_channels;
    any = true;
  }
  // P2P: pass k of the while loop, round r takes the k-th send to (rank + r) and the k-th recv from
  // (rank - r) (comm->p2pSchedule, here without the node grouping of init.cc).
  std::uint32_t key[max_plan_ops];
  std::uint16_t p2p[max_plan_ops];
  std::size_t np = 0;
  const int nr = cfg.n_ranks > 0 ? cfg.n_ranks : 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (ops[i].kind != op_kind::p2p) continue;
    const bool send = ops[i].func != nccl_func::recv;
    const int peer = ops[i].peer < 0 ? 0 : ops[i].peer % nr;
    const int round = ops[i].p2p_round >= 0 ? ops[i].p2p_round
                      : send                ? (peer - cfg.rank + nr) % nr
                                            : (cfg.rank - peer + nr) % nr;
    std::uint32_t pass = 0;
    for (std::size_t j = 0; j < np; ++j) {
      const op_desc& o = ops[p2p[j]];
      if ((o.func != nccl_func::recv) == send && o.peer == ops[i].peer) ++pass;
    }
    key[np] = pass << 17 | std::uint32_t(round) << 1 | (send ? 0u : 1u);
    p2p[np++] = std::uint16_t(i);
  }
  for (std::size_t a = 1; a < np; ++a)  // stable: by (pass, round), the send before the recv
    for (std::size_t b = a; b > 0 && key[b - 1] > key[b]; --b) {
      std::swap(key[b - 1], key[b]);
      std::swap(p2p[b - 1], p2p[b]);
    }
  std::uint8_t plan = 0;
  for (std::size_t a = 0; a < np;) {
    std::size_t b = a + 1;  // one addP2pToPlan: the send and the recv of one (pass, round)
    if (b < np && (key[b] >> 1) == (key[a] >> 1)) ++b;
    // scheduleP2pTasksToPlan skips a send/recv pair to itself in place (P2pApi only, no P2p).
    if (b == a + 2 && out[p2p[a]].self_p2p && ops[p2p[a]].send_buff &&
        ops[p2p[a]].send_buff == static_cast<const void*>(ops[p2p[a + 1]].recv_buff)) {
      a = b;
      continue;
    }
    int nch = 0;
    for (std::size_t j = a; j < b; ++j) nch = std::max<int>(nch, out[p2p[j]].n_channels);
    if (any && batches + nch > plan_batches && plan + 1 < no_plan) {
      ++plan;
      batches = 0;
    }
    batches += nch;
    any = true;
    for (std::size_t j = a; j < b; ++j) {
      pl.plan_of[p2p[j]] = plan;
      pl.order[pl.n_order++] = p2p[j];
      out[p2p[j]].pair_second = j > a;  // addP2pToPlan: one work per channel for the send and the recv
    }
    a = b;
  }
  pl.n = any ? std::uint8_t(plan + 1) : 0;
  // A plan has proxy ops when one of its tasks has: a network connection, or a profiler proxy op
  // (addProfilerProxyOpIfNeeded: ncclProfilerNeedsProxy, KernelCh in the task's mask; none for a self P2P).
  // 2.31.2 also gives a host callback to a plan with profiler ops (hasProfilerOps: a task with KernelCh
  // in its mask, a self P2P included). A replay runs what the capture recorded: the host callbacks of
  // the plans that had them then.
  const bool profiler_ops = prof.has(nccl_behaviour::host_callback_for_profiler_ops);
  for (std::size_t j = 0; j < pl.n_order; ++j) {
    const std::size_t i = pl.order[j];
    const pending_op& p = out[i];
    const bool kch = p.kernel_events && (p.mask & abi::ev_kernel_ch);
    const bool proxy = mode == enqueue_mode::replay ? graph && i < max_graph_ops && graph->host_callback[i]
                                                    : (!p.self_p2p && (p.network || kch)) || (profiler_ops && kch);
    if (proxy) pl.has_proxy[pl.plan_of[i]] = true;
    out[i].plan_pos = std::uint16_t(j);
  }
  for (std::size_t j = 0; j < pl.n_order; ++j) {
    const std::size_t i = pl.order[j];
    out[i].plan_has_proxy = pl.has_proxy[pl.plan_of[i]];
    if (mode == enqueue_mode::capture && graph && i < max_graph_ops) graph->host_callback[i] = out[i].plan_has_proxy;
  }
  return pl;
}

}  // namespace ncclinsp::sim::detail
