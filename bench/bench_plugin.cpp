// The plugin through its exported table of the newest ABI (abi::newest), as NCCL calls it, next
// to the do-nothing plugin (bench/null_plugin.cpp) measured in the same run:
//  - driver_*: sim::comm_driver emits NCCL 2.31's full callback sequence for one ncclAllReduce-like
//    call (GroupApi, CollApi, Group, Coll start/stop on the user side; KernelCh start, state 22,
//    stop per channel on the proxy side). This is the per-collective cost NCCL sees.
//  - direct_*: only Coll start/stop and, per channel, KernelCh start/recordEventState(22)/stop,
//    called straight through the table (no descriptor clearing, no ancestors); with the null
//    plugin it also isolates the driver's own overhead.
//  - p2p_send: one ncclSend through the driver.
//  - pingpong_*: enqueue on one thread (CPU 0), complete on another (CPU 1) through an SPSC queue.
// Plugins: ours (ncclinsp), null (NULL handles: NCCL then skips stop/record), null_handles
// (constant non-NULL handle: every callback is made).
#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <thread>

#include "bench_common.hpp"
#include "plugin_env.hpp"

namespace {
using namespace ncclinsp;
using namespace ncclinsp::bench;
namespace abi = ncclinsp::abi;

enum which : int { ours = 0, null_plugin = 1, null_handles = 2 };
constexpr const char* which_name[] = {"ours", "null", "null_handles"};

struct env {
  sim::plugin_library lib_ours, lib_null;
  std::unique_ptr<sim::comm_driver> comm[3];
  std::unique_ptr<sim::comm_driver> comm_pp[3];  // ping-pong: its own communicator (own seq, own pool)
};
env* g_env = nullptr;

void setup() {
  set_plugin_env();
  g_env = new env;
  if (!g_env->lib_ours.open(plugin_path(), abi::newest)) throw std::runtime_error(g_env->lib_ours.error());
  if (!g_env->lib_null.open(null_plugin_path(), abi::newest)) throw std::runtime_error(g_env->lib_null.error());
  std::uint64_t hash = 0xbe1c0000;
  auto make = [&](const sim::plugin_library& lib, const char* handles) {
    ::setenv("NCCLINSP_NULL_PLUGIN_HANDLES", handles, 1);
    sim::comm_config cfg;
    cfg.comm_hash = ++hash;
    cfg.name = "bench";
    cfg.n_nodes = 1;
    cfg.n_ranks = 8;
    cfg.rank = 0;
    auto d = std::make_unique<sim::comm_driver>(lib, cfg);
    if (!d->active()) throw std::runtime_error("plugin init failed");
    return d;
  };
  for (auto* arr : {g_env->comm, g_env->comm_pp}) {
    arr[ours] = make(g_env->lib_ours, "0");
    arr[null_plugin] = make(g_env->lib_null, "0");
    arr[null_handles] = make(g_env->lib_null, "1");
  }
}

sim::op_desc coll_desc(std::size_t i, int channels) {
  sim::op_desc op;
  op.kind = sim::op_kind::coll;
  constexpr sim::nccl_func f[] = {sim::nccl_func::all_reduce, sim::nccl_func::all_gather,
                                  sim::nccl_func::reduce_scatter, sim::nccl_func::all_reduce};
  op.func = f[i % 4];
  op.dtype = sim::nccl_dtype::bfloat16;
  op.count = mix_counts[(i / 4) % mix_counts.size()];
  op.n_channels = static_cast<std::uint8_t>(channels);
  op.channel_lo = 0;
  return op;
}

std::array<sim::kernel_time, 64> kernel_times() {
  std::array<sim::kernel_time, 64> t{};
  for (std::size_t c = 0; c < t.size(); ++c) t[c] = {1'000'000 + c * 100, 1'050'000 + c * 100};
  return t;
}

/// Full NCCL sequence through the simulator: enqueue (user thread) + complete (proxy thread), same thread here.
void BM_driver_coll(benchmark::State& st, which w) {
  sim::comm_driver& d = *g_env->comm[w];
  const int nch = static_cast<int>(st.range(0));
  std::array<sim::op_desc, mix_size> ops;
  for (std::size_t i = 0; i < mix_size; ++i) ops[i] = coll_desc(i, nch);
  const auto kt = kernel_times();
  const std::span<const sim::kernel_time> t(kt.data(), static_cast<std::size_t>(nch));
  for (std::size_t i = 0; i < 4 * mix_size; ++i) d.complete(d.enqueue(ops[i % mix_size]), t);  // warm-up
  std::size_t i = 0;
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    const sim::pending_op p = d.enqueue(ops[i]);
    d.complete(p, t);
    if (++i == mix_size) i = 0;
  }
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(which_name[w]);
}

