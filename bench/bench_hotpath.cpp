// Hot path of the library: collector::record, message-size bucketing and the per-thread counter
// design, each next to the baseline it replaces (a mutex + string-keyed map collector in the
// prometheus-cpp style, std::lower_bound over a bounds table, a shared atomic, a mutex).
#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_common.hpp"
#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/detail/thread_slot.hpp"
#include "ncclinsp/histogram.hpp"

namespace {
using namespace ncclinsp;
using namespace ncclinsp::bench;

constexpr int max_bench_threads = 8;

// ---- collector::record -------------------------------------------------------------------------

collector<>& shared_collector() {
  static collector<>* c = [] {
    auto* col = new collector<>();
    for (int i = 0; i < max_bench_threads; ++i)
      col->add_comm({.name = std::string("bench").append(std::to_string(i)),
                     .hash = 0x1000u + static_cast<unsigned>(i),
                     .rank = 0,
                     .nranks = 8,
                     .nnodes = 1,
                     .device = 0,
                     .uuid = "GPU-bench"});
    return col;
  }();
  return *c;
}

/// One completed op per iteration; each thread completes the ops of its own communicator (as
/// NCCL's per-communicator proxy threads do), cycling through the 20-op mix.
void BM_collector_record(benchmark::State& st) {
  collector<>& col = shared_collector();
  const comm_handle h = static_cast<comm_handle>(st.thread_index() % max_bench_threads);
  std::array<op_record, mix_size> ops;
  for (std::size_t i = 0; i < mix_size; ++i) ops[i] = mix_op(i, i);
  for (std::size_t i = 0; i < 4 * mix_size; ++i) col.record(h, ops[i % mix_size]);  // warm-up: shard + cells
  std::size_t i = 0;
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    col.record(h, ops[i]);
    if (++i == mix_size) i = 0;
  }
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_collector_record)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();

/// Same, all threads completing ops of one communicator (shares its completion cache line).
void BM_collector_record_one_comm(benchmark::State& st) {
  collector<>& col = shared_collector();
  std::array<op_record, mix_size> ops;
  for (std::size_t i = 0; i < mix_size; ++i) ops[i] = mix_op(i, i);
  for (std::size_t i = 0; i < 4 * mix_size; ++i) col.record(0, ops[i % mix_size]);
  std::size_t i = 0;
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    col.record(0, ops[i]);
    if (++i == mix_size) i = 0;
  }
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_collector_record_one_comm)->Threads(2)->Threads(8)->UseRealTime();

/// Baseline: the prometheus-cpp style. Labels are formatted into a string key, one mutex guards
/// an unordered_map of series, the histogram bucket is found with lower_bound.
class naive_collector {
 public:
  void record(std::uint64_t comm_hash, int rank, int nranks, const op_record& op) {
    std::string key;
    key.reserve(160);
    char hex[24];
    auto r = std::to_chars(hex, hex + sizeof hex, comm_hash, 16);
    key.append("comm_hash=0x")
        .append(hex, static_cast<std::size_t>(r.ptr - hex))
        .append(",rank=")
        .append(std::to_string(rank));
    key.append(",collective=").append(to_string(op.fn));
    key.append(",algo_proto=").append(to_string(op.alg)).append("_").append(to_string(op.pro));
    key.append(",message_size=").append(inspector_bucketer::label(inspector_bucketer::index(op.bytes)));
    const std::uint64_t dur = op.duration_ns();
    std::lock_guard lk(mu_);
    series& s = map_[key];
    s.ops += 1;
    s.bytes += op.bytes;
    s.busy_ns += dur;
    const auto it = std::lower_bound(duration_bounds_ns.begin(), duration_bounds_ns.end(), dur);
    s.hist[static_cast<std::size_t>(it - duration_bounds_ns.begin())] += 1;
    const double bb = bus_bytes(op.fn, op.bytes, nranks);
    if (bb > 0 && dur > 0) {
      s.bus_bytes += bb;
      s.log_busbw_sum += std::log(bb / static_cast<double>(dur));
    }
  }

 private:
  struct series {
    std::uint64_t ops = 0, bytes = 0, busy_ns = 0;
    double bus_bytes = 0, log_busbw_sum = 0;
    std::array<std::uint64_t, duration_buckets> hist{};
  };
  std::mutex mu_;
  std::unordered_map<std::string, series> map_;
};

void BM_naive_record(benchmark::State& st) {
  static naive_collector col;
  const int rank = st.thread_index();
  std::array<op_record, mix_size> ops;
  for (std::size_t i = 0; i < mix_size; ++i) ops[i] = mix_op(i, i);
  for (std::size_t i = 0; i < 4 * mix_size; ++i)
    col.record(0x1000u + static_cast<unsigned>(rank), rank, 8, ops[i % mix_size]);
  std::size_t i = 0;
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) {
    col.record(0x1000u + static_cast<unsigned>(rank), rank, 8, ops[i]);
    if (++i == mix_size) i = 0;
  }
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_naive_record)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();

// ---- bucketing -----------------------------------------------------------------------------------

constexpr std::size_t n_sizes = 4096;  // power of two: the loop index is masked

