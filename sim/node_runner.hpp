#pragma once
/// ncclinsp-sim's ranks of one process: per rank the communicators, a user thread (enqueue at each op
/// group's simulated launch) and a proxy thread (kernel and proxy events at their simulated times), the
/// per-node `ncclinsp_sim.prom` writer, and comm init/finalize in NCCL's order.
/// Thread-safety: `run` starts and joins every thread; a rank's state is shared by its two threads only
/// through the SPSC queue and atomics.

#include "alltoall_workload.hpp"
#include "cases_workload.hpp"
#include "clock_map.hpp"
#include "job_model.hpp"
#include "nccl_driver.hpp"
#include "proxy_clock.hpp"
#include "proxy_queue.hpp"
#include "side_thread.hpp"
#include "sim_device.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "ncclinsp/detail/atomic_file.hpp"

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

namespace fs = std::filesystem;

// ---- one rank -----------------------------------------------------------------------------
/// The simulator's truth for --truth: the kernels' real GPU spans (before any release corrupts what the
/// KernelCh events carry), summed per (communicator, function, bytes) of one rank; `corrupted` ops had
/// another work's timestamps sent (the plugin must not publish those as GPU-timed).
struct truth_key {
  u64 comm_hash = 0;
  int rank = 0;  ///< in the communicator
  int nranks = 0;
  int func = 0;
  u64 bytes = 0;
  auto operator<=>(const truth_key&) const = default;
};
struct truth_sum {
  u64 ops = 0, corrupted = 0, untimed = 0;
  double busy_s = 0;
};

struct rank_state {
  int node = 0, local = 0, global = 0;
  std::vector<std::unique_ptr<comm_driver>> comms;  // indexed by comm_kind
  spsc_queue q;
  std::atomic<u64> steps{0};
  std::atomic<double> tflops{0.0};
  std::atomic<bool> proxy_done{false};
  std::map<truth_key, truth_sum> truth;  // proxy thread; read after it joined
  std::FILE* truth_ops = nullptr;        // --truth-ops: one line per op (proxy thread)
};

struct node_runner {
  const options& o;
  const model& m;
  const plugin_library& lib;
  clock_map clk;
  std::vector<std::unique_ptr<rank_state>> ranks;
  std::atomic<bool> stop{false};
  std::string node_label(int node) const { return o.node_prefix + std::to_string(node); }

  comm_config make_comm(const rank_state& r, comm_kind k) const {
    comm_config c;
    c.mask_override = o.mask_override;
    c.release = o.nccl;
    c.recv_step_restarts = o.recv_restarts;
    switch (k) {
      case comm_kind::tp:
        c.name = "tp";
        c.comm_hash = mix(hash_str("tp"), u64(r.node));
        c.n_nodes = 1;
        c.n_ranks = o.gpus;
        c.rank = r.local;
        break;
      case comm_kind::fsdp:
        c.name = "fsdp";
        c.comm_hash = hash_str("fsdp");
        c.n_nodes = o.nodes;
        c.n_ranks = o.nodes * o.gpus;
        c.rank = r.global;
        break;
      case comm_kind::dp:
      case comm_kind::pp: {  // one rank per node: the GPUs with the same local index across nodes
        const char* base = k == comm_kind::dp ? "dp" : "pp";
        c.name = base + std::to_string(r.local);
        c.comm_hash = mix(hash_str(base), u64(r.local));
        c.n_nodes = o.nodes;
        c.n_ranks = o.nodes;
        c.rank = r.node;
        break;
      }
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);  // different seeds → different "jobs"
    return c;
  }

  /// The one communicator of --workload cases (ncclCommInitAll over one GPU: commName NULL, one rank)
  /// and --workload alltoall (`ep`, every rank of the job).
  comm_config make_workload_comm(const rank_state& r) const {
    comm_config c;
    c.mask_override = o.mask_override;
    c.release = o.nccl;
    c.recv_step_restarts = o.recv_restarts;
    if (o.cases) {
      c.null_name = true;
      c.comm_hash = hash_str("cases");
    } else {
      c.name = "ep";
      c.comm_hash = hash_str("ep");
      c.n_nodes = o.nodes;
      c.n_ranks = o.nodes * o.gpus;
      c.rank = r.global;
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);
    return c;
  }

