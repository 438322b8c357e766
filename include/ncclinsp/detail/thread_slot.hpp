#pragma once
/// A small integer per live thread, recycled when the thread exits, so per-thread shards stay
/// bounded even when NCCL creates and destroys profiler threads per communicator.
/// Non-template inline functions: one registry per DSO (the plugin's hidden visibility gives it
/// its own). Thread-safety: lock-free; thread_slot() is hot-path safe after the first call.

#include <atomic>
#include <cstdint>

namespace ncclinsp::detail {

inline constexpr std::uint32_t max_thread_slots = 256;
/// Returned when every slot is taken: callers fall back to a shared, atomic-RMW shard.
inline constexpr std::uint32_t overflow_slot = max_thread_slots;

struct slot_registry {
  std::atomic<std::uint64_t> used[max_thread_slots / 64] = {};
};
inline slot_registry& thread_slot_registry() noexcept {
  static slot_registry r;
  return r;
}

/// Owns this thread's slot; its destructor (at thread exit) hands the slot back. A thread that
/// still calls in after that (from another thread_local's destructor) uses overflow_slot.
struct thread_slot_holder {
  std::uint32_t slot = overflow_slot;
  std::uint32_t* cache;  // thread_slot()'s cached slot + 1, in this same thread's TLS
  explicit thread_slot_holder(std::uint32_t* c) noexcept : cache(c) {
    auto& r = thread_slot_registry();
    for (std::uint32_t w = 0; w < max_thread_slots / 64 && slot == overflow_slot; ++w) {
      std::uint64_t cur = r.used[w].load(std::memory_order_relaxed);
      while (~cur != 0) {
        const int bit = __builtin_ctzll(~cur);
        // acquire: see the previous owner's writes to the shard this slot indexes.
        if (r.used[w].compare_exchange_weak(cur, cur | (std::uint64_t{1} << bit), std::memory_order_acquire)) {
          slot = w * 64 + static_cast<std::uint32_t>(bit);
          break;
        }
      }
    }
    *cache = slot + 1;
  }
  ~thread_slot_holder() {
    *cache = overflow_slot + 1;  // from now on this thread uses the shared shard, never `slot`
    if (slot == overflow_slot) return;
    // release: publish this thread's shard writes to the next owner of the slot.
    thread_slot_registry().used[slot / 64].fetch_and(~(std::uint64_t{1} << (slot % 64)), std::memory_order_release);
  }
};

/// First call on a thread: registers the holder (a guarded thread_local, for its destructor).
[[gnu::noinline, gnu::cold]] inline std::uint32_t register_thread_slot(std::uint32_t& cache) noexcept {
  thread_local thread_slot_holder h(&cache);
  return h.slot;
}

/// This thread's slot in [0, max_thread_slots) or overflow_slot.
/// Hot path: one TLS read of a constant-initialised, trivially destructible integer (no guard,
/// no init call). The TLS model stays the compiler's default for -fPIC code (general dynamic),
/// which is what a dlopen'ed plugin needs; initial-exec would not be safe there.
inline std::uint32_t thread_slot() noexcept {
  thread_local std::uint32_t cache = 0;  // slot + 1; 0 = not registered yet
  if (cache != 0) [[likely]]
    return cache - 1;
  return register_thread_slot(cache);
}

}  // namespace ncclinsp::detail
