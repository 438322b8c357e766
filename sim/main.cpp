/// ncclinsp-sim: simulates an N-node x G-GPU LLM training job driving an NCCL profiler plugin through the
/// real ABI (see sim/README.md for the workload, bandwidth model and fault injection).
///
/// Process model: the parent forks one child per node (re-exec of itself with a hidden --node-index), each
/// with its own NCCLINSP_NODE_NAME / NCCL_INSPECTOR_DUMP_DIR / NCCLINSP_CUDA_DRIVER; `--single-process`
/// runs every rank in one process. Per rank: a user thread (enqueue) and a proxy thread (KernelCh events at
/// the simulated GPU end time), connected by a small SPSC queue.

#include "job_model.hpp"
#include "nccl_driver.hpp"

#include <CLI/CLI.hpp>
#include <ncclinsp/detail/clock.hpp>
#include <ncclinsp/format/json_writer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef NCCLINSP_SIMCUDA_DEFAULT_PATH
#define NCCLINSP_SIMCUDA_DEFAULT_PATH ""
#endif

namespace {
// Simulated proxy clock (--speed 0): the plugin times ProxyStep state transitions with
// CLOCK_MONOTONIC on NCCL's proxy thread. At --speed 0 no thread waits for the simulated time, so
// a proxy thread sets the simulated time of a ProxyStep event here just before emitting it and
// clears it before any other event (complete_timed's wait(t, step)), and this executable's
// clock_gettime (exported: the dlopen'ed plugin's calls land here) returns it for CLOCK_MONOTONIC
// on that thread while set. So only the clock reads inside the plugin's ProxyStep callbacks see
// simulated time; the plugin's other reads on the proxy thread (KernelCh CPU spans, the record
// ring's rate estimate when that thread publishes a record) and every other thread read the real clock.
thread_local std::int64_t t_sim_monotonic_ns = -1;

int real_clock_gettime(clockid_t id, timespec* ts) {
  static const auto real = reinterpret_cast<int (*)(clockid_t, timespec*)>(::dlsym(RTLD_NEXT, "clock_gettime"));
  return real ? real(id, ts) : static_cast<int>(::syscall(SYS_clock_gettime, id, ts));
}
}  // namespace

extern "C" int clock_gettime(clockid_t id, timespec* ts) {
  if (t_sim_monotonic_ns >= 0 && id == CLOCK_MONOTONIC) {
    ts->tv_sec = static_cast<time_t>(t_sim_monotonic_ns / 1000000000);
    ts->tv_nsec = static_cast<long>(t_sim_monotonic_ns % 1000000000);
    return 0;
  }
  return real_clock_gettime(id, ts);
}