  void push(rank_state& r, const proxy_item& it) {
    while (!r.q.push(it)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  /// The rank's network ProxyOps of one op with their step times (job::connections / job::step_times).
  void add_plans(const rank_state& r, const timeline& tl, const rank_op& ro, const sim_op& op, proxy_item& it) const {
    connection conns[2 * max_channels];
    const int nc = connections(m, op, r.global, conns, int(std::size(conns)));
    step_s st[max_proxy_steps];
    for (int i = 0; i < nc && it.n_plans < int(it.plans.size()); ++i) {
      const connection& cn = conns[i];
      const bool first = ro.op == 0 || op.p2p_dir != 0;
      const double a_self = ro.start, a_peer = first ? tl.arrival(ro.group, cn.peer_global) : ro.t0;
      proxy_plan& pl = it.plans[std::size_t(it.n_plans++)];
      pl = proxy_plan{};
      pl.channel = std::uint8_t(cn.channel);
      pl.is_send = cn.is_send;
      pl.peer = cn.peer_comm_rank;
      pl.start = clk.gpu_ns(a_self);
      pl.n_steps =
          step_times(m, op, ro, cn.channel, r.global, cn.peer_global, cn.is_send, a_self, a_peer, st, pl.step_bytes);
      for (int k = 0; k < pl.n_steps; ++k)
        pl.steps[k] = proxy_step_times{clk.gpu_ns(st[k].post), clk.gpu_ns(st[k].ready), clk.gpu_ns(st[k].sent),
                                       clk.gpu_ns(st[k].done)};
    }
  }

  /// --workload cases: cases_program on the rank's one-rank communicator, --steps times; replays on
  /// its CUDA host-callback thread. As in the example, one thread makes every call: ncclCommInitAll,
  /// the API calls, ncclCommDestroy. Nothing reaches the proxy thread (no op has KernelCh children).
  void cases_user_thread(rank_state& r) {
    bind_device(r.node, r.local);
    r.comms[0] = std::make_unique<comm_driver>(lib, make_workload_comm(r));
    {
      side_thread host_callback([&r] { bind_device(r.node, r.local); });
      for (int s = 0; s < std::max(o.steps, 1) && !stop.load(); ++s) {
        cases_program::run(*r.comms[0], host_callback, [](const pending_op&) {});
        r.steps.fetch_add(1);
      }
    }
    r.comms[0]->finalize();
    proxy_item q;
    q.quit = true;
    push(r, q);
  }

  /// --workload alltoall: per step one group of Send + Recv to every rank (a2a_model); the peer ops go
  /// to the proxy thread with their GPU times (and ProxyOps across nodes), the self ones for the truth.
  void alltoall_user_thread(rank_state& r) {
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
    for (u64 s = 0; !stop.load(); ++s) {
      if (o.steps > 0 ? s >= u64(o.steps) : T >= o.duration) break;
      am.step(s, T);
      clk.wait_until(am.arrival(me), stop);
      if (stop.load()) break;
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
        it.start_ns = clk.gpu_ns(am.arrival(me));
        const double end = d.func == nccl_func::send ? am.chunk_end(me, peer) : am.chunk_end(peer, me);
        for (int ch = 0; ch < nch; ++ch) {
          const double hop = am.latency(me, peer) * unit01(mix(mix(o.seed, s), u64(me) * 4096 + x * 64 + u64(ch)));
          it.ch_stop[std::size_t(ch)] = clk.gpu_ns(end + hop);
          it.stop_ns = std::max(it.stop_ns, it.ch_stop[std::size_t(ch)]);
        }
        if (peer != me) {
          it.bad_timer = o.bad_timer > 0 && unit01(mix(mix(o.seed ^ 0xbad7, s), u64(me) * 4096 + x)) < o.bad_timer;
          if (it.op.network && (it.op.mask & gate::proxy_op)) add_a2a_plans(am, me, d, end, it);
        }
        it.group_last = k + 1 == order.size();
        push(r, it);
      }
      T = am.end();
      r.steps.fetch_add(1);
    }
    proxy_item q;
    q.quit = true;
    push(r, q);
  }

  /// The network ProxyOps of one peer chunk: per channel one ProxyOp of up to max_proxy_steps steps
  /// (128 KiB, the network P2P step, or a quarter of the channel's share), its steps paced evenly over
  /// the transfer [t0 + L, end]: a send step is ready at launch and done when its share has gone, a
  /// recv step receives its share then hands it to the GPU.
  void add_a2a_plans(const a2a_model& am, int me, const op_desc& d, double end, proxy_item& it) const {
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
      pl.start = clk.gpu_ns(am.arrival(me));
      pl.n_steps = steps;
      pl.step_bytes = (per_ch + std::size_t(steps) - 1) / std::size_t(steps);
      for (int k = 0; k < steps; ++k) {
        const double got = from + (k + 1) * len;
        pl.steps[k] = send
                          ? proxy_step_times{pl.start, pl.start, pl.start, clk.gpu_ns(got)}
                          : proxy_step_times{pl.start, clk.gpu_ns(got), clk.gpu_ns(got + 1e-6), clk.gpu_ns(got + 2e-6)};
      }
    }
  }

