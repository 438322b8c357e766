#pragma once
/// Safe reclamation of memory that lock-free readers may still hold, at no cost to the readers
/// beyond two plain stores to their own cache line (quiescent-state reclamation with an
/// asymmetric fence, as userspace RCU's "membarrier" flavour).
///
/// Reader (hot path): `auto s = gate.enter();` before loading a published pointer (a seq_cst
/// load), and keep the section open while the pointee is used. Each thread marks its own line:
/// odd = inside.
/// Reclaimer (cold path): unpublish the pointer (a seq_cst store of nullptr), then
/// `quiesce(limit)`: it runs
/// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every running thread of the process
/// execute a full barrier, so every reader either is seen inside (its mark is odd) or loads the
/// pointer after the unpublish (nullptr). It then waits until each reader seen inside has left,
/// up to `limit`; true means nothing can still use the old pointer and it may be freed.
/// Without membarrier (old kernels, seccomp), readers mark with a seq_cst exchange instead (a
/// locked instruction, same guarantee). Threads past detail::max_thread_slots share one counter
/// (an atomic RMW each).
/// Thread-safety: enter() from any thread; quiesce() from one thread at a time (the caller's lock).

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/detail/thread_slot.hpp"

namespace ncclinsp::detail {

class reader_gate {
  struct alignas(cache_line) mark {
    std::atomic<std::uint64_t> seq{0};  // own slot: odd while inside; overflow slot: readers inside
  };

 public:
  reader_gate() noexcept
      : expedited_(::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0),
        marks_(new (std::nothrow) mark[max_thread_slots + 1]) {}

  /// Whether quiesce() uses membarrier: then a reader that marks elsewhere (a location the
  /// reclaimer scans after quiesce) may mark with a plain store and a compiler fence; without it,
  /// with a seq_cst exchange.
  bool expedited() const noexcept { return expedited_; }

  /// Whether construction got its marks (if not, enter() is inert and quiesce() always fails).
  bool ok() const noexcept { return marks_ != nullptr; }

  class section {
   public:
    section(const section&) = delete;
    section& operator=(const section&) = delete;
    ~section() {
      if (!m_) return;
      if (shared_)
        m_->seq.fetch_sub(1, std::memory_order_release);
      else
        m_->seq.store(v_ + 1, std::memory_order_release);  // even: left
    }

   private:
    friend class reader_gate;
    section(mark* m, bool shared, std::uint64_t v) noexcept : m_(m), shared_(shared), v_(v) {}
    mark* m_;
    bool shared_;
    std::uint64_t v_;
  };

  /// Opens a read section on this thread (hot path: no locked instruction with membarrier).
  /// The common case (membarrier available, the thread has its own slot) is inlined at the call
  /// site; the rest is out of line.
  [[nodiscard]] NCCLINSP_INLINE section enter() noexcept {
    const std::uint32_t slot = thread_slot();
    if (expedited_ && marks_ && slot != overflow_slot) NCCLINSP_LIKELY {
      mark& m = marks_[slot];
      const std::uint64_t v = m.seq.load(std::memory_order_relaxed) + 1;  // only this thread writes it
      m.seq.store(v, std::memory_order_relaxed);  // odd: inside; the reclaimer's membarrier orders it
      std::atomic_signal_fence(std::memory_order_seq_cst);
      return section(&m, false, v);
    }
    return enter_slow(slot);
  }

  /// After unpublishing: waits (up to `limit`) until no reader can hold what was unpublished.
  bool quiesce(std::chrono::nanoseconds limit) noexcept {
    if (!marks_) return false;
    if (expedited_) ::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (std::uint32_t i = 0; i <= max_thread_slots; ++i) {
      const std::uint64_t seen = marks_[i].seq.load(std::memory_order_seq_cst);
      if (i == overflow_slot) {
        while (marks_[i].seq.load(std::memory_order_acquire) != 0)
          if (!pause_until(deadline)) return false;
      } else if (seen & 1) {
        while (marks_[i].seq.load(std::memory_order_acquire) == seen)  // still in the section it was in
          if (!pause_until(deadline)) return false;
      }
    }
    return true;
  }

 private:
  static bool pause_until(std::chrono::steady_clock::time_point deadline) noexcept {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
    return true;
  }

  NCCLINSP_COLD section enter_slow(std::uint32_t slot) noexcept {
    if (!marks_) return section(nullptr, false, 0);
    mark& m = marks_[slot];
    if (slot == overflow_slot) {
      m.seq.fetch_add(1, std::memory_order_seq_cst);
      return section(&m, true, 0);
    }
    const std::uint64_t v = m.seq.load(std::memory_order_relaxed) + 1;  // only this thread writes it
    m.seq.exchange(v, std::memory_order_seq_cst);  // no membarrier: pairs with the seq_cst unpublish and scan
    return section(&m, false, v);
  }

  bool expedited_;
  std::unique_ptr<mark[]> marks_;
};

}  // namespace ncclinsp::detail
