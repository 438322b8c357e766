#pragma once
/// The op filter both front ends apply, the plugin (plugin/op_lifecycle.hpp) and the embedded
/// inspector (inspector.hpp): Send/Recv followed or not (NCCL_INSPECTOR_ENABLE_P2P) and the size
/// below which an op is counted filtered (filter_reason::min_size) instead of measured
/// (NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES). Filled by runtime_options_from (runtime_options.hpp) or
/// by hand. Hot path: reads of two values fixed at configuration.

#include <cstdint>

#include "ncclinsp/model.hpp"

namespace ncclinsp {

struct op_filter {
  std::uint64_t min_size_bytes = 0;  ///< smaller ops are counted filtered, not measured
  bool p2p = true;                   ///< false: Send/Recv are not followed at all (not counted)

  /// Whether ops of `f` are not followed at all (Send/Recv while p2p is off).
  constexpr bool skips(func f) const noexcept { return is_p2p(f) && !p2p; }
  /// Whether an op of `bytes` is below the size threshold; an op of unknown size never is.
  constexpr bool too_small(bool bytes_valid, std::uint64_t bytes) const noexcept {
    return bytes_valid && bytes < min_size_bytes;
  }
};

}  // namespace ncclinsp
