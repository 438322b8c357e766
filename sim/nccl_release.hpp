#pragma once
/// NCCL releases as the simulator reproduces them (`--nccl 2.27|2.28|2.30|2.31.2`) and the one route
/// of every version decision the driver takes: `nccl_profile`, the rows of the behaviour table
/// (ncclinsp/abi/nccl_behaviours.hpp) that hold for the NCCL driving the plugin's table. A behaviour
/// shows only where the workload asks for what triggers it (a graph replay, a CollNet or symmetric
/// collective, a Broadcast, an abort), so a default run is the same at every release.
/// Thread-safety: constants and pure functions only.

#include <ncclinsp/abi/nccl_behaviours.hpp>

#include <cstdint>
#include <string_view>

namespace ncclinsp::sim {

using abi::nccl_behaviour;

/// A release the simulator reproduces: its name, NCCL_VERSION_CODE (the `nccl=` of a --trace
/// header) and native profiler table (profiler.cc ncclProfilerPluginLoad: newest first).
struct nccl_release {
  const char* name;
  int version_code;
  int abi;
  /// `b` holds at this release driving its native table.
  constexpr bool has(nccl_behaviour b) const { return abi::nccl_holds(b, version_code, abi, abi); }
};

inline constexpr nccl_release release_2_27{"2.27", 22707, 4};
inline constexpr nccl_release release_2_28{"2.28", 22809, 5};
inline constexpr nccl_release release_2_30{"2.30", 23007, 6};
inline constexpr nccl_release release_2_31_2{"2.31.2", 23102, 7};
inline constexpr nccl_release releases[] = {release_2_27, release_2_28, release_2_30, release_2_31_2};
inline constexpr const nccl_release& newest_release = release_2_31_2;

/// The release named `s` ("2.27", "2.28", "2.30", "2.31.2"; "2.29" and "2.31" are accepted for the
/// release whose behaviour they share), or nullptr.
inline const nccl_release* find_release(std::string_view s) noexcept {
  if (s == "2.29") s = "2.30";
  if (s == "2.31") s = "2.31.2";
  for (const auto& r : releases)
    if (s == r.name) return &r;
  return nullptr;
}

/// The behaviours one communicator reproduces, one bit per row of the table.
struct nccl_profile {
  std::uint64_t bits = 0;
  constexpr bool has(nccl_behaviour b) const noexcept { return bits >> unsigned(b) & 1u; }

  /// `release` driving a plugin loaded through table `table_abi` (through the release's shim where
  /// the table is older than its native one). nullptr: the simulator's model, which default runs
  /// keep: the release that natively loads `table_abi` (with `shim`, the newest release through its
  /// shim), limited to the rows marked `model` and the shim's rows; every other behaviour that differs
  /// between releases is left out.
  static constexpr nccl_profile of(const nccl_release* release, int table_abi, bool shim) noexcept {
    const nccl_release& driver = release ? *release : shim ? newest_release : native(table_abi);
    nccl_profile p;
    for (const abi::nccl_behaviour_row& r : abi::nccl_behaviours) {
      if (!release && !r.model && !r.shim) continue;
      if (abi::nccl_holds(r.id, driver.version_code, driver.abi, table_abi))
        p.bits |= std::uint64_t(1) << unsigned(r.id);
    }
    return p;
  }

 private:
  static constexpr const nccl_release& native(int table_abi) noexcept {
    for (const auto& r : releases)
      if (r.abi == table_abi) return r;
    return newest_release;
  }
};

}  // namespace ncclinsp::sim
