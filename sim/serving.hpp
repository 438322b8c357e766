#pragma once
/// ncclinsp-sim's serving workload (`--workload serving`): tensor-parallel decode as vLLM or SGLang run it,
/// on the tp communicator of each node. Every step: four 1 MiB AllReduce (one per layer block) launched
/// by a CUDA-graph replay, with the eager ops a serving engine issues beside them: a 16 MiB AllReduce
/// (a prefill chunk) and a 256 KiB AllGather (logits).
/// Thread-safety: pure functions.

#include "workload_types.hpp"

#include <vector>

namespace ncclinsp::sim::job {

inline std::vector<sim_group> build_serving_program(const options& o) {
  std::vector<sim_group> g;
  for (int layer = 0; layer < 4; ++layer) {
    sim_op ar{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, 1 * mib, "RING", "LL128", 4, -1};
    ar.graph = true;
    g.push_back({layer == 0 ? 0.40 : 0.15, {ar}});
  }
  g.push_back(
      {0.10, {{comm_kind::tp, nccl_func::all_reduce, nccl_dtype::bfloat16, 16 * mib, "RING", "SIMPLE", 8, -1}}});
  g.push_back({0.05, {{comm_kind::tp, nccl_func::all_gather, nccl_dtype::bfloat16, 256 * 1024, "RING", "LL", 2, -1}}});
  for (auto& grp : g) std::erase_if(grp.ops, [&](const sim_op& op) { return comm_size(o, op.comm) < 2; });
  std::erase_if(g, [](const sim_group& grp) { return grp.ops.empty(); });
  return g;
}

}  // namespace ncclinsp::sim::job
