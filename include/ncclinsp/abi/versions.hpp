#pragma once
/// The one list of profiler ABI versions ncclinsp speaks, and the dispatcher from a runtime version
/// number to code templated on it. Adding ABI v8 means: its structs in nccl_profiler.hpp, a
/// `version<8>` below, 8 appended to `versions`, and its table in plugin/exports.cpp and
/// plugin/exports.map (docs/layout.md, "Adding ABI v8", which also says what NCCL behaviour to
/// re-check); every loop, range check and dispatch over
/// versions (simulator, tests, fuzzer) follows this list, and a static_assert names each file
/// that defines one table per version by hand.
/// Thread-safety: types and constants only.

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "ncclinsp/abi/nccl_profiler.hpp"

namespace ncclinsp::abi {

/// Versions we export and the simulator drives, oldest first.
inline constexpr std::array versions = {4, 5, 6, 7};
inline constexpr int oldest = versions.front();
inline constexpr int newest = versions.back();

/// Per-version types: the event descriptor and the exported table.
template <int V>
struct version;
template <>
struct version<4> {
  using descr = descr_v4;
  using table = profiler_v4;
};
template <>
struct version<5> {
  using descr = descr_v5;
  using table = profiler_v5;
};
template <>
struct version<6> {
  using descr = descr_v6;
  using table = profiler_v6;
};
template <>
struct version<7> {
  using descr = descr_v7;
  using table = profiler_v7;
};

constexpr bool is_version(int v) noexcept {
  for (int x : versions)
    if (x == v) return true;
  return false;
}

/// Calls f(std::integral_constant<int, V>{}) for the V in `versions` equal to `v`; returns false
/// (and calls nothing) when `v` is not one of them.
template <class F>
constexpr bool with_abi(int v, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return ((v == versions[I] ? (f(std::integral_constant<int, versions[I]>{}), true) : false) || ...);
  }
  (std::make_index_sequence<versions.size()>{});
}

}  // namespace ncclinsp::abi
