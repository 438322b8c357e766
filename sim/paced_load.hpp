#pragma once
/// A steady stream of collectives through a profiler plugin at a target rate, the way NCCL calls
/// it (comm_driver: Coll start/stop on the user side, KernelCh start/state/stop per channel on the
/// completing side, here one thread): AllReduce, AllGather, ReduceScatter of 1 MiB in turn, on
/// `channels` channels, with GPU timestamps. Pacing keeps the count of ops issued at
/// rate x elapsed time: it sleeps when ahead (so the plugin's exporter gets the CPU it would get
/// next to a real job) and catches up in short bursts after a sleep overshoots. Used by the
/// lossless-rate benchmark (bench/bench_json_rate.cpp) and the plugin test that pins it.

#include <time.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <span>

#include "nccl_driver.hpp"

namespace ncclinsp::sim {

struct paced_result {
  std::uint64_t ops = 0;  ///< ops issued and completed
  double seconds = 0;     ///< wall time of the run
  double achieved_rate() const noexcept { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

/// Issues ops at `rate` per second for `seconds` through `comm` (an active communicator).
inline paced_result run_paced(comm_driver& comm, double rate, double seconds, int channels = 4,
                              std::uint64_t gpu_t0 = 1'000'000'000) {
  constexpr nccl_func funcs[] = {nccl_func::all_reduce, nccl_func::all_gather, nccl_func::reduce_scatter};
  std::array<op_desc, 3> ops{};
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i].func = funcs[i];
    ops[i].dtype = nccl_dtype::int8;
    ops[i].count = std::size_t{1} << 20;  // 1 MiB per rank
    ops[i].n_channels = static_cast<std::uint8_t>(channels);
    ops[i].channel_lo = 0;
  }
  std::array<kernel_time, 64> kt{};
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto total = static_cast<std::uint64_t>(rate * seconds);
  paced_result r;
  std::uint64_t gpu = gpu_t0;
  while (r.ops < total) {
    const double elapsed = std::chrono::duration<double>(clock::now() - start).count();
    const auto due = static_cast<std::uint64_t>(elapsed * rate) + 1;
    if (r.ops >= due) {  // ahead of schedule: sleep until the next op is due (at least ~50 us)
      const double wait = (static_cast<double>(r.ops) / rate) - elapsed;
      const timespec ts{0, static_cast<long>(wait > 50e-6 ? wait * 1e9 : 50'000)};
      ::nanosleep(&ts, nullptr);
      continue;
    }
    for (std::uint64_t n = due < total ? due : total; r.ops < n; ++r.ops) {
      const pending_op p = comm.enqueue(ops[r.ops % ops.size()]);
      for (int c = 0; c < channels; ++c)
        kt[static_cast<std::size_t>(c)] = {gpu + 100u * static_cast<unsigned>(c), gpu + 90'000};
      comm.complete(p, std::span<const kernel_time>(kt.data(), static_cast<std::size_t>(channels)));
      gpu += 100'000;
    }
  }
  r.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return r;
}

}  // namespace ncclinsp::sim
