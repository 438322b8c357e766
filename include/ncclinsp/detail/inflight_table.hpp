#pragma once
/// The in-flight op table of one communicator, shared by the plugin (plugin/comm_state.hpp) and the
/// embedded mode (inspector.hpp): a fixed array of slots handed out lock-free by a slot_bitmap, each
/// with a generation (so a late or repeated stop/end of a reused slot is recognised) and the time
/// its op started (0 = free), which gives the in-flight count and the oldest age (the hang signal).
/// `Slot` has at least `std::atomic<std::uint32_t> gen` and `std::atomic<std::uint64_t> started_at`.
/// Thread-safety: alloc/release/release_if from any thread (hot: no lock, no allocation);
/// oldest/inflight from the exporter thread (relaxed scans); reset cold.

#include <atomic>
#include <cstdint>
#include <memory>

#include "ncclinsp/detail/slot_bitmap.hpp"

namespace ncclinsp::detail {

template <class Slot>
class inflight_table {
 public:
  explicit inflight_table(std::uint32_t size) : size_(size), slots_(new Slot[size]), free_(size) {}

  std::uint32_t size() const noexcept { return size_; }
  Slot& operator[](std::uint32_t i) noexcept { return slots_[i]; }
  const Slot& operator[](std::uint32_t i) const noexcept { return slots_[i]; }
  /// Index of a slot of this table.
  std::uint32_t index_of(const Slot& s) const noexcept { return static_cast<std::uint32_t>(&s - slots_.get()); }

  /// A free slot (acquire: the previous holder's writes are visible), or no_index.
  std::uint32_t alloc() noexcept { return free_.alloc(); }

  /// Frees a slot whose one remaining holder is the caller: the generation has one writer here,
  /// so it is a plain increment (no locked instruction, hot path).
  void release(std::uint32_t idx) noexcept {
    Slot& s = slots_[idx];
    s.started_at.store(0, std::memory_order_relaxed);
    s.gen.store(s.gen.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    free_.release(idx);
  }
  /// Frees the slot if it is still in generation `gen`; false when it was freed already (a second
  /// end(), or the table was reset). Callers may race: exactly one of them frees it.
  bool release_if(std::uint32_t idx, std::uint32_t gen) noexcept {
    std::uint32_t g = gen;
    if (!slots_[idx].gen.compare_exchange_strong(g, gen + 1, std::memory_order_relaxed)) return false;
    slots_[idx].started_at.store(0, std::memory_order_relaxed);
    free_.release(idx);
    return true;
  }

  /// Start time of the oldest op in flight, 0 if none.
  std::uint64_t oldest() const noexcept {
    std::uint64_t best = 0;
    for (std::uint32_t i = 0; i < size_; ++i) {
      const std::uint64_t t = slots_[i].started_at.load(std::memory_order_relaxed);
      if (t && (!best || t < best)) best = t;
    }
    return best;
  }
  /// Ops in flight.
  std::uint64_t inflight() const noexcept {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < size_; ++i) n += slots_[i].started_at.load(std::memory_order_relaxed) != 0;
    return n;
  }
  /// Frees every slot and moves each to its next generation, so that no handle given out before
  /// names a slot afterwards, even one whose op was completed but not yet released (cold: the
  /// table is reused for a new communicator and no holder is left).
  void recycle() noexcept {
    for (std::uint32_t i = 0; i < size_; ++i) {
      slots_[i].started_at.store(0, std::memory_order_relaxed);
      slots_[i].gen.store(slots_[i].gen.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      free_.release(i);
    }
  }
  /// Frees every slot still in flight (cold: the table goes to a new communicator).
  void reset() noexcept {
    for (std::uint32_t i = 0; i < size_; ++i)
      if (slots_[i].started_at.load(std::memory_order_relaxed))
        release_if(i, slots_[i].gen.load(std::memory_order_relaxed));
  }

 private:
  std::uint32_t size_;
  std::unique_ptr<Slot[]> slots_;
  slot_bitmap free_;
};

}  // namespace ncclinsp::detail
