#pragma once
/// ncclinsp-sim's map from simulated time to wall time and GPU timer ns (`--speed`), and the wait for it.
/// Thread-safety: const; `wait_until` may run on any thread.

#include <ncclinsp/detail/clock.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

// ---- timing ----------------------------------------------------------------------------------
inline u64 realtime_ns() { return ncclinsp::detail::unix_ns(); }

struct clock_map {
  u64 base_ns = 0;  // realtime ns at sim t = 0 (also the GPU timer base)
  double speed = 1;
  /// Wait until the wall time corresponding to sim time t (no-op at speed 0). Returns false if `stop`.
  void wait_until(double t, const std::atomic<bool>& stop) const {
    if (speed <= 0) return;
    const u64 target = base_ns + u64(t / speed * 1e9);
    while (!stop.load(std::memory_order_relaxed)) {
      const u64 now = realtime_ns();
      // Within 200 us of the target: no sleep (each sleep costs ~60 us of timer slack, and a proxy thread
      // sleeping per event would fall behind); events are then up to 200 us early in wall time.
      if (now + 200'000 >= target) return;
      const u64 left = target - now;
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<u64>(left, 50'000'000)));
    }
  }
  u64 gpu_ns(double t) const { return base_ns + u64(t * 1e9); }
};

}  // namespace ncclinsp::sim::app
