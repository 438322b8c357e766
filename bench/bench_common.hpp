#pragma once
/// Shared helpers of the benchmark executables: a typical op mix, the allocation counter as a
/// benchmark counter, resident memory, thread pinning. Cold code; benchmark-only.

#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>

#include "alloc_counter.hpp"
#include "ncclinsp/model.hpp"

namespace ncclinsp::bench {

/// The collectives and sizes of a typical training step: 4 collectives x 5 sizes.
inline constexpr std::array<func, 4> mix_funcs = {func::all_reduce, func::all_gather, func::reduce_scatter,
                                                  func::broadcast};
inline constexpr std::array<std::uint64_t, 5> mix_counts = {1u << 12, 1u << 16, 1u << 20, 1u << 23,
                                                            1u << 26};  // bf16 elements
inline constexpr std::size_t mix_size = mix_funcs.size() * mix_counts.size();

/// Op i of the mix (bf16, ring/simple, GPU timing, 8 channels); duration grows with the size.
inline op_record mix_op(std::size_t i, std::uint64_t seq = 0) noexcept {
  op_record r;
  r.fn = mix_funcs[i % mix_funcs.size()];
  set_size(r, mix_counts[(i / mix_funcs.size()) % mix_counts.size()], dtype::bfloat16);
  r.alg = algo::ring;
  r.pro = proto::simple;
  r.timing = timing_source::kernel_gpu;
  r.channels = 8;
  r.seq = seq;
  r.start_ns = 1'000'000'000ull + seq * 10'000'000ull;
  r.end_ns = r.start_ns + 20'000 + r.bytes / 100;  // ~100 GB/s
  return r;
}

/// Reports `allocs_per_op` = heap allocations of this thread during the timed loop / iterations.
/// Call with thread_allocs() taken right before the loop. Averaged over the benchmark's threads.
inline void report_allocs(benchmark::State& st, std::uint64_t before, double ops_per_iter = 1.0) {
  const double ops = static_cast<double>(st.iterations()) * ops_per_iter;
  st.counters["allocs_per_op"] = benchmark::Counter(ops > 0 ? static_cast<double>(thread_allocs() - before) / ops : 0.0,
                                                    benchmark::Counter::kAvgThreads);
}

/// Resident set size in bytes (/proc/self/statm, field 2).
inline std::uint64_t rss_bytes() noexcept {
  unsigned long size = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::uint64_t>(resident) * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

/// Pins the calling thread to `cpu` modulo the CPUs available; returns false if it could not.
inline bool pin_to_cpu(int cpu) noexcept {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (n <= 0) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(cpu % n), &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set) == 0;
}
inline void unpin() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < n && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &set);
  ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
}

}  // namespace ncclinsp::bench
