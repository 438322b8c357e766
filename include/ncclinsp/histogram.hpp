#pragma once
/// Duration histogram layout shared by the collector and the serializers: fixed upper bounds in
/// seconds (Prometheus `le`), the last bucket is +Inf. Thread-safety: constants and pure functions.

#include <array>
#include <cstddef>
#include <cstdint>

namespace ncclinsp {

inline constexpr std::array<std::uint64_t, 19> duration_bounds_ns = {
    10'000,      25'000,        50'000,        100'000,       250'000,       500'000,     1'000'000,
    2'500'000,   5'000'000,     10'000'000,    25'000'000,    50'000'000,    100'000'000, 250'000'000,
    500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
/// Number of histogram counters including the +Inf bucket.
inline constexpr std::size_t duration_buckets = duration_bounds_ns.size() + 1;

/// Index of the first bucket whose upper bound is >= ns (non-cumulative counts). Hot path:
/// a branch-light linear scan over 19 constants beats a binary search at this size.
constexpr std::size_t duration_bucket(std::uint64_t ns) noexcept {
  std::size_t i = 0;
  while (i < duration_bounds_ns.size() && ns > duration_bounds_ns[i]) ++i;
  return i;
}

}  // namespace ncclinsp
