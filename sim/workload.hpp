#pragma once
/// ncclinsp-sim's workload: the communicators (tp, fsdp, dp, pp), one training step's op groups
/// (`build_program`), the link constants of the physics, and nccl-tests traffic per op.
/// Thread-safety: pure functions.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "nccl_vocab.hpp"

#include <ncclinsp/bandwidth.hpp>
#include <ncclinsp/model.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ncclinsp::sim::job {

// ---- workload ---------------------------------------------------------------------------------
enum class comm_kind : std::uint8_t { tp, fsdp, dp, pp };
inline constexpr int n_comm_kinds = 4;
constexpr const char* kind_name(comm_kind k) {
  switch (k) {
    case comm_kind::tp:
      return "tp";
    case comm_kind::fsdp:
      return "fsdp";
    case comm_kind::dp:
      return "dp";
    case comm_kind::pp:
      return "pp";
  }
  return "?";
}

inline constexpr double nvlink_busbw = 360e9;   // bytes/s
inline constexpr double network_busbw = 45e9;   // bytes/s per GPU
inline constexpr double nvlink_latency = 8e-6;  // s
inline constexpr double network_latency = 20e-6;
inline constexpr double jitter_frac = 0.02;
inline constexpr double nominal_tflops = 310.0;
inline constexpr double degraded_tflops = 268.0;  // at --net-degrade 50
inline constexpr std::size_t max_channels = 16;
inline constexpr int chunk_bytes = 1 << 19;  // NCCL step size (SIMPLE, 4 MiB buffer / 8 steps)

struct sim_op {
  comm_kind comm;
  nccl_func func;
  nccl_dtype dtype;
  std::size_t bytes;  ///< per-rank payload bytes (AG: send, RS: recv, AR: buffer, P2P: message)
  const char* algo;
  const char* proto;
  std::uint8_t n_channels;
  int channel_lo = -1;
  std::uint64_t tag = 0;
  bool sym = false;
  bool ce = false;
  int p2p_dir = 0;       ///< +1 send to next node, -1 recv from previous node
  bool graph = false;    ///< launched by a CUDA-graph replay (captured at its first step)
  bool collnet = false;  ///< CollNet (SHARP) algorithm
};
struct sim_group {
  double compute_frac;  ///< share of the step's compute time before this group
  std::vector<sim_op> ops;
  bool first_step_only = false;
};

inline int comm_size(const options& o, comm_kind k) {
  switch (k) {
    case comm_kind::tp:
      return o.gpus;
    case comm_kind::fsdp:
      return o.nodes * o.gpus;
    case comm_kind::dp:
    case comm_kind::pp:
      return o.nodes;
  }
  return 1;
}
inline bool comm_network(const options& o, comm_kind k) { return k != comm_kind::tp && o.nodes > 1; }

inline std::vector<sim_group> build_serving_program(const options& o);  // serving.hpp
/// Marks the release-driven options on a program (--cuda-graphs, --collnet).
inline void mark_program(const options& o, std::vector<sim_group>& g);

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

#include "serving.hpp"
