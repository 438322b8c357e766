#pragma once
/// The environment (env_options: NCCL_INSPECTOR_*, NCCLINSP_*) mapped once onto what a front end
/// runs with, for both of them: the plugin (plugin/plugin_state.hpp) and the embedded inspector
/// (inspector_options::from). The export interval is env_options::export_interval(); the sinks are
/// sinks_from_options (sinks/from_options.hpp), built where the exporter starts. Cold path.

#include <cstdint>
#include <utility>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/detector.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/op_filter.hpp"
#include "ncclinsp/sinks/from_options.hpp"

namespace ncclinsp {

struct runtime_options {
  op_filter filter{};               ///< NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, NCCL_INSPECTOR_ENABLE_P2P
  std::uint32_t inflight_pool = 0;  ///< in-flight ops tracked per communicator: the coll pool + the P2P pool
  collector_options collector{};    ///< collector_options_from (sinks/from_options.hpp)
  detector_options detector{};      ///< detector_options_from (detector.hpp)
};

/// `nccl_events` and `id` as collector_options_from: the plugin passes true (NCCL's own events
/// give op traces and proxy accounting a source), the embedded inspector false.
inline runtime_options runtime_options_from(const env_options& o, bool nccl_events, process_identity id = {}) {
  return {.filter = {.min_size_bytes = o.min_size_bytes, .p2p = o.enable_p2p},
          .inflight_pool = o.coll_pool_size + (o.enable_p2p ? o.p2p_pool_size : 0),
          .collector = collector_options_from(o, nccl_events, std::move(id)),
          .detector = detector_options_from(o)};
}

}  // namespace ncclinsp