const std::vector<std::uint64_t>& random_sizes() {
  static const std::vector<std::uint64_t> v = [] {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> lg(0.0, 34.0);  // log-uniform over 1 B .. 16 GiB
    std::vector<std::uint64_t> s(n_sizes);
    for (auto& x : s) x = static_cast<std::uint64_t>(std::exp2(lg(rng)));
    return s;
  }();
  return v;
}

template <class F>
void run_index(benchmark::State& st, F f) {
  const auto& sizes = random_sizes();
  std::size_t i = 0;
  std::uint32_t acc = 0;
  for (auto _ : st) {
    acc += f(sizes[i]);
    i = (i + 1) & (n_sizes - 1);
  }
  benchmark::DoNotOptimize(acc);
  st.SetItemsProcessed(st.iterations());
}

void BM_bucket_pow2(benchmark::State& st) {
  run_index(st, [](std::uint64_t b) { return pow2_bucketer::index(b); });
}
void BM_bucket_inspector(benchmark::State& st) {
  run_index(st, [](std::uint64_t b) { return inspector_bucketer::index(b); });
}

/// Baseline for pow2: lower_bound over the 65 bucket lower bounds.
void BM_bucket_lower_bound_pow2(benchmark::State& st) {
  static const std::vector<std::uint64_t> bounds = [] {
    std::vector<std::uint64_t> b;
    for (std::uint32_t i = 0; i < pow2_bucketer::bucket_count; ++i) b.push_back(pow2_bucketer::lower_bound(i));
    return b;
  }();
  run_index(st, [](std::uint64_t v) {
    return static_cast<std::uint32_t>(std::upper_bound(bounds.begin(), bounds.end(), v) - bounds.begin() - 1);
  });
}

/// Baseline for the Inspector buckets: lower_bound over their ~5k lower bounds.
void BM_bucket_lower_bound_inspector(benchmark::State& st) {
  static const std::vector<std::uint64_t> bounds = [] {
    std::vector<std::uint64_t> b;
    for (std::uint64_t u = 0; u < 5; ++u)
      for (std::uint64_t f = (u ? 1 : 0); f < 1024; ++f) b.push_back(f << (10 * u));
    return b;
  }();
  run_index(st, [](std::uint64_t v) {
    return static_cast<std::uint32_t>(std::upper_bound(bounds.begin(), bounds.end(), v) - bounds.begin() - 1);
  });
}
BENCHMARK(BM_bucket_pow2);
BENCHMARK(BM_bucket_inspector);
BENCHMARK(BM_bucket_lower_bound_pow2);
BENCHMARK(BM_bucket_lower_bound_inspector);

/// Duration histogram: the collector's linear scan over 19 bounds vs lower_bound.
void BM_duration_bucket_scan(benchmark::State& st) {
  run_index(st, [](std::uint64_t b) { return static_cast<std::uint32_t>(duration_bucket(b >> 4)); });
}
void BM_duration_bucket_lower_bound(benchmark::State& st) {
  run_index(st, [](std::uint64_t b) {
    return static_cast<std::uint32_t>(std::lower_bound(duration_bounds_ns.begin(), duration_bounds_ns.end(), b >> 4) -
                                      duration_bounds_ns.begin());
  });
}
BENCHMARK(BM_duration_bucket_scan);
BENCHMARK(BM_duration_bucket_lower_bound);

// ---- counters --------------------------------------------------------------------------------

struct alignas(detail::cache_line) padded_counter {
  std::atomic<std::uint64_t> v{0};
};
padded_counter g_shards[detail::max_thread_slots + 1];
alignas(detail::cache_line) std::atomic<std::uint64_t> g_shared{0};
alignas(detail::cache_line) std::mutex g_mu;
std::uint64_t g_locked = 0;

/// Ours: the thread's own cache-line shard, found through thread_slot(), single-writer load+store.
void BM_counter_shard_store(benchmark::State& st) {
  for (auto _ : st) {
    auto& c = g_shards[detail::thread_slot()].v;
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  st.SetItemsProcessed(st.iterations());
}
/// Variant: own shard, but a locked fetch_add (what the shared overflow shard does).
void BM_counter_shard_fetch_add(benchmark::State& st) {
  for (auto _ : st) g_shards[detail::thread_slot()].v.fetch_add(1, std::memory_order_relaxed);
  st.SetItemsProcessed(st.iterations());
}
/// Baseline: one atomic shared by every thread.
void BM_counter_shared_atomic(benchmark::State& st) {
  for (auto _ : st) g_shared.fetch_add(1, std::memory_order_relaxed);
  st.SetItemsProcessed(st.iterations());
}
/// Baseline: a mutex-protected counter.
void BM_counter_mutex(benchmark::State& st) {
  for (auto _ : st) {
    std::lock_guard lk(g_mu);
    ++g_locked;
  }
  st.SetItemsProcessed(st.iterations());
}
BENCHMARK(BM_counter_shard_store)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();
BENCHMARK(BM_counter_shard_fetch_add)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();
BENCHMARK(BM_counter_shared_atomic)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();
BENCHMARK(BM_counter_mutex)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
