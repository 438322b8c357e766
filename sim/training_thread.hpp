#pragma once
/// ncclinsp-sim's user thread of one rank on the timeline workloads (training, serving): its op groups at
/// their simulated launches through the rank's communicators, the ops' kernel and ProxyOp times to its
/// proxy thread, CUDA-graph replays and async groups on side threads, and the rank faults' ends (a blocked
/// rank waits for the job's end; a killed one dies).
/// Thread-safety: runs on the rank's own user thread; computes its own copy of the job's timeline.

#include "rank_context.hpp"
#include "side_thread.hpp"
#include "sim_device.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include <signal.h>
#include <unistd.h>

namespace ncclinsp::sim::app {

/// --kill-rank: the process dies at simulated second t, abruptly (SIGKILL: no finalize, its files stay as
/// last written), once its proxy thread has emitted what the GPU did before t.
[[noreturn]] inline void die_at(run_context& ctx, rank_state& r, double t) {
  ctx.clk.wait_until(t, ctx.stop);
  proxy_item q;
  q.quit = true;
  ctx.push(r, q);
  while (!r.proxy_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (;;) ::kill(::getpid(), SIGKILL);
}

/// The rank's network ProxyOps of one op with their step times (job::connections / job::step_times; an op
/// the network stall holds: job::stuck_step_times, states never reached at never_ns).
inline void add_plans(const run_context& ctx, const rank_state& r, const timeline& tl, const rank_op& ro,
                      const sim_op& op, proxy_item& it) {
  const model& m = ctx.m;
  const clock_map& clk = ctx.clk;
  connection conns[2 * max_channels];
  const int nc = connections(m, op, r.global, conns, int(std::size(conns)));
  step_s st[max_proxy_steps];
  auto ns = [&](double t) { return t == job::never ? never_ns : clk.gpu_ns(t); };
  for (int i = 0; i < nc && it.n_plans < int(it.plans.size()); ++i) {
    const connection& cn = conns[i];
    const bool first = ro.op == 0 || op.p2p_dir != 0 || ro.hung;
    const double a_self = ro.start, a_peer = first ? tl.arrival(ro.group, cn.peer_global) : ro.t0;
    proxy_plan& pl = it.plans[std::size_t(it.n_plans++)];
    pl = proxy_plan{};
    pl.channel = std::uint8_t(cn.channel);
    pl.is_send = cn.is_send;
    pl.peer = cn.peer_comm_rank;
    pl.start = clk.gpu_ns(a_self);
    pl.n_steps = ro.hung ? stuck_step_times(m, op, cn.is_send, a_self, a_peer, st, pl.step_bytes)
                         : step_times(m, op, ro, cn.channel, r.global, cn.peer_global, cn.is_send, a_self, a_peer, st,
                                      pl.step_bytes);
    for (int k = 0; k < pl.n_steps; ++k)
      pl.steps[k] = proxy_step_times{ns(st[k].post), ns(st[k].ready), ns(st[k].sent), ns(st[k].done)};
  }
}

/// The rank's user thread on a timeline workload (training, serving): each op group enqueued at its
/// simulated launch, its ops handed to the proxy thread with their times; then, where the rank is
/// blocked, the wait to the job's end, or, under --kill-rank, the process's death.
inline void training_user_thread(run_context& ctx, rank_state& r) {
  const options& o = ctx.o;
  const model& m = ctx.m;
  const clock_map& clk = ctx.clk;
  const std::atomic<bool>& stop = ctx.stop;
  bind_device(r.node, r.local);
  timeline tl(m);  // the whole job's coupled timeline, computed identically by every rank
  std::vector<op_desc> descs;
  std::vector<pending_op> pend(8);
  descs.reserve(8);
  // CUDA graphs: one per program group of graph ops, captured at its first launch, replayed after.
  std::vector<captured_graph> graphs(m.program.size());
  std::vector<char> captured(m.program.size(), 0);
  const bool any_graph = std::any_of(m.program.begin(), m.program.end(), [](const sim_group& g) {
    return std::any_of(g.ops.begin(), g.ops.end(), [](const sim_op& op) { return op.graph; });
  });
  auto bind = [&r] { bind_device(r.node, r.local); };
  std::unique_ptr<side_thread> host_callback, async_group;
  if (any_graph) host_callback = std::make_unique<side_thread>(bind);
  if (o.nonblocking) async_group = std::make_unique<side_thread>(bind);
  bool hung = false;
  for (u64 step = 0; !stop.load() && !hung; ++step) {
    if (o.steps > 0 ? step >= u64(o.steps) : tl.job_now() >= o.duration) break;
    if (tl.blocked(r.global)) break;
    const double begin = tl.now(r.global);
    tl.step(step);
    const auto& mine = tl.ops(r.global);
    for (std::size_t i = 0; i < mine.size() && !hung;) {
      std::size_t e = i;
      while (e < mine.size() && mine[e].group == mine[i].group) ++e;
      const sim_group& g = m.program[std::size_t(mine[i].group)];
      const comm_kind k = g.ops[std::size_t(mine[i].op)].comm;
      comm_driver& c = *r.comms[std::size_t(k)];
      descs.clear();
      for (std::size_t x = i; x < e; ++x) {
        const sim_op& op = g.ops[std::size_t(mine[x].op)];
        op_desc d;
        d.kind = op.ce ? op_kind::ce_coll : (op.p2p_dir ? op_kind::p2p : op_kind::coll);
        d.func = op.func;
        d.dtype = op.dtype;
        d.count = op.bytes / dtype_size(op.dtype);
        d.algo = op.algo;
        d.proto = op.proto;
        d.n_channels = op.n_channels;
        d.channel_lo = op.channel_lo;
        d.user_tag = op.tag;
        d.kernel_variant = op.sym ? "AllReduce_AGxLL_R" : nullptr;
        d.symmetric = op.sym;
        d.collnet = op.collnet;
        d.send_buff = reinterpret_cast<const void*>(0x7f0000000000ull + (u64(r.global) << 32));
        d.recv_buff = reinterpret_cast<void*>(0x7f0000000000ull + (u64(r.global) << 32) + (1ull << 31));
        if (op.p2p_dir) {
          d.peer = r.node + op.p2p_dir;                                     // pp rank = node index
          d.channel_lo = 2 + 4 * (r.local % 4) + (op.p2p_dir > 0 ? 0 : 2);  // P2P channels are not 0-based
        }
        descs.push_back(d);
      }
      clk.wait_until(mine[i].start, stop);
      if (stop.load()) break;
      const std::size_t gi = std::size_t(mine[i].group);
      const std::span<pending_op> out(pend.data(), descs.size());
      if (g.ops[std::size_t(mine[i].op)].graph) {
        // cudaGraphLaunch: captured at the first launch (the API events), then its host callback runs on
        // the CUDA host-callback thread (Group, Coll with a new seqNumber and the capture's parentObj).
        if (!captured[gi]) {
          c.capture(std::span<const op_desc>(descs), graphs[gi]);
          captured[gi] = 1;
        }
        host_callback->run([&] { c.replay(graphs[gi], out); });
      } else if (async_group) {
        async_group->run([&] { c.enqueue(std::span<const op_desc>(descs), out); });
      } else {
        c.enqueue(std::span<const op_desc>(descs), out);
      }
      for (std::size_t x = i; x < e; ++x) {
        const rank_op& ro = mine[x];
        const sim_op& op = g.ops[std::size_t(ro.op)];
        proxy_item it;
        it.op = pend[x - i];
        it.comm = int(op.comm);
        it.start_ns = clk.gpu_ns(ro.start);
        if (ro.hung) {
          it.start_only = true;  // the kernel starts and never ends (NCCL's peers spin in it)
          hung = true;
          // A network stall: the op's proxies posted their steps, which stop advancing.
          if (ro.net_stalled && it.op.network && (it.op.mask & gate::proxy_op)) add_plans(ctx, r, tl, ro, op, it);
        } else {
          it.stop_ns = clk.gpu_ns(ro.end);
          for (std::size_t ch = 0; ch < max_channels; ++ch) {
            it.ch_stop[ch] = clk.gpu_ns(ro.ch_stop[ch]);
            it.stop_ns = std::max(it.stop_ns, it.ch_stop[ch]);
          }
          it.pxn = o.pxn && x == i && comm_network(o, op.comm);
          if (it.op.network && (it.op.mask & gate::proxy_op)) add_plans(ctx, r, tl, ro, op, it);
        }
        it.group_last = x + 1 == e;
        ctx.push(r, it);
      }
      i = e;
    }
    if (hung || stop.load() || tl.blocked(r.global)) break;
    const double len = tl.now(r.global) - begin;
    clk.wait_until(tl.now(r.global), stop);
    r.tflops.store(len > 0 ? m.flop_per_step / len / 1e12 : 0.0);
    r.steps.fetch_add(1);
  }
  const double end = o.end_time(m.nominal_step_s);
  const double kill = tl.faults().kill_at(r.global);
  if (kill >= 0 && kill < end && !stop.load()) die_at(ctx, r, kill);
  // A blocked rank stays blocked until the job ends (its process is alive: its kernel spins in the op,
  // or its user code is stuck with nothing in flight).
  const bool blocked = hung || tl.blocked(r.global);
  if (blocked) clk.wait_until(end, stop);
  if (o.purge_inflight && !blocked) {
    const double t = tl.now(r.global);
    // NCCL 2.31: ops still in flight at comm destroy are purged without callbacks (KernelCh start, no stop).
    for (comm_kind k : {comm_kind::fsdp, comm_kind::tp}) {
      if (!r.comms[std::size_t(k)]) continue;
      op_desc d;
      d.func = nccl_func::all_reduce;
      d.count = mib;
      d.n_channels = 2;
      proxy_item it;
      it.op = r.comms[std::size_t(k)]->enqueue(d);
      it.comm = int(k);
      it.start_ns = clk.gpu_ns(t);
      it.start_only = true;
      ctx.push(r, it);
    }
  }
  proxy_item q;
  q.quit = true;
  ctx.push(r, q);
}

}  // namespace ncclinsp::sim::app