namespace {

using namespace ncclinsp::sim;
namespace fs = std::filesystem;
using u64 = std::uint64_t;


using namespace ncclinsp::sim::job;

bool parse_window(const std::string& s, window& w) {
  const auto dash = s.find('-');
  if (dash == std::string::npos) return false;
  try {
    w.t0 = std::stod(s.substr(0, dash));
    w.t1 = std::stod(s.substr(dash + 1));
  } catch (...) {
    return false;
  }
  return w.t1 > w.t0 && w.t0 >= 0;
}

// ---- SPSC queue user thread -> proxy thread --------------------------------------------------
struct proxy_item {
  pending_op op;
  int comm = 0;
  u64 start_ns = 0, stop_ns = 0;  // simulated ns: this rank's kernel start, the op's last channel stop
  std::array<u64, max_channels> ch_stop{};  // per channel index
  std::array<proxy_plan, 32> plans{};       // this rank's network ProxyOps (when the mask asks for them)
  int n_plans = 0;
  bool group_last = true;                   // the last op of its group (the proxy thread emits a group at once)
  bool start_only = false;
  bool pxn = false;
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

// ---- simulated CUDA driver ------------------------------------------------------------------
using set_device_fn = void (*)(int, const unsigned char*);
set_device_fn g_set_device = nullptr;

/// Deterministic in (node, gpu) and, for --seed other than 1, the seed: two simulated jobs with different
/// seeds sharing one output folder get different GPUs (the plugin names its .prom file after the UUID).
u64 g_uuid_salt = 0;
void gpu_uuid(int node, int gpu, unsigned char out[16]) {
  const u64 a = mix(0x6e63636c696e7370ull, u64(node) * 4096 + u64(gpu)) ^ g_uuid_salt;
  const u64 b = splitmix(a);
  std::memcpy(out, &a, 8);
  std::memcpy(out + 8, &b, 8);
  out[6] = static_cast<unsigned char>((out[6] & 0x0F) | 0x40);  // looks like a v4 UUID
  out[8] = static_cast<unsigned char>((out[8] & 0x3F) | 0x80);
}
void bind_device(int node, int gpu) {
  if (!g_set_device) return;
  unsigned char uuid[16];
  gpu_uuid(node, gpu, uuid);
  g_set_device(gpu, uuid);
}

// ---- timing ----------------------------------------------------------------------------------
u64 realtime_ns() { return ncclinsp::detail::unix_ns(); }

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

// ---- one rank -----------------------------------------------------------------------------
struct rank_state {
  int node = 0, local = 0, global = 0;
  std::vector<std::unique_ptr<comm_driver>> comms;  // indexed by comm_kind
  spsc_queue q;
  std::atomic<u64> steps{0};
  std::atomic<double> tflops{0.0};
  std::atomic<bool> proxy_done{false};
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
    switch (k) {
      case comm_kind::tp:
        c.name = "tp";
        c.comm_hash = mix(hash_str("tp"), u64(r.node));
        c.n_nodes = 1; c.n_ranks = o.gpus; c.rank = r.local;
        break;
      case comm_kind::fsdp:
        c.name = "fsdp";
        c.comm_hash = hash_str("fsdp");
        c.n_nodes = o.nodes; c.n_ranks = o.nodes * o.gpus; c.rank = r.global;
        break;
      case comm_kind::dp:
        c.name = "dp" + std::to_string(r.local);
        c.comm_hash = mix(hash_str("dp"), u64(r.local));
        c.n_nodes = o.nodes; c.n_ranks = o.nodes; c.rank = r.node;
        break;
      case comm_kind::pp:
        c.name = "pp" + std::to_string(r.local);
        c.comm_hash = mix(hash_str("pp"), u64(r.local));
        c.n_nodes = o.nodes; c.n_ranks = o.nodes; c.rank = r.node;
        break;
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);  // different seeds → different "jobs"
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
      pl.n_steps = step_times(m, op, ro, cn.channel, r.global, cn.peer_global, cn.is_send, a_self, a_peer, st, pl.step_bytes);
      for (int k = 0; k < pl.n_steps; ++k)
        pl.steps[k] = proxy_step_times{clk.gpu_ns(st[k].post), clk.gpu_ns(st[k].ready), clk.gpu_ns(st[k].sent),
                                       clk.gpu_ns(st[k].done)};
    }
  }

  void user_thread(rank_state& r) {
    bind_device(r.node, r.local);
    timeline tl(m);  // the whole job's coupled timeline, computed identically by every rank
    std::vector<op_desc> descs;
    std::vector<pending_op> pend(8);
    descs.reserve(8);
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
          d.send_buff = reinterpret_cast<const void*>(0x7f0000000000ull + (u64(r.global) << 32));
          d.recv_buff = reinterpret_cast<void*>(0x7f0000000000ull + (u64(r.global) << 32) + (1ull << 31));
          if (op.p2p_dir) {
            d.peer = r.node + op.p2p_dir;  // pp rank = node index
            d.channel_lo = 2 + 4 * (r.local % 4) + (op.p2p_dir > 0 ? 0 : 2);  // P2P channels are not 0-based
          }
          descs.push_back(d);
        }
        clk.wait_until(mine[i].start, stop);
        if (stop.load()) break;
        c.enqueue(std::span<const op_desc>(descs), std::span<pending_op>(pend.data(), descs.size()));
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
    std::array<std::array<kernel_time, max_channels>, 4> times{};
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
      timed[n] = timed_op{&cur.op, std::span<const kernel_time>(times[n].data(), std::size_t(std::max(nch, 1))),
                          std::span<const proxy_plan>(cur.plans.data(), std::size_t(cur.n_plans))};
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

