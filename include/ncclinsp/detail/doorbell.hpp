#pragma once
/// doorbell: a 32-bit sequence word that one thread sleeps on (with a deadline) and any thread
/// rings. Ringing is one locked increment and one load; the futex syscall is made only when the
/// sleeper is actually asleep, so a producer that rings while the consumer is busy pays no
/// syscall. No lost wake-ups: the sleeper reads value() before it checks its condition and passes
/// it to wait_until(), which returns at once if the word moved since (the kernel compares it).
/// Thread-safety: ring() from any thread (also NCCL's, it never blocks); one sleeper at a time.

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

#include "ncclinsp/detail/platform.hpp"

namespace ncclinsp::detail {

class doorbell {
 public:
  std::uint32_t value() const noexcept { return seq_.load(std::memory_order_seq_cst); }

  /// Wakes the sleeper, if any. Never blocks.
  void ring() noexcept {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) NCCLINSP_UNLIKELY
      wake();
  }

  /// Sleeps until the word differs from `seen` or `deadline` passes (time_point::max(): no
  /// deadline). Spurious returns are possible; callers re-check their condition.
  void wait_until(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) noexcept {
    sleeping_.store(1, std::memory_order_seq_cst);
    if (seq_.load(std::memory_order_seq_cst) == seen) sleep(seen, deadline);
    sleeping_.store(0, std::memory_order_relaxed);
  }

 private:
#if defined(__linux__)
  NCCLINSP_COLD void wake() noexcept {
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
  }
  void sleep(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) noexcept {
    // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC time (steady_clock's clock on Linux).
    timespec ts{};
    const timespec* tp = nullptr;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
      ts.tv_sec = static_cast<time_t>(ns / 1000000000);
      ts.tv_nsec = static_cast<long>(ns % 1000000000);
      tp = &ts;
    }
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&seq_), FUTEX_WAIT_BITSET_PRIVATE, seen, tp, nullptr,
              FUTEX_BITSET_MATCH_ANY);
  }
#else
  void wake() noexcept {}
  void sleep(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) noexcept {  // polls (1 ms)
    while (seq_.load(std::memory_order_seq_cst) == seen && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
#endif
  static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);
  alignas(cache_line) std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint32_t> sleeping_{0};
};

}  // namespace ncclinsp::detail
