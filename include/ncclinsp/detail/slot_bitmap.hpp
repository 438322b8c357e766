#pragma once
/// A fixed pool of indices [0, size) handed out lock-free: one bit per index, CAS on 64-bit words,
/// a hint to the last word that had room. Used for in-flight op slots (plugin, embedded mode, the
/// CUDA event timer's pool).
/// Thread-safety: alloc/release from any thread; no allocation after construction.

#include <atomic>
#include <cstdint>
#include <memory>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/no_index.hpp"

namespace ncclinsp::detail {

class slot_bitmap {
 public:
  explicit slot_bitmap(std::uint32_t size)
      : size_(size), words_((size + 63) / 64), used_(new std::atomic<std::uint64_t>[words_]()) {}

  std::uint32_t size() const noexcept { return size_; }

  /// A free index, or no_index when all are taken. acquire: see the previous holder's writes.
  std::uint32_t alloc() noexcept {
    const std::uint32_t start = hint_.load(std::memory_order_relaxed);                        // < words_
    for (std::uint32_t k = 0, w = start; k < words_; ++k, w = w + 1 == words_ ? 0 : w + 1) {  // no division
      std::uint64_t cur = used_[w].load(std::memory_order_relaxed);
      while (~cur) {
        const auto bit = static_cast<std::uint32_t>(__builtin_ctzll(~cur));
        const std::uint32_t idx = w * 64 + bit;
        if (idx >= size_) break;
        if (used_[w].compare_exchange_weak(cur, cur | (std::uint64_t{1} << bit), std::memory_order_acquire)) {
          if (w != start) hint_.store(w, std::memory_order_relaxed);
          return idx;
        }
      }
    }
    return no_index;
  }

  /// Takes `idx` out of the pool for good (cold: e.g. a slot whose resources could not be made).
  void retire(std::uint32_t idx) noexcept {
    used_[idx / 64].fetch_or(std::uint64_t{1} << (idx % 64), std::memory_order_relaxed);
  }

  /// Returns `idx` to the pool. release: publish this holder's writes to the next one.
  void release(std::uint32_t idx) noexcept {
    used_[idx / 64].fetch_and(~(std::uint64_t{1} << (idx % 64)), std::memory_order_release);
  }

 private:
  std::uint32_t size_, words_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> used_;
  alignas(cache_line) std::atomic<std::uint32_t> hint_{0};
};

}  // namespace ncclinsp::detail