  void write_prom(const std::string& dir) const {
    if (dir.empty()) return;
    std::ostringstream s;
    s << "# HELP ncclinsp_sim_step_tflops Throughput of the rank's last simulated training step, TFLOP/s per GPU.\n"
         "# TYPE ncclinsp_sim_step_tflops gauge\n";
    for (const auto& r : ranks)
      s << "ncclinsp_sim_step_tflops{node=\"" << node_label(r->node) << "\",rank=\"" << r->global << "\"} "
        << r->tflops.load() << "\n";
    s << "# HELP ncclinsp_sim_steps_total Simulated training steps completed by the rank.\n"
         "# TYPE ncclinsp_sim_steps_total counter\n";
    for (const auto& r : ranks)
      s << "ncclinsp_sim_steps_total{node=\"" << node_label(r->node) << "\",rank=\"" << r->global << "\"} "
        << r->steps.load() << "\n";
    const fs::path final_path = fs::path(dir) / "ncclinsp_sim.prom";
    const fs::path tmp = fs::path(dir) / ".ncclinsp_sim.prom.tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << s.str();
      if (!f) return;
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
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
          for (comm_kind k : {comm_kind::tp, comm_kind::fsdp, comm_kind::dp, comm_kind::pp}) {
            if (comm_size(o, k) < 2) continue;
            r->comms[std::size_t(k)] = std::make_unique<comm_driver>(lib, make_comm(*r, k));
          }
        });
      for (auto& t : init) t.join();
    }
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
    // ncclCommDestroy: finalize every communicator (destroy order: last created first).
    for (auto& r : ranks)
      for (auto it = r->comms.rbegin(); it != r->comms.rend(); ++it)
        if (*it) (*it)->finalize();
    for (auto& r : ranks) r->comms.clear();
    return 0;
  }
};

// ---- summary ----------------------------------------------------------------------------------
/// The summary's layout: ", " and ": " between items; numbers as an ostream writes them (%.6g).
constexpr ncclinsp::format::json_style summary_style{", ", ": "};
constexpr int summary_precision = 6;

void fault_json(ncclinsp::format::json_writer& j, const options& o, const fault& f) {
  j.begin_object().key("kind").value(fault_name(f.kind));
  if (f.node >= 0) j.key("node").value(f.node).key("node_name").value(o.node_prefix + std::to_string(f.node));
  if (f.nic >= 0) j.key("nic").value(f.nic);
  if (f.rank >= 0)
    j.key("rank").value(f.rank).key("node").value(f.rank / o.gpus).key("node_name").value(o.node_prefix + std::to_string(f.rank / o.gpus))
        .key("ms").general(f.ms, summary_precision);
  else
    j.key("pct").general(f.pct, summary_precision);
  j.key("t0").general(f.w.t0, summary_precision).key("t1").general(f.w.t1, summary_precision).key("random").value(f.random).end_object();
}

/// The busbw the plugin should measure (bus bytes / kernel time, summed over ranks and ops, as a rate) per
/// comm x collective x size, from `steps` steps of the same timeline with `faults` active all the time.
std::map<std::string, double> measured_busbw(const options& base, const std::vector<fault>& faults, int steps) {
  options o = base;
  o.faults = faults;
  for (auto& f : o.faults) f.w = window{0, 1e300};
  o.hangs.clear();
  const model m(o);
  timeline tl(m);
  std::map<std::string, std::pair<double, double>> acc;
  for (int s = 0; s < steps; ++s) {
    tl.step(u64(s));
    for (int r = 0; r < tl.ranks(); ++r)
      for (const rank_op& ro : tl.ops(r)) {
        const sim_op& op = m.program[std::size_t(ro.group)].ops[std::size_t(ro.op)];
        if (op.ce || ro.hung) continue;
        const traffic tr = traffic_of(op, comm_size(o, op.comm));
        double stop = ro.start;
        for (std::size_t c = 0; c < std::min<std::size_t>(op.n_channels, max_channels); ++c) stop = std::max(stop, ro.ch_stop[c]);
        auto& a = acc[std::string(kind_name(op.comm)) + func_name(op.func) + std::to_string(op.bytes)];
        a.first += tr.size_bytes * tr.factor / 1e9;  // as a rate over a window: sum(bytes) / sum(time)
        a.second += stop - ro.start;
      }
  }
  std::map<std::string, double> out;
  for (const auto& [k, v] : acc) out[k] = v.first / v.second;
  return out;
}

