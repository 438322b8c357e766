#pragma once
/// The collector's per-thread shard: an open-addressed table of statistics cells keyed by
/// cell_key (cell_key.hpp), plus the thread's record_ring when per-op records are on; and how
/// one completed op is added to a cell.
///
/// Thread-safety: a shard has one writer (the thread whose thread_slot() it is), except the last
/// shard of a collector, shared by the threads beyond max_shards - 1, whose writers use atomic
/// read-modify-writes (`exclusive` = false). The exporter only reads cells (acquire on the key).
/// Hot: find() and add_op(), on every completed op: noexcept, no lock, no allocation; each cell is
/// its own cache line. Only the owner reclaims a stale cell (its communicator gone or reused).

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/collector/cell_key.hpp"
#include "ncclinsp/collector/record_ring.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/histogram.hpp"
#include "ncclinsp/model.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp::detail {

/// cell_stats' fields as atomics (for_each_stat walks both).
struct alignas(cache_line) atomic_cell {
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::uint64_t> ops{0}, invalid{0}, bytes{0}, busy_ns{0}, bw_count{0};
  std::atomic<double> bus_bytes{0}, log_busbw_sum{0};
  std::array<std::atomic<std::uint64_t>, duration_buckets> hist{};
};

/// Single-writer shards use a plain load+store (no lock prefix); the shared overflow shard uses RMW.
template <class T>
inline void bump(std::atomic<T>& a, std::type_identity_t<T> v, bool exclusive) noexcept {
  if (exclusive) NCCLINSP_LIKELY
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  else
    a.fetch_add(v, std::memory_order_relaxed);
}

/// Hot: adds one completed op of duration `dur` to `cl`; `valid` = sized, timed and of a known
/// function (else only counted as invalid); `nranks` gives the bus factor.
NCCLINSP_INLINE void add_op(atomic_cell& cl, const op_record& op, std::uint64_t dur, bool valid, int nranks,
                            bool exclusive) noexcept {
  bump(cl.ops, 1, exclusive);
  if (!valid) NCCLINSP_UNLIKELY {
    bump(cl.invalid, 1, exclusive);
    return;
  }
  bump(cl.bytes, op.bytes, exclusive);
  bump(cl.busy_ns, dur, exclusive);
  bump(cl.hist[duration_bucket(dur)], 1, exclusive);
  const double bb = bus_bytes(op.fn, op.bytes, nranks);
  if (bb > 0) {
    bump(cl.bus_bytes, bb, exclusive);
    bump(cl.bw_count, 1, exclusive);
    bump(cl.log_busbw_sum, std::log(bb / static_cast<double>(dur)), exclusive);
  }
}

template <class Traits>
struct shard {
  static_assert((Traits::cells_per_shard & (Traits::cells_per_shard - 1)) == 0,
                "cells_per_shard must be a power of two");

  std::unique_ptr<atomic_cell[]> cells{new atomic_cell[Traits::cells_per_shard]};
  record_ring ring;                                              // empty without per-op records
  alignas(cache_line) std::atomic<std::uint64_t> table_full{0};  // ops that found no cell

  /// Exporter: adds the counts of every used cell to totals[key].
  template <class Map>
  void sum_into(Map& totals) const {
    for (std::uint32_t i = 0; i < Traits::cells_per_shard; ++i) {
      const std::uint64_t key = cells[i].key.load(std::memory_order_acquire);
      if (key == 0) continue;
      for_each_stat(totals[key], cells[i], [](auto& sum, const auto& v) { sum += v.load(std::memory_order_relaxed); });
    }
  }

  /// Hot: the cell of `key`, claimed if new; nullptr when the table is full. `stale(key)` says
  /// whether a cell's communicator is gone or reused: the owner (`exclusive`) reclaims such a
  /// cell if `key` is not found further on.
  template <class Stale>
  atomic_cell* find(std::uint64_t key, bool exclusive, Stale&& stale) noexcept {
    constexpr std::uint32_t mask = Traits::cells_per_shard - 1;
    std::uint32_t i = static_cast<std::uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 40) & mask;
    atomic_cell* reusable = nullptr;
    for (std::uint32_t probe = 0; probe < Traits::cells_per_shard; ++probe, i = (i + 1) & mask) {
      atomic_cell& c = cells[i];
      std::uint64_t k = c.key.load(std::memory_order_relaxed);
      if (k == key) NCCLINSP_LIKELY
        return &c;
      if (k != 0) {
        // Only the owner rewrites its cells; a stale one (finalized communicator) is reclaimed
        // if the key is not found further on.
        if (exclusive && !reusable && stale(k)) reusable = &c;
        continue;
      }
      if (reusable) break;
      if (exclusive) {
        c.key.store(key, std::memory_order_release);  // publish: the exporter reads keys with acquire
        return &c;
      }
      if (c.key.compare_exchange_strong(k, key, std::memory_order_acq_rel) || k == key) return &c;
    }
    if (reusable) NCCLINSP_UNLIKELY {
      reusable->key.store(0, std::memory_order_release);  // the exporter skips it while it is rewritten
      for_each_stat(*reusable, *reusable, [](auto& v, auto&) { v.store(0, std::memory_order_relaxed); });
      reusable->key.store(key, std::memory_order_release);
      return reusable;
    }
    return nullptr;
  }
};

}  // namespace ncclinsp::detail
