#pragma once
/// ncclinsp-sim's proxy thread of one rank: NCCL's proxy progress thread (and 2.31.2's per-communicator
/// profiler thread), emitting each op's kernel and network events at their simulated times.
/// Thread-safety: runs on the rank's own proxy thread; reads the rank's queue, writes its truth.

#include "proxy_clock.hpp"
#include "rank_context.hpp"
#include "sim_device.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <thread>

#include <unistd.h>

namespace ncclinsp::sim::app {

/// The rank's proxy thread: takes the user thread's ops from the queue and emits their KernelCh, ProxyOp
/// and ProxyStep events at their simulated times, one group at a time (a hung op: its KernelCh starts
/// only); sets `proxy_done` once it took the quit item.
inline void proxy_thread(run_context& ctx, rank_state& r) {
  const options& o = ctx.o;
  const clock_map& clk = ctx.clk;
  bind_device(r.node, r.local);
  // One group's ops at a time: their KernelCh and ProxyOp/ProxyStep events interleave in time.
  std::array<proxy_item, 4> grp;
  std::array<std::array<kernel_time, max_channels>, 4> times{}, garbage{};
  std::array<timed_op, 4> timed{};
  std::size_t n = 0;
  // Simulated proxy clock for the next event only if it is a ProxyStep one (--speed 0; see clock_gettime).
  auto wait = [&](u64 t, bool step) {
    clk.wait_until(double(t - clk.base_ns) / 1e9, ctx.stop);
    t_sim_monotonic_ns = o.speed <= 0 && step ? static_cast<std::int64_t>(t) : -1;
  };
  struct sim_clock_off {  // the seam ends with each group: nothing after it reads the simulated clock
    ~sim_clock_off() { t_sim_monotonic_ns = -1; }
  };
  for (;;) {
    proxy_item& it = grp[n];
    if (!r.q.pop(it)) {
      std::this_thread::sleep_for(std::chrono::microseconds(o.speed > 0 ? 200 : 20));
      continue;
    }
    if ((it.quit || it.start_only) && n > 0) {  // a group cut short (one of its P2P ops hung): emit what completes
      const proxy_item cut = it;
      {
        const sim_clock_off off;
        r.comms[std::size_t(grp[0].comm)]->complete_timed(std::span<const timed_op>(timed.data(), n), wait);
      }
      n = 0;
      grp[0] = cut;
    }
    proxy_item& cur = grp[n];
    if (cur.quit) break;
    comm_driver& c = *r.comms[std::size_t(cur.comm)];
    if (cur.start_only) {
      clk.wait_until(double(cur.start_ns - clk.base_ns) / 1e9, ctx.stop);
      if (cur.n_plans == 0) {
        c.start_only(cur.op, cur.start_ns);
      } else {
        const sim_clock_off off;
        c.start_only(cur.op, cur.start_ns, std::span<const proxy_plan>(cur.plans.data(), std::size_t(cur.n_plans)),
                     wait);
      }
      continue;
    }
    const int nch = std::min<int>(cur.op.n_channels, int(max_channels));
    for (int ch = 0; ch < nch; ++ch) {  // channels start a few hundred ns apart (block scheduling)
      auto& kt = times[n][std::size_t(ch)];
      kt.start_ns = cur.start_ns + (mix(cur.start_ns, u64(ch)) % 700);
      kt.stop_ns = std::max(cur.ch_stop[std::size_t(ch)], kt.start_ns + 1);
    }
    if (cur.op.self_p2p && !cur.op.kernel_events) {
      // A Send/Recv to the rank itself without KernelCh (up to 2.31.0a): nothing to emit, but its work
      // runs and stamps its channels' device-ring slots (comm_driver::complete emits nothing for it).
      if (nch > 0) c.complete(cur.op, std::span<const kernel_time>(times[n].data(), std::size_t(nch)));
      if (!o.truth.empty() || r.truth.ops_file) r.truth.note(c, cur.op, nullptr, 0);
      if (cur.group_last && n > 0) {
        const sim_clock_off off;
        c.complete_timed(std::span<const timed_op>(timed.data(), n), wait);
        n = 0;
      }
      continue;
    }
    timed[n] = timed_op{&cur.op, std::span<const kernel_time>(times[n].data(), std::size_t(std::max(nch, 1))),
                        std::span<const proxy_plan>(cur.plans.data(), std::size_t(cur.n_plans))};
    if (cur.bad_timer && nch > 0) {  // a garbage GPU timer: the first channel stops ~530 years later
      std::copy(times[n].begin(), times[n].begin() + nch, garbage[n].begin());
      garbage[n][0].stop_ns = ~std::uint64_t(0) - 4095;
      timed[n].sent = std::span<const kernel_time>(garbage[n].data(), std::size_t(nch));
    }
    if (!o.truth.empty() || r.truth.ops_file) r.truth.note(c, cur.op, times[n].data(), nch, cur.bad_timer);
    ++n;
    if (!cur.group_last && n < grp.size()) continue;
    // All ops of a group run on one communicator.
    {
      const sim_clock_off off;
      c.complete_timed(std::span<const timed_op>(timed.data(), n), wait);
    }
    for (std::size_t i = 0; i < n; ++i)
      if (grp[i].pxn) c.foreign_proxy_op(pid_t(::getpid() + 100000), 0, 0, 0);
    n = 0;
  }
  r.proxy_done.store(true);
}

}  // namespace ncclinsp::sim::app
