/// ncclinsp-sim's exported `clock_gettime`: the simulated proxy clock (proxy_clock.hpp).

#include "proxy_clock.hpp"

#include <ctime>

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

thread_local std::int64_t ncclinsp::sim::app::t_sim_monotonic_ns = -1;

namespace {
// Simulated proxy clock (--speed 0): the plugin times ProxyStep state transitions with
// CLOCK_MONOTONIC on NCCL's proxy thread. At --speed 0 no thread waits for the simulated time, so
// a proxy thread sets the simulated time of a ProxyStep event here just before emitting it and
// clears it before any other event (complete_timed's wait(t, step)), and this executable's
// clock_gettime (exported: the dlopen'ed plugin's calls land here) returns it for CLOCK_MONOTONIC
// on that thread while set. So only the clock reads inside the plugin's ProxyStep callbacks see
// simulated time; the plugin's other reads on the proxy thread (KernelCh CPU spans, the record
// ring's rate estimate when that thread publishes a record) and every other thread read the real clock.
int real_clock_gettime(clockid_t id, timespec* ts) {
  static const auto real = reinterpret_cast<int (*)(clockid_t, timespec*)>(::dlsym(RTLD_NEXT, "clock_gettime"));
  return real ? real(id, ts) : static_cast<int>(::syscall(SYS_clock_gettime, id, ts));
}
}  // namespace

extern "C" int clock_gettime(clockid_t id, timespec* ts) {
  using ncclinsp::sim::app::t_sim_monotonic_ns;
  if (t_sim_monotonic_ns >= 0 && id == CLOCK_MONOTONIC) {
    ts->tv_sec = static_cast<time_t>(t_sim_monotonic_ns / 1000000000);
    ts->tv_nsec = static_cast<long>(t_sim_monotonic_ns % 1000000000);
    return 0;
  }
  return real_clock_gettime(id, ts);
}
