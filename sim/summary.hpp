#pragma once
/// ncclinsp-sim's `--summary` JSON: configuration, faults, expected busbw per (comm, collective, size)
/// nominal and under each fault, TFLOP/s per phase (sim/README.md).

#include "job_model.hpp"

#include <string>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

void write_summary(const options& o, const model& m, const std::string& path);

}  // namespace ncclinsp::sim::app
