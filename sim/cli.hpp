#pragma once
/// ncclinsp-sim's command line: every flag (sim/README.md's table) parsed into `job::options`, faults
/// validated, `--random-fault` drawn and sized against the nominal step.

#include "job_model.hpp"

#include <optional>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

/// nullopt: run with `o`; otherwise exit with that code (--help, a bad flag).
std::optional<int> parse_command_line(int argc, char** argv, options& o);

}  // namespace ncclinsp::sim::app
