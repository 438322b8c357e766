#pragma once
/// The clocks, read in one place: steady_ns (CLOCK_MONOTONIC, steady_clock's epoch: in-flight ages,
/// deadlines), coarse_ns (CLOCK_MONOTONIC_COARSE, same epoch, a cheaper vDSO read for the hot
/// path) and unix_ns (CLOCK_REALTIME: timestamps in the exports). Each is one clock_gettime call:
/// noexcept, no allocation, any thread.

#include <time.h>

#include <cstdint>

namespace ncclinsp::detail {

inline std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}
inline std::uint64_t steady_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }
inline std::uint64_t coarse_ns() noexcept { return clock_ns(CLOCK_MONOTONIC_COARSE); }
inline std::uint64_t unix_ns() noexcept { return clock_ns(CLOCK_REALTIME); }

}  // namespace ncclinsp::detail