/// Coll start/stop + per channel KernelCh start, state 22, stop: straight through the v7 table.
void BM_direct_coll(benchmark::State& st, which w) {
  const sim::comm_driver& d = *g_env->comm[w];
  const auto* t = (w == ours ? g_env->lib_ours : g_env->lib_null).table<abi::newest>();
  void* const ctx = d.context();
  const int nch = static_cast<int>(st.range(0));
  static const char* fn_names[] = {"AllReduce", "AllGather", "ReduceScatter", "AllReduce"};
  std::array<abi::version<abi::newest>::descr, mix_size> coll{};
  for (std::size_t i = 0; i < mix_size; ++i) {
    abi::version<abi::newest>::descr& c = coll[i];
    std::memset(static_cast<void*>(&c), 0, sizeof c);
    c.type = abi::ev_coll;
    c.rank = 0;
    c.coll.func = fn_names[i % 4];
    c.coll.count = mix_counts[(i / 4) % mix_counts.size()];
    c.coll.datatype = "ncclBfloat16";
    c.coll.nChannels = static_cast<std::uint8_t>(nch);
    c.coll.nWarps = 16;
    c.coll.algo = "RING";
    c.coll.proto = "SIMPLE";
  }
  abi::version<abi::newest>::descr kch;
  std::memset(static_cast<void*>(&kch), 0, sizeof kch);
  kch.type = abi::ev_kernel_ch;
  std::uint64_t seq = 0;
  auto one = [&](std::size_t i) {
    coll[i].coll.seqNumber = seq++;
    void* h = nullptr;
    t->startEvent(ctx, &h, &coll[i]);
    if (h) t->stopEvent(h);
    for (int c = 0; c < nch; ++c) {
      kch.parentObj = h;
      kch.kernelCh.channelId = static_cast<std::uint8_t>(c);
      kch.kernelCh.pTimer = 1'000'000 + static_cast<std::uint64_t>(c) * 100;
      void* kh = nullptr;
      t->startEvent(ctx, &kh, &kch);
      if (kh) {
        abi::state_args a{};
        a.kernelCh.pTimer = 1'050'000 + static_cast<std::uint64_t>(c) * 100;
        t->recordEventState(kh, abi::st_kernel_ch_stop, &a);
        t->stopEvent(kh);
      }
    }
  };
  for (std::size_t i = 0; i < 4 * mix_size; ++i) one(i % mix_size);
  std::size_t i = 0;
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    one(i);
    if (++i == mix_size) i = 0;
  }
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(which_name[w]);
}

/// One ncclSend through the driver (P2p start/stop, KernelCh per channel).
void BM_driver_p2p_send(benchmark::State& st, which w) {
  sim::comm_driver& d = *g_env->comm[w];
  const int nch = static_cast<int>(st.range(0));
  sim::op_desc op;
  op.kind = sim::op_kind::p2p;
  op.func = sim::nccl_func::send;
  op.dtype = sim::nccl_dtype::bfloat16;
  op.count = 1 << 20;
  op.peer = 1;
  op.n_channels = static_cast<std::uint8_t>(nch);
  const auto kt = kernel_times();
  const std::span<const sim::kernel_time> t(kt.data(), static_cast<std::size_t>(nch));
  for (int i = 0; i < 64; ++i) d.complete(d.enqueue(op), t);
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) d.complete(d.enqueue(op), t);
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(which_name[w]);
}

/// Lock-free single-producer single-consumer ring of pending ops.
template <std::size_t N>
class spsc {
  static_assert((N & (N - 1)) == 0);

