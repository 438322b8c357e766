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

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "ncclinsp/detail/clock.hpp"
#include "ncclinsp/detail/platform.hpp"
#include "ncclinsp/no_index.hpp"

namespace ncclinsp {

/// What a network step waited for, from what each ProxyStep state measures in NCCL's
/// src/transport/net.cc (docs/diagnosis.md "Proxy accounting"):
///  send  gpu (state 8, SendGPUWait): the slot is posted, the GPU has not produced its chunk yet;
///        peer_credit (20, SendPeerWait): the chunk is ready, isend waits for the receiver's posted
///        buffer (re-recorded while isend returns no request);
///        state 9 (SendWait) lasts from the accepted isend until `test` sees it done. NCCL tests only
///        the oldest in-flight step of a connection, and up to NCCL_STEPS (8) are in flight, so state 9
///        holds the step's own time on the wire AND its queueing behind the earlier steps still in
///        flight (plus polling). It is split here: network = the part after the previous completion of
///        the same (peer, direction) (the step's service time on the wire, FIFO), queue = the rest.
///  recv  network (10, RecvWait): irecv posted, waiting for the data; flush (11): GDR flush;
///        gpu (12, RecvGPUWait): waiting for the GPU to consume the chunk.
enum class proxy_wait : std::uint8_t {
  send_gpu = 0,
  send_peer_credit,
  send_network,
  send_queue,
  recv_network,
  recv_flush,
  recv_gpu,
  count_
};
inline constexpr std::size_t proxy_wait_count = static_cast<std::size_t>(proxy_wait::count_);
/// `state` label values (the `direction` label says send or recv).
inline constexpr std::array<const char*, proxy_wait_count> proxy_wait_names = {
    "gpu", "peer_credit", "network", "queue", "network", "flush", "gpu"};
constexpr bool is_send(proxy_wait w) noexcept { return w <= proxy_wait::send_queue; }
inline constexpr std::size_t proxy_send_states = 4, proxy_recv_states = 3;
/// Index of `w` among its direction's states (the order of proxy_wait_names).
constexpr std::size_t proxy_slot(proxy_wait w) noexcept {
  const auto i = static_cast<std::size_t>(w);
  return is_send(w) ? i : i - proxy_send_states;
}

/// NCCL's ProxyStep state (ncclProfilerProxyStep*) -> proxy_wait; false for any other state.
/// State 9 maps to send_network: proxy_table::add_wait splits it into network and queue.
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
    std::array<std::uint64_t, 4>
        wait_ns{};  ///< in direction order: send gpu/peer_credit/network/queue, recv network/flush/gpu (, 0)
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

  /// Adds `ns` spent in `w`, ending now, to entry `i` (the communicator's proxy thread, at the
  /// transition that ends it). A send step's state 9 (send_network) ends at its completion: the part
  /// of it after the entry's previous completion is network (on the wire), the part before is queue.
  void add_wait(std::uint32_t i, proxy_wait w, std::uint64_t ns) noexcept {
    add_wait(i, w, ns, w == proxy_wait::send_network ? detail::steady_ns() : 0);
  }
  /// The same with the end time given (CLOCK_MONOTONIC ns; read only for send_network).
  void add_wait(std::uint32_t i, proxy_wait w, std::uint64_t ns, std::uint64_t end_ns) noexcept {
    if (i >= capacity) return;
    entry_t& e = e_[i];
    if (w != proxy_wait::send_network) {
      bump(e.wait_ns[proxy_slot(w)], ns);
      return;
    }
    // FIFO per (peer, direction): the wire serves this step after the previous one completed.
    const std::uint64_t start = end_ns > ns ? end_ns - ns : 0;
    const std::uint64_t last = e.last_done_ns.load(std::memory_order_relaxed);
    const std::uint64_t queued = last > start ? std::min(last - start, ns) : 0;
    bump(e.wait_ns[proxy_slot(proxy_wait::send_queue)], queued);
    bump(e.wait_ns[proxy_slot(proxy_wait::send_network)], ns - queued);
    if (end_ns > last) e.last_done_ns.store(end_ns, std::memory_order_relaxed);
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
      for (std::size_t s = 0; s < t.wait_ns.size(); ++s) t.wait_ns[s] = e.wait_ns[s].load(std::memory_order_relaxed);
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
      e.last_done_ns.store(0, std::memory_order_relaxed);
    }
  }

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
    a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  struct entry_t {
    std::atomic<std::int64_t> key{0};  // 0 = free, else (peer << 1 | send) + 1
    std::array<std::atomic<std::uint64_t>, 4> wait_ns{};
    std::atomic<std::uint64_t> bytes{0}, steps{0};
    std::atomic<std::uint64_t> last_done_ns{0};  // the latest send completion (proxy thread only)
  };
  std::array<entry_t, capacity> e_{};
};

}  // namespace ncclinsp
