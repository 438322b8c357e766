#pragma once
/// ncclinsp-sim's workload: one training step's op groups (`build_program`; the serving one from
/// serving.hpp), and nccl-tests traffic per op. Its vocabulary (communicators, ops) is workload_types.hpp.
/// Thread-safety: pure functions.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "nccl_vocab.hpp"
#include "serving.hpp"
#include "workload_types.hpp"

#include <ncclinsp/bandwidth.hpp>
#include <ncclinsp/model.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ncclinsp::sim::job {

/// Marks the release-driven options on the training program (--cuda-graphs, --collnet).
inline void mark_program(const options& o, std::vector<sim_group>& g) {
  for (auto& grp : g)
    for (auto& op : grp.ops) {
      if (o.cuda_graphs && op.comm == comm_kind::tp && op.func == nccl_func::all_reduce && !op.ce) op.graph = true;
      if (o.collnet && op.comm == comm_kind::dp && op.func == nccl_func::all_reduce) {
        op.collnet = true;
        op.algo = "COLLNET_DIRECT";
      }
    }
}

inline std::vector<sim_group> build_program(const options& o) {
  if (o.serving) return build_serving_program(o);
  if (o.cases || o.alltoall) return {};  // their own sequences: cases_workload.hpp, alltoall_workload.hpp
  const std::size_t ag = 32 * mib, ar_tp = 32 * mib, ar_dp = 128 * mib;
  auto tag = [&](u64 t) { return o.user_tags ? t : 0; };
  std::vector<sim_group> g;
  g.push_back(
      {0.0, {{comm_kind::fsdp, nccl_func::broadcast, nccl_dtype::bfloat16, 4096, "RING", "LL", 1, -1, tag(9)}}, true});
  g.push_back({0.10,
               {{comm_kind::fsdp, nccl_func::all_gather, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(1)},
                {comm_kind::fsdp, nccl_func::all_gather, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(1)}}});
  g.push_back(
      {0.15, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, ar_tp, "NVLS", "SIMPLE", 16, -1, tag(2)}}});
  {
    sim_op small{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, 1 * mib, "RING", "LL", 2, -1, tag(2)};
    small.sym = o.sym_kernels;
    g.push_back({0.15, {small}});
  }
  if (o.nodes > 1) {
    sim_op send{comm_kind::pp, nccl_func::send, nccl_dtype::bfloat16, 8 * mib, "", "", 2, -1};
    send.p2p_dir = +1;
    sim_op recv{comm_kind::pp, nccl_func::recv, nccl_dtype::bfloat16, 8 * mib, "", "", 2, -1};
    recv.p2p_dir = -1;
    g.push_back({0.05, {send, recv}});
  }
  g.push_back(
      {0.25, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, ar_tp, "NVLS", "SIMPLE", 16, -1, tag(2)}}});
  g.push_back(
      {0.15,
       {{comm_kind::fsdp, nccl_func::reduce_scatter, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(3)},
        {comm_kind::fsdp, nccl_func::reduce_scatter, nccl_dtype::bfloat16, ag, "RING", "SIMPLE", 8, -1, tag(3)}}});
  if (o.nodes > 1)
    g.push_back(
        {0.10, {{comm_kind::dp, nccl_func::all_reduce, nccl_dtype::float32, ar_dp, "TREE", "SIMPLE", 16, -1, tag(4)}}});
  g.push_back(
      {0.05, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::uint8, 128 * 1024, "RING", "LL", 1, -1, tag(5)}}});
  if (o.ce_colls) {
    sim_op ce{comm_kind::tp, nccl_func::all_gather, nccl_dtype::bfloat16, 1 * mib, "", "", 0, -1, tag(6)};
    ce.ce = true;
    g.push_back({0.0, {ce}});
  }
  // Drop ops whose communicator would have one rank (NCCL emits nothing for nRanks == 1).
  for (auto& grp : g) std::erase_if(grp.ops, [&](const sim_op& op) { return comm_size(o, op.comm) < 2; });
  std::erase_if(g, [](const sim_group& grp) { return grp.ops.empty(); });
  mark_program(o, g);
  return g;
}

/// nccl-tests: S (the "size") and the bus factor, the library's (ncclinsp/bandwidth.hpp), so the
/// simulated time and the plugin's bandwidth use one formula.
struct traffic {
  double size_bytes;
  double factor;
};
inline traffic traffic_of(const sim_op& op, int n) {
  const ncclinsp::func f = ncclinsp::parse_func(func_name(op.func));
  return {ncclinsp::traffic_bytes(f, op.bytes, n), ncclinsp::bus_factor(f, n)};
}

}  // namespace ncclinsp::sim::job