  void user_thread(rank_state& r) {
    if (o.cases) return cases_user_thread(r);
    if (o.alltoall) return alltoall_user_thread(r);
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
          } else {
            it.stop_ns = clk.gpu_ns(ro.end);
            for (std::size_t ch = 0; ch < max_channels; ++ch) {
              it.ch_stop[ch] = clk.gpu_ns(ro.ch_stop[ch]);
              it.stop_ns = std::max(it.stop_ns, it.ch_stop[ch]);
            }
            it.pxn = o.pxn && x == i && comm_network(o, op.comm);
            if (it.op.network && (it.op.mask & gate::proxy_op)) add_plans(r, tl, ro, op, it);
          }
          it.group_last = x + 1 == e;
          push(r, it);
        }
        i = e;
      }
      if (hung || stop.load()) break;
      const double len = tl.now(r.global) - begin;
      clk.wait_until(tl.now(r.global), stop);
      r.tflops.store(len > 0 ? m.flop_per_step / len / 1e12 : 0.0);
      r.steps.fetch_add(1);
    }
    // A blocked rank stays blocked until the job ends (its process is alive, its kernel spins).
    if (hung) clk.wait_until(o.end_time(m.nominal_step_s), stop);
    if (o.purge_inflight && !hung) {
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
        push(r, it);
      }
    }
    proxy_item q;
    q.quit = true;
    push(r, q);
  }

  void proxy_thread(rank_state& r) {
    bind_device(r.node, r.local);
    // One group's ops at a time: their KernelCh and ProxyOp/ProxyStep events interleave in time.
    std::array<proxy_item, 4> grp;
    std::array<std::array<kernel_time, max_channels>, 4> times{}, garbage{};
    std::array<timed_op, 4> timed{};
    std::size_t n = 0;
    // Simulated proxy clock for the next event only if it is a ProxyStep one (--speed 0; see clock_gettime).
    auto wait = [this](u64 t, bool step) {
      clk.wait_until(double(t - clk.base_ns) / 1e9, stop);
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
        clk.wait_until(double(cur.start_ns - clk.base_ns) / 1e9, stop);
        c.start_only(cur.op, cur.start_ns);
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
        if (!o.truth.empty() || r.truth_ops) note_truth(r, c, cur.op, nullptr, 0);
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
      if (!o.truth.empty() || r.truth_ops) note_truth(r, c, cur.op, times[n].data(), nch, cur.bad_timer);
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

  /// --truth: the kernel's real span on this rank (earliest channel start to latest channel stop, as the
  /// GPU stamped them), before the release's device-ring effects decide what the KernelCh events carry.
  /// A Send/Recv to the rank itself (`t` NULL) counts as untimed: it has no KernelCh. `bad_timer`: its
  /// KernelCh carried a garbage timer (--bad-timer), counted as corrupted.
  static void note_truth(rank_state& r, const comm_driver& c, const pending_op& p, const kernel_time* t, int nch,
                         bool bad_timer = false) {
    const truth_key k{c.config().comm_hash, c.config().rank, c.config().n_ranks, int(p.func), u64(p.bytes)};
    if (p.self_p2p) {
      truth_sum& s = r.truth[k];
      ++s.ops;
      ++s.untimed;
      return;
    }
    if (p.kind == op_kind::ce_coll || nch <= 0 || !t) return;
    u64 lo = t[0].start_ns, hi = t[0].stop_ns;
    for (int i = 1; i < nch; ++i) lo = std::min(lo, t[i].start_ns), hi = std::max(hi, t[i].stop_ns);
    truth_sum& s = r.truth[k];
    ++s.ops;
    const bool corrupted = p.stale_timestamps || p.drifted || p.shifted || bad_timer;
    const bool untimed = !p.kernel_events || !(p.mask & abi::ev_kernel_ch);
    if (corrupted) ++s.corrupted;
    if (untimed) ++s.untimed;
    if (!corrupted && !untimed) s.busy_s += double(hi - lo) * 1e-9;
    if (r.truth_ops)
      std::fprintf(r.truth_ops,
                   "{\"rank\":%d,\"comm_hash\":\"0x%016llx\",\"func\":\"%s\",\"seq\":%llu,\"bytes\":%llu,"
                   "\"nranks\":%d,\"start_ns\":%llu,\"end_ns\":%llu,\"replay\":%s,\"corrupted\":%s,"
                   "\"untimed\":%s}\n",
                   c.config().rank, static_cast<unsigned long long>(c.config().comm_hash), func_name(p.func),
                   static_cast<unsigned long long>(p.seq), static_cast<unsigned long long>(p.bytes), c.config().n_ranks,
                   static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi),
                   p.replay ? "true" : "false", corrupted ? "true" : "false", untimed ? "true" : "false");
  }

  /// --truth FILE: one JSON line per (rank, communicator, function, bytes) with the truth sums.
  void write_truth(const std::string& path) const {
    if (path.empty()) return;
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "ncclinsp-sim: cannot write --truth %s\n", path.c_str());
      return;
    }
    for (const auto& r : ranks)
      for (const auto& [k, v] : r->truth)
        std::fprintf(
            f,
            "{\"node\":%d,\"global_rank\":%d,\"comm_hash\":\"0x%016llx\",\"rank\":%d,\"nranks\":%d,\"func\":\"%s\","
            "\"bytes\":%llu,\"ops\":%llu,\"corrupted\":%llu,\"untimed\":%llu,\"busy_s\":%.9f}\n",
            r->node, r->global, static_cast<unsigned long long>(k.comm_hash), k.rank, k.nranks,
            func_name(nccl_func(k.func)), static_cast<unsigned long long>(k.bytes),
            static_cast<unsigned long long>(v.ops), static_cast<unsigned long long>(v.corrupted),
            static_cast<unsigned long long>(v.untimed), v.busy_s);
    std::fclose(f);
  }

  void write_prom(const std::string& dir) const {
    if (dir.empty()) return;
    std::string s =
        "# HELP ncclinsp_sim_step_tflops Throughput of the rank's last simulated training step, TFLOP/s per GPU.\n"
        "# TYPE ncclinsp_sim_step_tflops gauge\n";
    for (const auto& r : ranks)
      fmt::format_to(std::back_inserter(s), "ncclinsp_sim_step_tflops{{node=\"{}\",rank=\"{}\"}} {}\n",
                     node_label(r->node), r->global, r->tflops.load());
    s += "# HELP ncclinsp_sim_steps_total Simulated training steps completed by the rank.\n"
         "# TYPE ncclinsp_sim_steps_total counter\n";
    for (const auto& r : ranks)
      fmt::format_to(std::back_inserter(s), "ncclinsp_sim_steps_total{{node=\"{}\",rank=\"{}\"}} {}\n",
                     node_label(r->node), r->global, r->steps.load());
    ncclinsp::detail::write_file_atomic(dir, "ncclinsp_sim.prom", s);  // a failed write keeps the old file
  }

  int run(const std::vector<int>& nodes, const std::string& prom_dir) {
    for (int node : nodes)
      for (int l = 0; l < o.gpus; ++l) {
        auto r = std::make_unique<rank_state>();
        r->node = node;
        r->local = l;
        r->global = node * o.gpus + l;
        r->comms.resize(4);
        ranks.push_back(std::move(r));
      }
    // Communicator init runs on each rank's own thread (concurrently, like ncclCommInitRank per GPU).
    {
      std::vector<std::thread> init;
      for (auto& rp : ranks)
        init.emplace_back([this, r = rp.get()] {
          bind_device(r->node, r->local);
          if (o.cases) return;  // created and destroyed by its user thread
          if (o.alltoall) {     // the workload's one communicator
            r->comms[0] = std::make_unique<comm_driver>(lib, make_workload_comm(*r));
            return;
          }
          for (comm_kind k : {comm_kind::tp, comm_kind::fsdp, comm_kind::dp, comm_kind::pp}) {
            if (comm_size(o, k) < 2) continue;
            r->comms[std::size_t(k)] = std::make_unique<comm_driver>(lib, make_comm(*r, k));
          }
        });
      for (auto& t : init) t.join();
    }
    // --truth / --truth-ops: one file per process (a node's child adds ".<node>").
    auto truth_path = [&](const std::string& p) {
      return p.empty() || o.single_process || nodes.empty() ? p : p + "." + node_label(nodes.front());
    };
    std::FILE* truth_ops = o.truth_ops.empty() ? nullptr : std::fopen(truth_path(o.truth_ops).c_str(), "w");
    for (auto& rp : ranks) rp->truth_ops = truth_ops;  // fprintf locks the stream: one line per call
    std::vector<std::thread> threads;
    for (auto& rp : ranks) {
      threads.emplace_back([this, r = rp.get()] { proxy_thread(*r); });
      threads.emplace_back([this, r = rp.get()] { user_thread(*r); });
    }
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread writer([&] {
      std::unique_lock lk(mu);
      while (!done) {
        write_prom(prom_dir);
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return done; });
      }
    });
    for (auto& t : threads) t.join();
    {
      std::lock_guard lk(mu);
      done = true;
    }
    cv.notify_all();
    writer.join();
    write_prom(prom_dir);
    write_truth(truth_path(o.truth));
    if (truth_ops) std::fclose(truth_ops);
    // ncclCommDestroy: finalize every communicator (destroy order: last created first).
    for (auto& r : ranks)
      for (auto it = r->comms.rbegin(); it != r->comms.rend(); ++it)
        if (*it) (*it)->finalize();
    for (auto& r : ranks) r->comms.clear();
    return 0;
  }
};

}  // namespace ncclinsp::sim::app
