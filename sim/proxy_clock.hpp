#pragma once
/// The simulated proxy clock of ncclinsp-sim at --speed 0 (sim/README.md "Proxy clock at --speed 0"):
/// a proxy thread stores the simulated time of the ProxyStep event it is about to emit here, and the
/// executable's exported `clock_gettime` (proxy_clock.cpp) returns it for CLOCK_MONOTONIC on that thread.
/// Thread-safety: thread-local.

#include <cstdint>

namespace ncclinsp::sim::app {

/// Simulated CLOCK_MONOTONIC ns for this thread's next clock reads; -1 = the real clock.
extern thread_local std::int64_t t_sim_monotonic_ns;

}  // namespace ncclinsp::sim::app
