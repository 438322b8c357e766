#pragma once
/// ncclinsp-sim's user threads of the workloads without a timeline: --workload cases (the calls of
/// examples/nccl_wrappers --cases on a one-rank communicator) and --workload alltoall (MoE expert
/// parallelism, per step one group of Send + Recv to every rank), with the all-to-all's ProxyOps.
/// Thread-safety: each function runs on one rank's user thread.

#include "alltoall_workload.hpp"
#include "cases_workload.hpp"
#include "rank_context.hpp"
#include "side_thread.hpp"
#include "sim_device.hpp"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace ncclinsp::sim::app {

/// --workload cases: cases_program on the rank's one-rank communicator, --steps times; replays on
/// its CUDA host-callback thread. As in the example, one thread makes every call: ncclCommInitAll,
/// the API calls, ncclCommDestroy. Nothing reaches the proxy thread (no op has KernelCh children).
inline void cases_user_thread(run_context& ctx, rank_state& r) {
  const options& o = ctx.o;
  bind_device(r.node, r.local);
  r.comms[0] = std::make_unique<comm_driver>(ctx.lib, ctx.make_workload_comm(r));
  {
    side_thread host_callback([&r] { bind_device(r.node, r.local); });
    for (int s = 0; s < std::max(o.steps, 1) && !ctx.stop.load(); ++s) {
      cases_program::run(*r.comms[0], host_callback, [](const pending_op&) {});
      r.steps.fetch_add(1);
    }
  }
  r.comms[0]->finalize();
  proxy_item q;
  q.quit = true;
  ctx.push(r, q);
}

/// The network ProxyOps of one peer chunk: per channel one ProxyOp of up to max_proxy_steps steps
/// (128 KiB, the network P2P step, or a quarter of the channel's share), its steps paced evenly over
/// the transfer [t0 + L, end]: a send step is ready at launch and done when its share has gone, a
/// recv step receives its share then hands it to the GPU.
inline void add_a2a_plans(const run_context& ctx, const a2a_model& am, int me, const op_desc& d, double end,
                          proxy_item& it) {
  const options& o = ctx.o;
  const bool send = d.func == nccl_func::send;
  const std::size_t per_ch = o.a2a_bytes / std::max<std::size_t>(d.n_channels, 1);
  const std::size_t step = 128 * 1024;
  const int steps = int(std::clamp<std::size_t>((per_ch + step - 1) / step, 1, std::size_t(max_proxy_steps)));
  const double from = am.t0() + am.latency(me, d.peer), len = std::max(end - from, 0.0) / steps;
  for (int ch = 0; ch < d.n_channels && it.n_plans < int(it.plans.size()); ++ch) {
    proxy_plan& pl = it.plans[std::size_t(it.n_plans++)];
    pl = proxy_plan{};
    pl.channel = std::uint8_t(ch);
    pl.is_send = send;
    pl.peer = d.peer;
    pl.start = ctx.clk.gpu_ns(am.arrival(me));
    pl.n_steps = steps;
    pl.step_bytes = (per_ch + std::size_t(steps) - 1) / std::size_t(steps);
    for (int k = 0; k < steps; ++k) {
      const double got = from + (k + 1) * len;
      pl.steps[k] = send ? proxy_step_times{pl.start, pl.start, pl.start, ctx.clk.gpu_ns(got)}
                         : proxy_step_times{pl.start, ctx.clk.gpu_ns(got), ctx.clk.gpu_ns(got + 1e-6),
                                            ctx.clk.gpu_ns(got + 2e-6)};
    }
  }
}

/// --workload alltoall: per step one group of Send + Recv to every rank (a2a_model); the peer ops go
/// to the proxy thread with their GPU times (and ProxyOps across nodes), the self ones for the truth.
inline void alltoall_user_thread(run_context& ctx, rank_state& r) {
  const options& o = ctx.o;
  bind_device(r.node, r.local);
  comm_driver& c = *r.comms[0];
  a2a_model am(o);
  const int n = am.ranks(), me = r.global;
  const int nch = a2a_channels(o, o.a2a_bytes);
  const a2a_schedule sched(o, me);
  std::vector<op_desc> descs(std::size_t(2 * n));
  std::vector<pending_op> pend(descs.size());
  for (int j = 0; j < n; ++j) {
    for (int dir = 0; dir < 2; ++dir) {  // ncclSend(to j), ncclRecv(from j)
      op_desc& d = descs[std::size_t(2 * j + dir)];
      d.kind = op_kind::p2p;
      d.func = dir == 0 ? nccl_func::send : nccl_func::recv;
      d.dtype = nccl_dtype::bfloat16;
      d.count = o.a2a_bytes / 2;
      d.peer = j;
      d.n_channels = std::uint8_t(nch);
      const int round = dir == 0 ? sched.send_round(j) : sched.recv_round(j);
      d.p2p_round = round;
      d.channel_lo = a2a_channel_base(o, round);
      const u64 base = 0x7f0000000000ull + (u64(me) << 32);
      d.send_buff = reinterpret_cast<const void*>(base + u64(j) * o.a2a_bytes);
      d.recv_buff = reinterpret_cast<void*>(base + (1ull << 31) + u64(j) * o.a2a_bytes);
    }
  }
  std::vector<std::size_t> order(descs.size());
  double T = 0;
  for (u64 s = 0; !ctx.stop.load(); ++s) {
    if (o.steps > 0 ? s >= u64(o.steps) : T >= o.duration) break;
    am.step(s, T);
    ctx.clk.wait_until(am.arrival(me), ctx.stop);
    if (ctx.stop.load()) break;
    c.enqueue(std::span<const op_desc>(descs), std::span<pending_op>(pend));
    // To the proxy thread in plan order (the self pair's round 0 first), the order the kernel runs
    // the works of a channel.
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return pend[a].plan_pos < pend[b].plan_pos; });
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t x = order[k];
      const op_desc& d = descs[x];
      const int peer = d.peer;
      proxy_item it;
      it.op = pend[x];
      it.comm = 0;
      it.start_ns = ctx.clk.gpu_ns(am.arrival(me));
      const double end = d.func == nccl_func::send ? am.chunk_end(me, peer) : am.chunk_end(peer, me);
      for (int ch = 0; ch < nch; ++ch) {
        const double hop = am.latency(me, peer) * unit01(mix(mix(o.seed, s), u64(me) * 4096 + x * 64 + u64(ch)));
        it.ch_stop[std::size_t(ch)] = ctx.clk.gpu_ns(end + hop);
        it.stop_ns = std::max(it.stop_ns, it.ch_stop[std::size_t(ch)]);
      }
      if (peer != me) {
        it.bad_timer = o.bad_timer > 0 && unit01(mix(mix(o.seed ^ 0xbad7, s), u64(me) * 4096 + x)) < o.bad_timer;
        if (it.op.network && (it.op.mask & gate::proxy_op)) add_a2a_plans(ctx, am, me, d, end, it);
      }
      it.group_last = k + 1 == order.size();
      ctx.push(r, it);
    }
    T = am.end();
    r.steps.fetch_add(1);
  }
  proxy_item q;
  q.quit = true;
  ctx.push(r, q);
}

}  // namespace ncclinsp::sim::app
