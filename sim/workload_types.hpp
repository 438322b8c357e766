#pragma once
/// ncclinsp-sim's workload vocabulary: the communicator kinds (tp, fsdp, dp, pp) and their sizes, the
/// link constants of the physics, and one op (`sim_op`) and op group (`sim_group`) of a step's program.
/// Thread-safety: plain data and pure functions.

#include "job_options.hpp"
#include "nccl_vocab.hpp"

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

}  // namespace ncclinsp::sim::job
