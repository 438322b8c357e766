#pragma once
/// Compile-time configuration of a collector. Derive from default_traits and override a member:
///   struct my_traits : ncclinsp::default_traits { static constexpr std::uint32_t cells_per_shard = 4096; };
/// Use one traits type per process for a given collector instance. Capacities only: the native
/// `message_size` bucketer is the Prometheus sink's template argument (basic_prom_textfile_sink<B>),
/// runtime settings are collector_options / exporter_options / inspector_options.

#include <cstdint>

namespace ncclinsp {

struct default_traits {
  /// Per-thread shards (the last one is shared by threads beyond this count, with atomic RMW).
  static constexpr std::uint32_t max_shards = 64;
  /// Distinct (comm, function, algo, proto, timing, size, tag) cells one shard can hold.
  static constexpr std::uint32_t cells_per_shard = 1024;
  /// Communicators registered over the collector's lifetime.
  static constexpr std::uint32_t max_comms = 4096;
  /// Distinct user tags that become a label value (others share "other").
  static constexpr std::uint32_t max_user_tags = 30;
};

}  // namespace ncclinsp
