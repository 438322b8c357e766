#pragma once
/// op_history: one communicator's last completed ops on this rank, for the state dump
/// (plugin/state_dumper.hpp): sequence number, function, size, peer, CPU start and end, GPU span.
///
/// Two rings of `depth` entries, one per completing path: ops completed by their last KernelCh
/// (the op's channel thread) and ops completed at their own stop (copy-engine collectives, ops
/// that get no KernelCh: the thread that stops them). NCCL delivers each path of one communicator
/// on one thread, so each ring has one writer: an entry is written with plain stores (no locked
/// instruction) into cache lines only that thread writes. The reader (the dumper's cold thread)
/// copies an entry between two reads of its stamp and drops it when the stamp changed (a seqlock):
/// an entry overwritten while it is read is never reported half old, half new.
/// Thread-safety: note() hot (its ring's one writer, no allocation); read() cold, any thread;
/// clear() cold, with no writer active (the communicator's state is recycled).

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <vector>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/model.hpp"

namespace ncclinsp::plugin {

/// One completed op as the dump reads it (plain data).
struct completed_op {
  std::uint64_t seq = 0;
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0;  ///< CLOCK_MONOTONIC_COARSE at its start (enqueue)
  std::uint64_t end_ns = 0;    ///< CLOCK_MONOTONIC_COARSE when its completion was seen
  std::uint64_t gpu_ns = 0;    ///< its GPU span when published GPU-timed, else 0
  std::int32_t peer = -1;      ///< Send/Recv peer, -1 for collectives
  func fn = func::unknown;
  bool bytes_valid = true;
};

class op_history {
 public:
  /// Entries per ring (a power of two): the dump lists the last `depth` ops of each path.
  static constexpr std::uint32_t depth = 32;
  enum path : std::uint32_t { by_channels = 0, at_stop = 1, path_count = 2 };

  /// Hot: the op just completed on `p`. Only that path's thread calls it.
  NCCLINSP_INLINE void note(path p, const op_record& r, std::uint64_t start_ns, std::uint64_t end_ns,
                            std::uint64_t gpu_ns) noexcept {
    ring& g = rings_[p];
    const std::uint64_t n = g.head.load(std::memory_order_relaxed);
    entry& e = g.e[n & (depth - 1)];
    e.stamp.store(0, std::memory_order_relaxed);  // being written
    std::atomic_thread_fence(std::memory_order_release);
    e.seq.store(r.seq, std::memory_order_relaxed);
    e.bytes.store(r.bytes_valid ? r.bytes : 0, std::memory_order_relaxed);
    e.start_ns.store(start_ns, std::memory_order_relaxed);
    e.end_ns.store(end_ns, std::memory_order_relaxed);
    e.gpu_ns.store(gpu_ns, std::memory_order_relaxed);
    e.peer_fn.store(pack(r), std::memory_order_relaxed);
    e.stamp.store(n + 1, std::memory_order_release);
    g.head.store(n + 1, std::memory_order_release);
    g.last_plus1[static_cast<std::size_t>(r.fn)].store(r.seq + 1, std::memory_order_relaxed);
  }

  /// Sequence number + 1 of the last op completed per function (0: none). NCCL numbers each
  /// collective function on its own (comm->seqNumber[func]); Send/Recv share this rank's count.
  using last_seqs = std::array<std::uint64_t, func_count>;

  /// Cold: the entries of both rings that read whole, oldest completion first, at most `max`
  /// (the latest ones), and in `last` the last sequence number per function, which stays known
  /// after the rings moved on.
  void read(std::vector<completed_op>& out, std::size_t max, last_seqs& last) const {
    out.clear();
    last.fill(0);
    for (const ring& g : rings_) {
      for (std::size_t f = 0; f < func_count; ++f)
        last[f] = std::max(last[f], g.last_plus1[f].load(std::memory_order_relaxed));
      const std::uint64_t h = g.head.load(std::memory_order_acquire);
      for (std::uint64_t n = h > depth ? h - depth : 0; n < h; ++n) {
        const entry& e = g.e[n & (depth - 1)];
        const std::uint64_t s1 = e.stamp.load(std::memory_order_acquire);
        if (s1 != n + 1) continue;  // being written, or already the next lap's
        completed_op c;
        c.seq = e.seq.load(std::memory_order_relaxed);
        c.bytes = e.bytes.load(std::memory_order_relaxed);
        c.start_ns = e.start_ns.load(std::memory_order_relaxed);
        c.end_ns = e.end_ns.load(std::memory_order_relaxed);
        c.gpu_ns = e.gpu_ns.load(std::memory_order_relaxed);
        const std::uint64_t pf = e.peer_fn.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (e.stamp.load(std::memory_order_relaxed) != s1) continue;  // overwritten while read
        c.fn = static_cast<func>(pf & 0xFF);
        c.bytes_valid = (pf >> 8 & 1) != 0;
        c.peer = static_cast<std::int32_t>(static_cast<std::uint32_t>(pf >> 32));
        out.push_back(c);
      }
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const completed_op& a, const completed_op& b) { return a.end_ns < b.end_ns; });
    if (out.size() > max) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(max));
  }

  /// Cold: empty, for a new communicator (no writer active).
  void clear() noexcept {
    for (ring& g : rings_) {
      g.head.store(0, std::memory_order_relaxed);
      for (auto& l : g.last_plus1) l.store(0, std::memory_order_relaxed);
      for (entry& e : g.e) e.stamp.store(0, std::memory_order_relaxed);
    }
  }

 private:
  static std::uint64_t pack(const op_record& r) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(r.peer)) << 32 |
           static_cast<std::uint64_t>(r.bytes_valid) << 8 | static_cast<std::uint64_t>(r.fn);
  }
  struct alignas(detail::cache_line) entry {
    std::atomic<std::uint64_t> stamp{0};  // 0: never written or being written; else its number + 1
    std::atomic<std::uint64_t> seq{0}, bytes{0}, start_ns{0}, end_ns{0}, gpu_ns{0};
    std::atomic<std::uint64_t> peer_fn{0};  // peer << 32 | bytes_valid << 8 | fn
  };
  struct ring {
    alignas(detail::cache_line) std::atomic<std::uint64_t> head{0};   // completions noted so far
    std::array<std::atomic<std::uint64_t>, func_count> last_plus1{};  // per function: last seq + 1
    std::array<entry, depth> e{};
  };
  static_assert((depth & (depth - 1)) == 0, "depth is a power of two");
  std::array<ring, path_count> rings_{};
};

}  // namespace ncclinsp::plugin