void write_summary(const options& o, const model& m, const std::string& path) {
  constexpr int sim_steps = 40;
  const auto nominal = measured_busbw(o, {}, sim_steps);
  std::vector<std::map<std::string, double>> per_fault;
  for (const auto& f : o.faults) per_fault.push_back(measured_busbw(o, {f}, sim_steps));
  std::string out;
  ncclinsp::format::json_writer j(out, summary_style);
  auto num = [&](std::string_view k, double v) { j.key(k).general(v, summary_precision); };
  j.begin_object({"\n  ", "\n"});  // one top-level member a line
  j.key("config").begin_object().key("plugin").value(o.plugin).key("abi").value(o.abi).key("nodes").value(o.nodes);
  j.key("gpus").value(o.gpus).key("nics").value(o.nic_count());
  num("duration_s", o.duration);
  j.key("steps").value(o.steps);
  num("speed", o.speed);
  j.key("node_prefix").value(o.node_prefix).key("seed").value(o.seed);
  num("launch_jitter_us", o.launch_jitter_us);
  num("wobble_pct", o.wobble_pct);
  num("wobble_period_s", o.wobble_period_s);
  num("nvlink_busbw_gbs", nvlink_busbw / 1e9);
  num("network_busbw_gbs", network_busbw / 1e9);
  num("nominal_step_s", m.nominal_step_s);
  num("compute_s", m.compute_s);
  num("flop_per_step_per_gpu", m.flop_per_step);
  j.end_object();
  // Per kind (the old keys net_degrade / slow_host / hang_rank kept), plus one list of every fault.
  j.key("faults").begin_object();
  for (fault_kind k : {fault_kind::net_degrade, fault_kind::slow_host, fault_kind::slow_nic, fault_kind::straggler,
                       fault_kind::nvlink_degrade}) {
    j.key(fault_name(k)).begin_array();
    for (const auto& f : o.faults)
      if (f.kind == k) fault_json(j, o, f);
    j.end_array();
  }
  j.key("hang_rank").begin_array();
  for (const auto& h : o.hangs) {
    j.begin_object().key("rank").value(h.rank);
    num("t", h.t);
    j.end_object();
  }
  j.end_array().key("all").begin_array();
  for (const auto& f : o.faults) fault_json(j, o, f);
  j.end_array().end_object();
  const auto rf = std::find_if(o.faults.begin(), o.faults.end(), [](const fault& f) { return f.random; });
  j.key("random_fault");
  if (rf == o.faults.end())
    j.null();
  else
    fault_json(j, o, *rf);
  j.key("busbw").begin_array({"\n    ", "\n  "});
  std::vector<std::string> seen;
  for (const auto& g : m.program)
    for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
      const sim_op& op = g.ops[oi];
      if (op.ce) continue;
      const std::string key = std::string(kind_name(op.comm)) + func_name(op.func) + std::to_string(op.bytes);
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
      seen.push_back(key);
      const int n = comm_size(o, op.comm);
      const bool first_of_group = oi == 0 || op.p2p_dir != 0;
      j.begin_object().key("comm").value(kind_name(op.comm)).key("collective").value(func_name(op.func)).key("nranks").value(n);
      j.key("n_nodes").value(comm_network(o, op.comm) ? o.nodes : 1).key("network").value(comm_network(o, op.comm));
      j.key("bytes_per_rank").value(op.bytes).key("algo").value(op.sym ? "AGxLL_R" : op.algo).key("proto").value(op.sym ? "" : op.proto);
      j.key("n_channels").value(int(op.n_channels));
      num("model_busbw_gbs", m.base_busbw(op.comm) / 1e9);
      num("link_busbw_gbs", m.busbw_gbs(op, 1.0, false));
      num("expected_wait_busbw_gbs", m.busbw_gbs(op, 1.0, first_of_group));
      num("nominal_busbw_gbs", nominal.at(key));
      // Simulated with that fault alone, averaged over every rank (all ranks of an op share its pace).
      j.key("degraded").begin_array();
      for (std::size_t fi = 0; fi < o.faults.size(); ++fi) {
        const fault& f = o.faults[fi];
        const auto it = per_fault[fi].find(key);
        j.begin_object().key("fault").value(fault_name(f.kind));
        num("t0", f.w.t0);
        num("t1", f.w.t1);
        num("busbw_gbs", it == per_fault[fi].end() ? 0.0 : it->second);
        j.end_object();
      }
      j.end_array().end_object();
    }
  j.end_array().key("phases").begin_array({"\n    ", "\n  "});
  std::vector<double> cuts{0.0};
  for (const auto& f : o.faults) { cuts.push_back(f.w.t0); cuts.push_back(f.w.t1); }
  const double end = o.end_time(m.nominal_step_s);
  cuts.push_back(std::max(end, 0.0));
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] >= end) break;
    const double t1 = std::min(cuts[i + 1], end);
    const double mid = (cuts[i] + t1) / 2;
    const double st = m.expected_step(mid);
    std::string active;
    for (const auto& f : o.faults)
      if (f.w.active(mid) && active.find(fault_name(f.kind)) == std::string::npos)
        active += std::string(active.empty() ? "" : ",") + fault_name(f.kind);
    j.begin_object();
    num("t0", cuts[i]);
    num("t1", t1);
    j.key("faults").value(active.empty() ? "none" : active);
    num("step_s", st);
    num("tflops", m.flop_per_step / st / 1e12);
    j.end_object();
  }
  j.end_array().end_object();
  out += '\n';
  std::ofstream f(path, std::ios::trunc);
  f << out;
  if (!f) std::fprintf(stderr, "ncclinsp-sim: cannot write the summary to %s\n", path.c_str());
}

