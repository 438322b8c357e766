#pragma once
/// What a rank's user thread hands its proxy thread (`proxy_item`: one enqueued op with its simulated
/// kernel and ProxyStep times) and the bounded single-producer single-consumer queue between them.
/// Thread-safety: `push` from one thread, `pop` from one other thread.

#include "job_model.hpp"
#include "nccl_driver.hpp"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

// ---- SPSC queue user thread -> proxy thread --------------------------------------------------
struct proxy_item {
  pending_op op;
  int comm = 0;
  u64 start_ns = 0, stop_ns = 0;            // simulated ns: this rank's kernel start, the op's last channel stop
  std::array<u64, max_channels> ch_stop{};  // per channel index
  std::array<proxy_plan, 32> plans{};       // this rank's network ProxyOps (when the mask asks for them)
  int n_plans = 0;
  bool group_last = true;  // the last op of its group (the proxy thread emits a group at once)
  bool start_only = false;
  bool pxn = false;
  bool bad_timer = false;  // --bad-timer: its first channel's KernelCh stop carries a garbage timer value
  bool quit = false;
};

class spsc_queue {
 public:
  bool push(const proxy_item& it) {
    const std::size_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) == cap) return false;
    buf_[h % cap] = it;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  bool pop(proxy_item& it) {
    const std::size_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_.load(std::memory_order_acquire)) return false;
    it = buf_[t % cap];
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

 private:
  static constexpr std::size_t cap = 64;
  std::array<proxy_item, cap> buf_{};
  alignas(64) std::atomic<std::size_t> head_{0};
  alignas(64) std::atomic<std::size_t> tail_{0};
};

}  // namespace ncclinsp::sim::app
