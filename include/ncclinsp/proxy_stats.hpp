#pragma once
/// Network proxy accounting of one communicator on one rank: per (peer, direction), the seconds
/// its network steps spent in each ProxyStep state, their bytes and their count
/// (docs/diagnosis.md). Fed by the plugin from sampled ProxyOp/ProxyStep events
/// (NCCLINSP_PROXY=1), read by the collector's snapshot.
///
/// Thread-safety: NCCL delivers one communicator's proxy events on one proxy thread, the single
/// writer of the accumulators (plain load+store, no locked instruction); the exporter reads them
/// with relaxed loads. Entries are claimed with a CAS, so a second writer could never corrupt the
/// table (it could only lose increments). No allocation after construction.

#include <array>
#include <atomic>
#include <cstdint>

#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/no_index.hpp"

namespace ncclinsp {

/// What a network step waited for. send: the GPU to produce the chunk (state 8), the receiver's
/// buffer credit (20), the network to complete the send (9); recv: the network to deliver (10),
/// the GDR flush (11), the GPU to consume (12).
enum class proxy_wait : std::uint8_t {
  send_gpu = 0,
  send_peer_credit,
  send_network,
  recv_network,
  recv_flush,
  recv_gpu,
  count_
};
inline constexpr std::size_t proxy_wait_count = static_cast<std::size_t>(proxy_wait::count_);
/// `state` label values (the `direction` label says send or recv).
inline constexpr std::array<const char*, proxy_wait_count> proxy_wait_names = {"gpu",     "peer_credit", "network",
                                                                               "network", "flush",       "gpu"};
constexpr bool is_send(proxy_wait w) noexcept { return w <= proxy_wait::send_network; }

/// NCCL's ProxyStep state (ncclProfilerProxyStep*) -> proxy_wait; false for any other state.
constexpr bool proxy_wait_of(int nccl_state, proxy_wait& out) noexcept {
  switch (nccl_state) {
    case 8:
      out = proxy_wait::send_gpu;
      return true;
    case 20:
      out = proxy_wait::send_peer_credit;
      return true;
    case 9:
      out = proxy_wait::send_network;
      return true;
    case 10:
      out = proxy_wait::recv_network;
      return true;
    case 11:
      out = proxy_wait::recv_flush;
      return true;
    case 12:
      out = proxy_wait::recv_gpu;
      return true;
    default:
      return false;
  }
}

class proxy_table {
 public:
  static constexpr std::uint32_t capacity = 128;  ///< (peer, direction) pairs per communicator

  struct peer_totals {
    int peer = 0;
    bool send = false;
    std::array<std::uint64_t, 3>
        wait_ns{};  ///< in direction order: send gpu/peer_credit/network, recv network/flush/gpu
    std::uint64_t bytes = 0, steps = 0;
  };

  /// The entry of (peer, direction), claimed on first use; no_index when the table is full.
  std::uint32_t entry(int peer, bool send) noexcept {
    const std::int64_t k = (static_cast<std::int64_t>(peer) << 1 | (send ? 1 : 0)) + 1;
    std::uint32_t i =
        static_cast<std::uint32_t>(static_cast<std::uint64_t>(k) * 0x9E3779B97F4A7C15ull >> 57) % capacity;
    for (std::uint32_t probe = 0; probe < capacity; ++probe, i = (i + 1) % capacity) {
      std::int64_t cur = e_[i].key.load(std::memory_order_acquire);
      if (cur == k) return i;
      if (cur == 0 && (e_[i].key.compare_exchange_strong(cur, k, std::memory_order_acq_rel) || cur == k)) return i;
    }
    return no_index;
  }

  /// Adds `ns` spent in `w` to entry `i` (the communicator's proxy thread).
  void add_wait(std::uint32_t i, proxy_wait w, std::uint64_t ns) noexcept {
    if (i >= capacity) return;
    bump(e_[i].wait_ns[static_cast<std::size_t>(w) % 3], ns);
  }
  /// One finished step of `bytes` on entry `i`.
  void add_step(std::uint32_t i, std::uint64_t bytes) noexcept {
    if (i >= capacity) return;
    bump(e_[i].bytes, bytes);
    bump(e_[i].steps, 1);
  }

  /// Calls fn(peer_totals) for every claimed entry (exporter thread).
  template <class F>
  void for_each(F&& fn) const {
    for (const auto& e : e_) {
      const std::int64_t k = e.key.load(std::memory_order_acquire);
      if (k == 0) continue;
      peer_totals t;
      t.peer = static_cast<int>((k - 1) >> 1);
      t.send = ((k - 1) & 1) != 0;
      for (std::size_t s = 0; s < 3; ++s) t.wait_ns[s] = e.wait_ns[s].load(std::memory_order_relaxed);
      t.bytes = e.bytes.load(std::memory_order_relaxed);
      t.steps = e.steps.load(std::memory_order_relaxed);
      fn(t);
    }
  }

  /// Empties the table (cold: a new communicator takes the slot; no writer is active).
  void reset() noexcept {
    for (auto& e : e_) {
      e.key.store(0, std::memory_order_relaxed);
      for (auto& w : e.wait_ns) w.store(0, std::memory_order_relaxed);
      e.bytes.store(0, std::memory_order_relaxed);
      e.steps.store(0, std::memory_order_relaxed);
    }
  }

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  struct entry_t {
    std::atomic<std::int64_t> key{0};  // 0 = free, else (peer << 1 | send) + 1
    std::array<std::atomic<std::uint64_t>, 3> wait_ns{};
    std::atomic<std::uint64_t> bytes{0}, steps{0};
  };
  std::array<entry_t, capacity> e_{};
};

}  // namespace ncclinsp