 public:
  bool push(const sim::pending_op& p) noexcept {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_cache_ >= N) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (h - tail_cache_ >= N) return false;
    }
    buf_[h & (N - 1)] = p;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  bool pop(sim::pending_op& p) noexcept {
    const std::uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_cache_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (t == head_cache_) return false;
    }
    p = buf_[t & (N - 1)];
    tail_.store(t + 1, std::memory_order_release);
    return true;
  }

 private:
  alignas(64) std::atomic<std::uint64_t> head_{0};
  std::uint64_t tail_cache_ = 0;  // producer's copy
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t head_cache_ = 0;  // consumer's copy
  alignas(64) std::array<sim::pending_op, N> buf_{};
};

inline void cpu_relax() noexcept { __builtin_ia32_pause(); }

/// User thread enqueues (CPU 0), proxy thread completes (CPU 1). Queue depth 64 < the plugin's
/// 256-op pool, so no op is dropped. Time = per op at the producer, steady state.
void BM_pingpong_coll(benchmark::State& st, which w) {
  sim::comm_driver& d = *g_env->comm_pp[w];
  const int nch = static_cast<int>(st.range(0));
  std::array<sim::op_desc, mix_size> ops;
  for (std::size_t i = 0; i < mix_size; ++i) ops[i] = coll_desc(i, nch);
  const auto kt = kernel_times();
  const std::span<const sim::kernel_time> t(kt.data(), static_cast<std::size_t>(nch));
  auto q = std::make_unique<spsc<64>>();
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> consumer_allocs{0}, consumed{0};
  std::atomic<bool> warm{false};
  std::thread proxy([&] {
    pin_to_cpu(1);
    std::uint64_t a0 = 0;
    bool counting = false;
    sim::pending_op p;
    std::uint64_t n = 0;
    for (;;) {
      if (!counting && warm.load(std::memory_order_acquire)) {
        counting = true;
        a0 = thread_allocs();
      }
      if (q->pop(p)) {
        d.complete(p, t);
        ++n;
      } else if (done.load(std::memory_order_acquire)) {
        if (!q->pop(p)) break;
        d.complete(p, t);
        ++n;
      } else {
        cpu_relax();
      }
    }
    consumer_allocs.store(counting ? thread_allocs() - a0 : 0);
    consumed.store(n);
  });
  pin_to_cpu(0);
  std::size_t i = 0;
  for (int k = 0; k < 1000; ++k) {  // warm-up
    while (!q->push(d.enqueue(ops[i]))) cpu_relax();
    if (++i == mix_size) i = 0;
  }
  warm.store(true, std::memory_order_release);
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    const sim::pending_op p = d.enqueue(ops[i]);
    while (!q->push(p)) cpu_relax();
    if (++i == mix_size) i = 0;
  }
  const std::uint64_t producer_allocs = thread_allocs() - a0;
  done.store(true, std::memory_order_release);
  proxy.join();
  unpin();
  st.counters["allocs_per_op"] =
      static_cast<double>(producer_allocs + consumer_allocs.load()) / static_cast<double>(st.iterations());
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(which_name[w]);
}

void register_all() {
  for (which w : {ours, null_plugin, null_handles}) {
    const std::string n = which_name[w];
    benchmark::RegisterBenchmark(("BM_driver_coll/" + n).c_str(), BM_driver_coll, w)->Arg(1)->Arg(4)->Arg(16);
    benchmark::RegisterBenchmark(("BM_direct_coll/" + n).c_str(), BM_direct_coll, w)->Arg(1)->Arg(4)->Arg(16);
    benchmark::RegisterBenchmark(("BM_driver_p2p_send/" + n).c_str(), BM_driver_p2p_send, w)->Arg(1)->Arg(4);
    benchmark::RegisterBenchmark(("BM_pingpong_coll/" + n).c_str(), BM_pingpong_coll, w)->Arg(4)->UseRealTime();
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    setup();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plugin: %s\n", e.what());
    return 1;
  }
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  for (auto* arr : {g_env->comm, g_env->comm_pp})
    for (int w = 0; w < 3; ++w) arr[w]->finalize();  // the last ncclinsp finalize writes the final export
  return 0;
}