// ---- process management -----------------------------------------------------------------------
std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string default_cuda_driver() {
  const std::string exe = self_exe();
  if (!exe.empty()) {
    const fs::path p = fs::path(exe).parent_path() / "libncclinsp-simcuda.so";
    if (fs::exists(p)) return p.string();
  }
  return NCCLINSP_SIMCUDA_DEFAULT_PATH;
}

int run_nodes(const options& o, const std::vector<int>& nodes, const std::string& prom_dir, u64 base_ns) {
  if (!o.cuda_driver.empty()) {
    if (void* h = ::dlopen(o.cuda_driver.c_str(), RTLD_NOW | RTLD_LOCAL))
      g_set_device = reinterpret_cast<set_device_fn>(::dlsym(h, "ncclinsp_simcuda_set_device"));
    if (!g_set_device) std::fprintf(stderr, "ncclinsp-sim: warning: cannot use simulated CUDA driver %s\n", o.cuda_driver.c_str());
  }
  plugin_library lib(o.plugin, o.abi);
  if (!lib.ok()) {
    std::fprintf(stderr, "ncclinsp-sim: %s\n", lib.error().c_str());
    return 2;
  }
  if (o.verbose) std::fprintf(stderr, "ncclinsp-sim: loaded %s (v%d) from %s\n", lib.name(), lib.abi(), o.plugin.c_str());
  model m(o);
  node_runner nr{o, m, lib, clock_map{base_ns, o.speed}, {}, {}};
  if (!prom_dir.empty()) fs::create_directories(prom_dir);
  return nr.run(nodes, prom_dir);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"ncclinsp-sim: simulated multi-node LLM training job driving an NCCL profiler plugin"};
  app.add_option("--plugin", o.plugin, "profiler plugin .so")->required();
  std::vector<int> abi_choices{0};
  abi_choices.insert(abi_choices.end(), ncclinsp::abi::versions.begin(), ncclinsp::abi::versions.end());
  app.add_option("--abi", o.abi,
                 "profiler ABI: 0 = newest exported, " + std::to_string(ncclinsp::abi::oldest) + ".." + std::to_string(ncclinsp::abi::newest))
      ->check(CLI::IsMember(abi_choices));
  app.add_option("--nodes", o.nodes, "simulated nodes")->check(CLI::Range(1, 4096));
  app.add_option("--gpus", o.gpus, "GPUs per node")->check(CLI::Range(1, 16));
  auto* dur = app.add_option("--duration", o.duration, "simulated seconds to run")->check(CLI::NonNegativeNumber);
  auto* stp = app.add_option("--steps", o.steps, "training steps to run")->check(CLI::NonNegativeNumber);
  dur->excludes(stp);
  app.add_option("--speed", o.speed, "1 = real time, 10 = 10x faster, 0 = as fast as possible")->check(CLI::NonNegativeNumber);
  app.add_option("--out", o.out, "output directory (per node: DIR/<node>/)");
  app.add_option("--node-prefix", o.node_prefix, "node name prefix (node<k>)");
  app.add_option("--cuda-driver", o.cuda_driver, "simulated CUDA driver .so (default: libncclinsp-simcuda.so next to the binary)");
  app.add_option("--summary", o.summary, "write a JSON summary of the model and the injected faults");
  app.add_flag("--prom", o.prom, "set NCCL_INSPECTOR_ENABLE=1, PROM_DUMP=1, DUMP_THREAD_INTERVAL_MICROSECONDS=1000000 unless set");
  app.add_flag("--single-process", o.single_process, "run every node's ranks in this process (no fork)");
  app.add_flag("--purge-inflight", o.purge_inflight, "at the end leave KernelCh events started and never stopped (NCCL 2.31)");
  app.add_flag("--user-tags", o.user_tags, "v7: tag collectives with per-phase user tags");
  app.add_flag("--sym-kernels", o.sym_kernels, "v7: run the small tp AllReduce as a symmetric kernel (with kernel phases)");
  app.add_flag("--ce-collectives", o.ce_colls, "v6+: add a copy-engine AllGather on tp");
  app.add_flag("--pxn", o.pxn, "emit a foreign-pid (PXN) ProxyOp after each network op");
  app.add_option("--mask-override", o.mask_override, "RAS: after each init set the global mask to this value (e.g. 65535)");
  app.add_option("--seed", o.seed, "jitter / hash seed");
  app.add_flag("-v,--verbose", o.verbose, "print the plugin's INFO logs");
  std::vector<std::string> degr, slow, nic, strag, nvl, hangs;
  std::optional<u64> random_seed;
  app.add_option("--nics", o.nics, "NICs per node (default: one per GPU); channels are spread over them")->check(CLI::Range(0, 64));
  app.add_option("--launch-jitter-us", o.launch_jitter_us, "each rank launches each op group up to this much later (uniform)")
      ->check(CLI::NonNegativeNumber);
  std::string wobble;
  app.add_option("--wobble", wobble, "PCT[:PERIOD_S]: healthy fabric wobble, every NIC x (1 + PCT/100 sin(2 pi t / PERIOD_S)), period 120 s");
  app.add_option("--net-degrade", degr, "PCT@T0-T1: the fabric: every NIC's bandwidth x (1-PCT/100)");
  app.add_option("--slow-host", slow, "NODE:PCT@T0-T1: all NICs of that node (index or name) at (1-PCT/100)");
  app.add_option("--slow-nic", nic, "NODE:NIC:PCT@T0-T1: one NIC of that node at (1-PCT/100)");
  app.add_option("--straggler", strag, "RANK:MS@T0-T1: that global rank launches every op MS later");
  app.add_option("--nvlink-degrade", nvl, "NODE:PCT@T0-T1: that node's NVLink bandwidth x (1-PCT/100)");
  app.add_option("--random-fault", random_seed, "SEED: one fault of a random kind, culprit, size (10-50%) and onset");
  app.add_option("--hang-rank", hangs, "R@T: global rank R's first op at/after T never completes; its peers block in it");
  app.add_option("--node-index", o.node_index)->group("");
  app.add_option("--start-wall-ns", o.start_wall_ns)->group("");
  CLI11_PARSE(app, argc, argv);

  // "A:B:PCT@T0-T1": the fields before '@' split at ':'; want = how many.
  auto parse_fault = [&](const std::string& flag, const std::string& s, std::size_t want, std::vector<std::string>& f,
                         window& w) {
    const auto at = s.find('@');
    f.clear();
    if (at == std::string::npos || !parse_window(s.substr(at + 1), w)) return false;
    std::string head = s.substr(0, at);
    for (std::size_t p; (p = head.find(':')) != std::string::npos; head = head.substr(p + 1)) f.push_back(head.substr(0, p));
    f.push_back(head);
    if (f.size() != want) return std::fprintf(stderr, "bad %s %s\n", flag.c_str(), s.c_str()), false;
    return true;
  };
  auto number = [](const std::string& s, double lo, double hi, double& v) {
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    return !s.empty() && end && *end == 0 && v >= lo && v < hi;
  };
  // NODE is an index or a node name (<prefix><index>, e.g. node1).
  auto node_of = [&](std::string n, int& v) {
    if (n.rfind(o.node_prefix, 0) == 0 && n.size() > o.node_prefix.size()) n = n.substr(o.node_prefix.size());
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::atoi(n.c_str());
    return v >= 0 && v < o.nodes;
  };
  if (!wobble.empty()) {
    const auto c = wobble.find(':');
    char* e1 = nullptr;
    o.wobble_pct = std::strtod(wobble.c_str(), &e1);
    bool ok = e1 && (*e1 == 0 || *e1 == ':') && o.wobble_pct >= 0 && o.wobble_pct < 50;
    if (ok && c != std::string::npos) {
      char* e2 = nullptr;
      o.wobble_period_s = std::strtod(wobble.c_str() + c + 1, &e2);
      ok = e2 && *e2 == 0 && o.wobble_period_s >= 1;
    }
    if (!ok) return std::fprintf(stderr, "bad --wobble %s (PCT[:PERIOD_S], 0 <= PCT < 50, PERIOD_S >= 1)\n", wobble.c_str()), 2;
  }
  std::vector<std::string> fs_;
  for (const auto& s : degr) {
    fault f;
    f.kind = fault_kind::net_degrade;
    if (!parse_fault("--net-degrade", s, 1, fs_, f.w) || !number(fs_[0], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --net-degrade %s (PCT@T0-T1, 0 <= PCT < 100)\n", s.c_str()), 1;
    o.faults.push_back(f);
  }
  for (const auto& s : slow) {
    fault f;
    f.kind = fault_kind::slow_host;
    if (!parse_fault("--slow-host", s, 2, fs_, f.w) || !node_of(fs_[0], f.node) || !number(fs_[1], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --slow-host %s: NODE:PCT@T0-T1, NODE an index or %s<index>\n", s.c_str(), o.node_prefix.c_str()), 1;
    o.faults.push_back(f);
  }
  for (const auto& s : nic) {
    fault f;
    f.kind = fault_kind::slow_nic;
    double n = 0;
    if (!parse_fault("--slow-nic", s, 3, fs_, f.w) || !node_of(fs_[0], f.node) || !number(fs_[1], 0, o.nic_count(), n) ||
        !number(fs_[2], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --slow-nic %s: NODE:NIC:PCT@T0-T1, NIC < %d\n", s.c_str(), o.nic_count()), 1;
    f.nic = int(n);
    o.faults.push_back(f);
  }
  for (const auto& s : strag) {
    fault f;
    f.kind = fault_kind::straggler;
    double r = 0;
    if (!parse_fault("--straggler", s, 2, fs_, f.w) || !number(fs_[0], 0, o.nodes * o.gpus, r) || !number(fs_[1], 0, 1e6, f.ms))
      return std::fprintf(stderr, "bad --straggler %s: RANK:MS@T0-T1\n", s.c_str()), 1;
    f.rank = int(r);
    o.faults.push_back(f);
  }
  for (const auto& s : nvl) {
    fault f;
    f.kind = fault_kind::nvlink_degrade;
    if (!parse_fault("--nvlink-degrade", s, 2, fs_, f.w) || !node_of(fs_[0], f.node) || !number(fs_[1], 0, 100, f.pct))
      return std::fprintf(stderr, "bad --nvlink-degrade %s: NODE:PCT@T0-T1\n", s.c_str()), 1;
    o.faults.push_back(f);
  }
  for (const auto& s : hangs) {
    hang h;
    const auto at = s.find('@');
    if (at == std::string::npos) return std::fprintf(stderr, "bad --hang-rank %s\n", s.c_str()), 1;
    h.rank = std::atoi(s.substr(0, at).c_str());
    h.t = std::atof(s.substr(at + 1).c_str());
    if (h.rank < 0 || h.rank >= o.nodes * o.gpus) return std::fprintf(stderr, "bad --hang-rank %s\n", s.c_str()), 1;
    o.hangs.push_back(h);
  }
  if (o.duration <= 0 && o.steps <= 0) o.duration = 60;
  g_uuid_salt = o.seed == 1 ? 0 : splitmix(o.seed);
  if (random_seed) {
    const model nominal(o);
    fault f = random_fault(*random_seed, o, o.end_time(nominal.nominal_step_s));
    // A straggler late by 10-50 % of the exposed communication of a step, spread over its op groups.
    if (f.kind == fault_kind::straggler) {
      std::size_t groups = 0;
      for (const auto& g : nominal.program) groups += g.first_step_only ? 0 : 1;
      f.ms = 1e3 * (nominal.nominal_step_s - nominal.compute_s) * f.pct / 100.0 / double(std::max<std::size_t>(groups, 1));
    }
    o.faults.push_back(f);
  }
  logger_verbose().store(o.verbose);
  if (o.cuda_driver.empty()) o.cuda_driver = default_cuda_driver();
  if (o.prom) {
    ::setenv("NCCL_INSPECTOR_ENABLE", "1", 0);
    ::setenv("NCCL_INSPECTOR_PROM_DUMP", "1", 0);
    ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1000000", 0);
  }
  if (!o.cuda_driver.empty()) ::setenv("NCCLINSP_CUDA_DRIVER", o.cuda_driver.c_str(), 1);

  // Child: one node.
  if (o.node_index >= 0) {
    const std::string dir = o.out.empty() ? std::string() : (fs::path(o.out) / (o.node_prefix + std::to_string(o.node_index))).string();
    return run_nodes(o, {o.node_index}, dir, u64(o.start_wall_ns ? o.start_wall_ns : (long long)realtime_ns()));
  }

  if (!o.summary.empty()) {
    model m(o);
    std::error_code ec;
    if (const auto parent = fs::path(o.summary).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
    write_summary(o, m, o.summary);
  }
  const u64 base = realtime_ns() + (o.single_process ? 0 : 300'000'000ull);  // children start aligned

  if (o.single_process) {
    if (!o.out.empty()) {
      fs::create_directories(o.out);
      ::setenv("NCCL_INSPECTOR_DUMP_DIR", o.out.c_str(), 0);
    }
    std::vector<int> nodes(std::size_t(o.nodes));
    for (int k = 0; k < o.nodes; ++k) nodes[std::size_t(k)] = k;
    return run_nodes(o, nodes, o.out, base);
  }

  const std::string exe = self_exe();
  if (exe.empty()) return std::fprintf(stderr, "ncclinsp-sim: cannot find /proc/self/exe\n"), 1;
  std::vector<pid_t> children;
  for (int k = 0; k < o.nodes; ++k) {
    const std::string name = o.node_prefix + std::to_string(k);
    std::string dump;
    if (!o.out.empty()) {
      dump = (fs::path(o.out) / name).string();
      fs::create_directories(dump);
    }
    const pid_t pid = ::fork();
    if (pid < 0) return std::perror("fork"), 1;
    if (pid == 0) {
      ::setenv("NCCLINSP_NODE_NAME", name.c_str(), 1);
      if (!dump.empty()) ::setenv("NCCL_INSPECTOR_DUMP_DIR", dump.c_str(), 1);
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--node-index");
      args.push_back(std::to_string(k));
      args.push_back("--start-wall-ns");
      args.push_back(std::to_string(base));
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv(exe.c_str(), cargs.data());
      std::perror("execv");
      ::_exit(127);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (std::size_t k = 0; k < children.size(); ++k) {
    int status = 0;
    if (::waitpid(children[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "ncclinsp-sim: node %zu failed (status %#x)\n", k, status);
      ++failed;
    }
  }
  return failed ? 1 : 0;
}
