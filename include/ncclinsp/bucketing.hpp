#pragma once
/// Message-size bucketing policies. A bucketer maps a byte count to a bucket index in O(1) and
/// names buckets with a bounded label set.
///  - pow2_bucketer: native; bucket 0 is 0 bytes, bucket k>=1 holds [2^(k-1), 2^k).
///  - inspector_bucketer: NVIDIA Inspector's labels, reproduced exactly ("1000-1001B", "1-2KB",
///    "17-18MB", "4-5GB"); its buckets nest inside pow2 buckets, so the collector keys cells by
///    the Inspector bucket and derives the native label from the bucket's lower bound.
/// Thread-safety: stateless; index() is hot-path safe (no allocation, no branches on tables).

#include <bit>
#include <concepts>
#include <cstdint>
#include <string>

namespace ncclinsp {

template <class B>
concept bucketer = requires(std::uint64_t bytes, std::uint32_t idx) {
  { B::index(bytes) }
  noexcept->std::same_as<std::uint32_t>;
  { B::lower_bound(idx) }
  noexcept->std::same_as<std::uint64_t>;
  { B::label(idx) } -> std::same_as<std::string>;
  { B::bucket_count } -> std::convertible_to<std::uint32_t>;
};

namespace detail {
inline std::string binary_size(std::uint64_t v) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (v >= 1024 && (v % 1024) == 0 && u < 6) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + units[u];
}
}  // namespace detail

/// Power-of-two buckets: 65 labels at most ("0B", "1B-2B", ..., "4MiB-8MiB", ...).
struct pow2_bucketer {
  static constexpr std::uint32_t bucket_count = 65;
  static constexpr std::uint32_t index(std::uint64_t bytes) noexcept {
    return static_cast<std::uint32_t>(std::bit_width(bytes));
  }
  static constexpr std::uint64_t lower_bound(std::uint32_t idx) noexcept {
    return idx == 0 ? 0 : (std::uint64_t{1} << (idx - 1));
  }
  static std::string label(std::uint32_t idx) {
    if (idx == 0) return "0B";
    const std::uint64_t lo = lower_bound(idx);
    if (idx == 64) return detail::binary_size(lo) + "-16EiB";
    return detail::binary_size(lo) + "-" + detail::binary_size(lo * 2);
  }
};

/// NVIDIA Inspector's message_size buckets: divide by 1024 while >= 1024 (at most 4 times), floor,
/// label "<f>-<f+1><unit>" with units B, KB, MB, GB, TB. Index = unit << 26 | floor (29 bits).
struct inspector_bucketer {
  static constexpr std::uint32_t bucket_count = 5 * 1024;  // nominal; TB floors beyond 1023 exist
  static constexpr std::uint32_t index(std::uint64_t bytes) noexcept {
    const int w = static_cast<int>(std::bit_width(bytes));
    std::uint32_t unit = w > 10 ? static_cast<std::uint32_t>((w - 1) / 10) : 0;
    if (unit > 4) unit = 4;
    std::uint64_t fl = bytes >> (10 * unit);
    // TB floors reach 2^24 at most: unit (3 bits) | floor (26 bits) fits the collector's key.
    if (fl > 0x3FFFFFFu) fl = 0x3FFFFFFu;
    return unit << 26 | static_cast<std::uint32_t>(fl);
  }
  static constexpr std::uint64_t lower_bound(std::uint32_t idx) noexcept {
    return static_cast<std::uint64_t>(idx & 0x3FFFFFFu) << (10 * (idx >> 26));
  }
  static std::string label(std::uint32_t idx) {
    static constexpr const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    const std::uint64_t fl = idx & 0x3FFFFFFu;
    return std::to_string(fl) + "-" + std::to_string(fl + 1) + units[(idx >> 26) & 7u];
  }
};

static_assert(bucketer<pow2_bucketer>);
static_assert(bucketer<inspector_bucketer>);

}  // namespace ncclinsp
