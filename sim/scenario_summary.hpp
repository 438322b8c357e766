#pragma once
/// ncclinsp-sim's `--summary` truth about the rank faults and the network stall: `scenarios` (kind,
/// culprit, onset, duration), `blocked` (every communicator instance in which ranks block: op, sequence
/// number, ranks in flight, members that never entered) and `waited` (per --pause-rank, the op its peers
/// waited in and until when).

#include "job_model.hpp"

#include <ncclinsp/format/json_writer.hpp>

namespace ncclinsp::sim::app {

using namespace ncclinsp::sim::job;

/// Writes the keys `scenarios`, `blocked` and `waited` into the open object of `j`; numbers with
/// `precision` significant digits.
void write_scenarios(ncclinsp::format::json_writer& j, const options& o, const model& m, int precision);

}  // namespace ncclinsp::sim::app
