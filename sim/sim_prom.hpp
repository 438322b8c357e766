#pragma once
/// ncclinsp-sim's own metrics file (`ncclinsp_sim.prom`, one per process: a node's, or a GPU's with
/// --process-per-gpu): each rank's last step throughput and its completed steps, as a training
/// framework's exporter would publish them.
/// Thread-safety: reads atomics of the ranks; one writer thread per process.

#include <ncclinsp/detail/atomic_file.hpp>

#include <iterator>
#include <string>

#include <fmt/format.h>

namespace ncclinsp::sim::app {

/// The file's name: `ncclinsp_sim.prom`, or `ncclinsp_sim.gpu<k>.prom` for a one-GPU process (several
/// processes share a node's directory).
inline std::string sim_prom_name(int gpu_index) {
  return gpu_index < 0 ? std::string("ncclinsp_sim.prom") : "ncclinsp_sim.gpu" + std::to_string(gpu_index) + ".prom";
}

/// Writes `dir/name` atomically (a failed write keeps the old file). `Ranks`: a range of pointers to
/// objects with `node`, `global`, `tflops` and `steps` (atomics).
template <class Ranks>
void write_sim_prom(const std::string& dir, const std::string& name, const std::string& node_prefix,
                    const Ranks& ranks) {
  if (dir.empty()) return;
  std::string s =
      "# HELP ncclinsp_sim_step_tflops Throughput of the rank's last simulated training step, TFLOP/s per GPU.\n"
      "# TYPE ncclinsp_sim_step_tflops gauge\n";
  for (const auto& r : ranks)
    fmt::format_to(std::back_inserter(s), "ncclinsp_sim_step_tflops{{node=\"{}{}\",rank=\"{}\"}} {}\n", node_prefix,
                   r->node, r->global, r->tflops.load());
  s += "# HELP ncclinsp_sim_steps_total Simulated training steps completed by the rank.\n"
       "# TYPE ncclinsp_sim_steps_total counter\n";
  for (const auto& r : ranks)
    fmt::format_to(std::back_inserter(s), "ncclinsp_sim_steps_total{{node=\"{}{}\",rank=\"{}\"}} {}\n", node_prefix,
                   r->node, r->global, r->steps.load());
  ncclinsp::detail::write_file_atomic(dir, name, s);
}

}  // namespace ncclinsp::sim::app
