#pragma once
/// `nccl_wrappers_example --sweep`: the reference side of scripts/gpu_check.sh. Plain NCCL calls
/// (no embedded inspector: the profiler plugin, when NCCL_PROFILER_PLUGIN loads it, is what is
/// being checked) on every visible GPU of this process (ncclCommInitAll), AllReduce, AllGather
/// and ReduceScatter of float32 from `min` to `max` total bytes (x2 steps), each size timed as
/// nccl-tests does: CUDA events around `iters` back-to-back ops on each GPU's stream, the slowest
/// GPU's span / iters. Output, one tab-separated line per point:
///   sweep <collective> <total bytes> <bytes per rank as NCCL reports them> <iters> <time us> <busbw GB/s>
/// then `init_ms`, `destroy_ms` (ncclCommDestroy of every communicator: the plugin's finalize
/// runs inside it) and `ranks`. Batches stay below the plugin's 256-op pool (nothing dropped).
///
///   nccl_wrappers_example --sweep [min_bytes] [max_bytes] [target_ms_per_point]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ncclinsp/bandwidth.hpp>

namespace sweep {

inline bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "sweep: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
inline bool ok(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "sweep: %s: %s\n", what, ncclGetErrorString(r));
  return false;
}

struct device {
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  void* send = nullptr;
  void* recv = nullptr;
};

/// `iters` ops of `f` with `count` float elements per rank (NCCL's count argument) on every
/// device; returns the slowest device's span in ms, or a negative value on error.
inline double timed_batch(ncclinsp::func f, std::size_t count, int iters, std::vector<ncclComm_t>& comms,
                          std::vector<device>& devs) {
  const auto n = devs.size();
  for (std::size_t d = 0; d < n; ++d) {
    if (!ok(cudaSetDevice(static_cast<int>(d)), "cudaSetDevice") ||
        !ok(cudaEventRecord(devs[d].start, devs[d].stream), "cudaEventRecord"))
      return -1;
  }
  for (int it = 0; it < iters; ++it) {
    if (!ok(ncclGroupStart(), "ncclGroupStart")) return -1;
    for (std::size_t d = 0; d < n; ++d) {
      device& v = devs[d];
      ncclResult_t r = ncclSuccess;
      switch (f) {
        case ncclinsp::func::all_reduce:
          r = ncclAllReduce(v.send, v.recv, count, ncclFloat32, ncclSum, comms[d], v.stream);
          break;
        case ncclinsp::func::all_gather:
          r = ncclAllGather(v.send, v.recv, count, ncclFloat32, comms[d], v.stream);
          break;
        default:
          r = ncclReduceScatter(v.send, v.recv, count, ncclFloat32, ncclSum, comms[d], v.stream);
          break;
      }
      if (!ok(r, "collective")) return -1;
    }
    if (!ok(ncclGroupEnd(), "ncclGroupEnd")) return -1;
  }
  double worst = 0;
  for (std::size_t d = 0; d < n; ++d) {
    float ms = 0;
    if (!ok(cudaSetDevice(static_cast<int>(d)), "cudaSetDevice") ||
        !ok(cudaEventRecord(devs[d].stop, devs[d].stream), "cudaEventRecord") ||
        !ok(cudaEventSynchronize(devs[d].stop), "cudaEventSynchronize") ||
        !ok(cudaEventElapsedTime(&ms, devs[d].start, devs[d].stop), "cudaEventElapsedTime"))
      return -1;
    worst = std::max(worst, static_cast<double>(ms));
  }
  return worst;
}

inline int run(int argc, char** argv) {
  const std::uint64_t min_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 8;
  const std::uint64_t max_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : (1ull << 30);
  const double target_ms = argc > 4 ? std::atof(argv[4]) : 20.0;
  int ndev = 0;
  if (!ok(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount") || ndev < 1) return 1;
  const auto n = static_cast<std::size_t>(ndev);
  using clock = std::chrono::steady_clock;
  const auto t_init = clock::now();
  std::vector<ncclComm_t> comms(n);
  if (!ok(ncclCommInitAll(comms.data(), ndev, nullptr), "ncclCommInitAll")) return 1;
  std::printf("init_ms\t%.1f\n", std::chrono::duration<double, std::milli>(clock::now() - t_init).count());
  std::vector<device> devs(n);
  for (std::size_t d = 0; d < n; ++d) {
    device& v = devs[d];
    if (!ok(cudaSetDevice(static_cast<int>(d)), "cudaSetDevice") ||
        !ok(cudaStreamCreateWithFlags(&v.stream, cudaStreamNonBlocking), "stream") ||
        !ok(cudaEventCreate(&v.start), "event") || !ok(cudaEventCreate(&v.stop), "event") ||
        !ok(cudaMalloc(&v.send, max_bytes), "cudaMalloc") || !ok(cudaMalloc(&v.recv, max_bytes), "cudaMalloc") ||
        !ok(cudaMemset(v.send, 0, max_bytes), "cudaMemset"))
      return 1;
  }
  const ncclinsp::func funcs[] = {ncclinsp::func::all_reduce, ncclinsp::func::all_gather,
                                  ncclinsp::func::reduce_scatter};
  for (const auto f : funcs) {
    for (std::uint64_t total = min_bytes; total <= max_bytes; total *= 2) {
      // NCCL's count: AllReduce the whole buffer; AllGather the send count and ReduceScatter the
      // receive count, one rank's share (the bytes the plugin reports for the op).
      const std::size_t count = f == ncclinsp::func::all_reduce ? total / 4 : total / 4 / n;
      if (count == 0) continue;  // fewer floats than ranks
      const std::uint64_t rank_bytes = count * 4;
      const double probe = timed_batch(f, count, 2, comms, devs);  // warm-up, and the per-op estimate
      if (probe < 0) return 1;
      const int iters =
          std::clamp(static_cast<int>(target_ms / std::max(probe / 2, 1e-3)), 5, 100);  // < the plugin's 256-op pool
      const double ms = timed_batch(f, count, iters, comms, devs);
      if (ms < 0) return 1;
      const double op_ns = ms * 1e6 / iters;
      const double busbw = ncclinsp::bus_bytes(f, rank_bytes, ndev) / op_ns;
      std::printf("sweep\t%s\t%llu\t%llu\t%d\t%.3f\t%.3f\n", std::string(ncclinsp::to_string(f)).c_str(),
                  static_cast<unsigned long long>(total), static_cast<unsigned long long>(rank_bytes), iters,
                  op_ns / 1e3, busbw);
      std::fflush(stdout);
    }
  }
  for (auto& v : devs) {
    cudaFree(v.send);
    cudaFree(v.recv);
  }
  const auto t_destroy = clock::now();
  for (auto c : comms) ncclCommDestroy(c);
  std::printf("destroy_ms\t%.1f\nranks\t%d\n",
              std::chrono::duration<double, std::milli>(clock::now() - t_destroy).count(), ndev);
  return 0;
}

}  // namespace sweep
