#pragma once
/// op_history: one communicator's last completed ops on this rank, for the state dump
/// (plugin/state_dumper.hpp): sequence number, function, size, peer, CPU start and end, GPU span.
///
/// Two rings of `depth` entries, one per completing path: ops completed by their last KernelCh
/// (the op's channel thread) and ops completed at their own stop (copy-engine collectives, ops
/// that get no KernelCh: the thread that stops them). NCCL delivers each path of one communicator
/// on one thread, so each ring has one writer: an entry is written with plain stores (no locked
/// instruction) into cache lines only that thread writes. The reader (the dumper's cold thread)
/// copies the entries and then reads the ring's head again: an entry the writer had begun to
/// rewrite meanwhile is dropped, never reported half old, half new.
/// Thread-safety: note() hot (its ring's one writer, no allocation); read() cold, any thread;
/// clear() cold, with no writer active (the communicator's state is recycled).

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>
#include <cstdint>
#include <vector>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/model.hpp"

namespace ncclinsp::plugin {

/// An op's identity in two words, as its slot keeps it for the state dump (op_slot::ident,
/// ident_xfer: written once at its start) and as its history entry copies it: sequence number
/// (40 bits), function, channels announced (7 bits), the slot generation's low byte (an identity
/// left by the slot's previous op never matches) and a set bit; size (40 bits, capped), peer + 1
/// (23 bits) and whether the size is unknown.
struct op_ident {
  static constexpr std::uint64_t low40 = (std::uint64_t{1} << 40) - 1;
  static constexpr std::uint64_t set = std::uint64_t{1} << 63;

  static constexpr std::uint64_t pack_id(std::uint64_t seq, func fn, std::uint32_t channels,
                                         std::uint32_t gen) noexcept {
    return set | (seq & low40) | static_cast<std::uint64_t>(fn) << 40 |
           static_cast<std::uint64_t>(channels < 127 ? channels : 127) << 48 |
           static_cast<std::uint64_t>(gen & 0xFF) << 55;
  }
  static constexpr std::uint64_t pack_xfer(std::uint64_t bytes, bool bytes_valid, std::int32_t peer) noexcept {
    return (bytes_valid ? (bytes < low40 ? bytes : low40) : 0) |
           static_cast<std::uint64_t>((static_cast<std::uint32_t>(peer) + 1u) & 0x7FFFFF) << 40 |
           static_cast<std::uint64_t>(!bytes_valid) << 63;
  }
  static constexpr bool is_set(std::uint64_t id) noexcept { return (id & set) != 0; }
  static constexpr bool of_gen(std::uint64_t id, std::uint32_t gen) noexcept {
    return (id >> 55 & 0xFF) == (gen & 0xFF);
  }
  static constexpr std::uint64_t seq(std::uint64_t id) noexcept { return id & low40; }
  static constexpr func fn(std::uint64_t id) noexcept { return static_cast<func>(id >> 40 & 0xFF); }
  static constexpr std::uint32_t channels(std::uint64_t id) noexcept {
    return static_cast<std::uint32_t>(id >> 48 & 0x7F);
  }
  static constexpr std::uint64_t bytes(std::uint64_t x) noexcept { return x & low40; }
  static constexpr bool bytes_valid(std::uint64_t x) noexcept { return !(x >> 63); }
  static constexpr std::int32_t peer(std::uint64_t x) noexcept {
    return static_cast<std::int32_t>(x >> 40 & 0x7FFFFF) - 1;
  }
};

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
  /// Entries per ring (a power of two): the dump lists the last `depth` - 1 ops of each path (the
  /// oldest entry's slot is the one the next completion writes).
  static constexpr std::uint32_t depth = 32;
  enum path : std::uint32_t { by_channels = 0, at_stop = 1, path_count = 2 };

  /// Hot: the op (its op_ident words, sequence number and function) just completed on `p`. Only
  /// that path's thread calls it. The entry's stores are release stores (plain stores on x86): a
  /// reader that sees one of them (acquire) sees the head published before it, which tells it the
  /// entry is being rewritten.
  NCCLINSP_INLINE void note(path p, std::uint64_t id, std::uint64_t xfer, std::uint64_t seq, func fn,
                            std::uint64_t start_ns, std::uint64_t end_ns, std::uint64_t gpu_ns) noexcept {
    ring& g = rings_[p];
    const std::uint64_t n = g.head.load(std::memory_order_relaxed);
    entry& e = g.e[n & (depth - 1)];
    e.id.store(id, std::memory_order_release);
    e.xfer.store(xfer, std::memory_order_release);
    e.start_ns.store(start_ns, std::memory_order_release);
    e.end_ns.store(end_ns, std::memory_order_release);
    e.gpu_ns.store(gpu_ns, std::memory_order_release);
    g.head.store(n + 1, std::memory_order_release);
    g.last_plus1[static_cast<std::size_t>(fn)].store(seq + 1, std::memory_order_relaxed);
  }

  /// Sequence number + 1 of the last op completed per function (0: none). NCCL numbers each
  /// collective function on its own (comm->seqNumber[func]); Send/Recv share this rank's count.
  using last_seqs = std::array<std::uint64_t, func_count>;

  /// Cold: the entries of both rings that read whole, oldest completion first, at most `max`
  /// (the latest ones), and in `last` the last sequence number per function, which stays known
  /// after the rings moved on. An entry is kept when the head read after it shows that no call
  /// had begun to rewrite it (a seqlock on the head).
  void read(std::vector<completed_op>& out, std::size_t max, last_seqs& last) const {
    out.clear();
    last.fill(0);
    std::vector<std::pair<std::uint64_t, completed_op>> got;
    for (const ring& g : rings_) {
      for (std::size_t f = 0; f < func_count; ++f)
        last[f] = std::max(last[f], g.last_plus1[f].load(std::memory_order_relaxed));
      const std::uint64_t h = g.head.load(std::memory_order_acquire);
      got.clear();
      for (std::uint64_t n = h > depth ? h - depth : 0; n < h; ++n) {
        const entry& e = g.e[n & (depth - 1)];
        const std::uint64_t id = e.id.load(std::memory_order_acquire), x = e.xfer.load(std::memory_order_acquire);
        completed_op c;
        c.seq = op_ident::seq(id);
        c.fn = op_ident::fn(id);
        c.bytes = op_ident::bytes(x);
        c.bytes_valid = op_ident::bytes_valid(x);
        c.peer = op_ident::peer(x);
        c.start_ns = e.start_ns.load(std::memory_order_acquire);
        c.end_ns = e.end_ns.load(std::memory_order_acquire);
        c.gpu_ns = e.gpu_ns.load(std::memory_order_acquire);
        got.emplace_back(n, c);
      }
      const std::uint64_t h2 = g.head.load(std::memory_order_relaxed);
      for (const auto& [n, c] : got)
        if (n + depth > h2) out.push_back(c);  // not rewritten meanwhile (the writer is at h2)
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
    }
  }

 private:
  struct alignas(detail::cache_line) entry {
    std::atomic<std::uint64_t> id{0}, xfer{0}, start_ns{0}, end_ns{0}, gpu_ns{0};  // op_ident words, times
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
