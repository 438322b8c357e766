#pragma once
/// `nccl_wrappers_example --cases [--multi-rank N]`: the event-path side of scripts/gpu_check.sh.
/// Plain NCCL calls (the profiler plugin, loaded by NCCL_PROFILER_PLUGIN, is what is checked), one
/// communicator over every visible GPU of this process (ncclCommInitAll), or with `--multi-rank N`
/// N ranks on GPU 0 (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1), in five phases that each use
/// their own sizes, so that every phase lands in its own (collective, message_size) series of the
/// plugin's .prom files:
///
///   eager       41 x group{Send+Recv 256 MiB to the ring neighbours}      timed per op
///   eager_coll  41 x AllReduce 64 MiB                                      timed per op
///   grouped     20 x group{4 x Send+Recv 8 MiB, 4 x AllReduce 1 MiB}       counted only
///   graph       one captured group{Send+Recv 256 KiB, AllReduce 256 KiB},  counted only
///               60 replays (a host-callback replay re-emits Group, Coll/P2p and KernelCh)
///   mixed       40 x {replay of a captured Send+Recv 512 KiB, then an eager   timed per op
///               group{Send+Recv 128 MiB}} on the same communicator
///
/// With one rank the ring neighbour is the rank itself. NCCL 2.28.9 (recorded on an H200) then
/// emits, for a Send/Recv to itself, GroupApi, P2pApi,
/// KernelLaunch, Group and P2p events (announcing 64 channels) but no KernelCh and no ProxyOp: no
/// GPU timestamp can come, the plugin counts the op under filter reason `no_kernel_events`. A
/// captured self Send/Recv emits its events once, at capture; its replays emit nothing. Every
/// collective takes NCCL's one-rank shortcut (enqueue.cc taskAppend -> ncclLaunchOneRank: a
/// cudaMemcpyAsync, or nothing in place, or a small non-profiled kernel for PreMulSum/ncclAvg on
/// floats) before any profiler call: no GroupApi, CollApi, Coll or KernelCh event at all.
///
/// Output, one tab-separated line per (phase, collective, launch):
///   case <phase> <collective> <bytes per op as NCCL reports them> <ops per rank> <time per op us, -1 if not timed> <eager|graph>
/// then `ranks`, `nccl` (NCCL_VERSION_CODE of the headers) and `runtime_nccl` (ncclGetVersion).
/// Time per op: CUDA events around the phase's ops on each rank's stream, the slowest rank, per op;
/// in `mixed` the eager groups and the replays are timed separately (events around each).
/// At most 160 P2P ops are in flight between synchronisations (the plugin's pool holds 256).
///
///   nccl_wrappers_example --cases [--multi-rank N]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace cases {

inline bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cases: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
inline bool ok(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return true;
  std::fprintf(stderr, "cases: %s: %s\n", what, ncclGetErrorString(r));
  return false;
}

struct device {
  cudaStream_t stream{};
  cudaEvent_t start{}, stop{};
  float* send = nullptr;
  float* recv = nullptr;
  cudaGraphExec_t graph = nullptr;   ///< the `graph` phase's capture
  cudaGraphExec_t graph2 = nullptr;  ///< the `mixed` phase's capture
};

struct run {
  std::vector<ncclComm_t> comms;
  std::vector<device> devs;
  std::vector<int> gpu;  ///< the CUDA device of each rank
  int n = 0;

  bool each(const char* what, const std::function<bool(int, device&)>& f) {
    for (int d = 0; d < n; ++d) {
      if (!ok(cudaSetDevice(gpu[static_cast<std::size_t>(d)]), "cudaSetDevice")) return false;
      if (!f(d, devs[static_cast<std::size_t>(d)])) {
        std::fprintf(stderr, "cases: %s failed on GPU %d\n", what, d);
        return false;
      }
    }
    return true;
  }
  /// One group: on every GPU, `pairs` Send/Recv pairs of `bytes` each (distinct slices) with the
  /// ring neighbours (itself with one GPU) and `colls` AllReduce of `coll_bytes` each.
  bool group(std::size_t bytes, int pairs, std::size_t coll_bytes, int colls) {
    if (!ok(ncclGroupStart(), "ncclGroupStart")) return false;
    for (int d = 0; d < n; ++d) {
      device& v = devs[static_cast<std::size_t>(d)];
      const std::size_t cnt = bytes / sizeof(float), ccnt = coll_bytes / sizeof(float);
      for (int p = 0; p < pairs; ++p) {
        const std::size_t off = static_cast<std::size_t>(p) * cnt;
        if (!ok(ncclSend(v.send + off, cnt, ncclFloat32, (d + 1) % n, comms[static_cast<std::size_t>(d)], v.stream),
                "ncclSend") ||
            !ok(ncclRecv(v.recv + off, cnt, ncclFloat32, (d + n - 1) % n, comms[static_cast<std::size_t>(d)], v.stream),
                "ncclRecv"))
          return false;
      }
      for (int c = 0; c < colls; ++c) {
        // Slices above the P2P ones, so no op of the group writes what another reads.
        const std::size_t off = static_cast<std::size_t>(pairs) * cnt + static_cast<std::size_t>(c) * ccnt;
        if (!ok(ncclAllReduce(v.send + off, v.recv + off, ccnt, ncclFloat32, ncclSum,
                              comms[static_cast<std::size_t>(d)], v.stream),
                "ncclAllReduce"))
          return false;
      }
    }
    return ok(ncclGroupEnd(), "ncclGroupEnd");
  }
  bool record(bool at_start) {
    return each("cudaEventRecord",
                [&](int, device& v) { return ok(cudaEventRecord(at_start ? v.start : v.stop, v.stream), "record"); });
  }
  /// Slowest GPU's start..stop span in ms, after synchronising; negative on error.
  double span() {
    double worst = 0;
    const bool good = each("span", [&](int, device& v) {
      float ms = 0;
      if (!ok(cudaEventSynchronize(v.stop), "cudaEventSynchronize") ||
          !ok(cudaEventElapsedTime(&ms, v.start, v.stop), "cudaEventElapsedTime"))
        return false;
      worst = std::max(worst, static_cast<double>(ms));
      return true;
    });
    return good ? worst : -1;
  }
  bool sync() {
    return each("cudaStreamSynchronize", [](int, device& v) { return ok(cudaStreamSynchronize(v.stream), "sync"); });
  }
  /// Captures one group on every GPU's stream into that GPU's `exec`. Thread-local capture mode:
  /// NCCL's and the plugin's own threads may make CUDA calls while this thread captures.
  bool capture(cudaGraphExec_t device::*exec, std::size_t bytes, std::size_t coll_bytes, int colls) {
    if (!each("cudaStreamBeginCapture", [](int, device& v) {
          return ok(cudaStreamBeginCapture(v.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        }))
      return false;
    const bool grouped = group(bytes, 1, coll_bytes, colls);
    // Every stream's capture is ended, even when the group failed.
    const bool made = each("capture", [&](int, device& v) {
      cudaGraph_t g = nullptr;
      const bool ended = ok(cudaStreamEndCapture(v.stream, &g), "cudaStreamEndCapture");
      const bool inst = ended && ok(cudaGraphInstantiate(&(v.*exec), g, 0), "cudaGraphInstantiate");
      if (g) cudaGraphDestroy(g);
      return inst;
    });
    return made && grouped;
  }
  bool replay(cudaGraphExec_t device::*exec) {
    return each("cudaGraphLaunch", [&](int, device& v) { return ok(cudaGraphLaunch(v.*exec, v.stream), "launch"); });
  }
};

inline void line(const char* phase, const char* coll, std::size_t bytes, int ops, double us, const char* launch) {
  std::printf("case\t%s\t%s\t%zu\t%d\t%.3f\t%s\n", phase, coll, bytes, ops, us, launch);
}

/// `ranks_on_gpu0` 0: one rank per visible GPU; N > 0: N ranks on GPU 0.
inline int run_all(int ranks_on_gpu0) {
  constexpr std::size_t MiB = std::size_t{1} << 20, KiB = std::size_t{1} << 10;
  constexpr std::size_t buf_bytes = 256 * MiB;
  run r;
  if (!ok(cudaGetDeviceCount(&r.n), "cudaGetDeviceCount") || r.n < 1) return 1;
  for (int d = 0; d < r.n; ++d) r.gpu.push_back(d);
  if (ranks_on_gpu0 > 0) {
    r.n = ranks_on_gpu0;
    r.gpu.assign(static_cast<std::size_t>(r.n), 0);
  }
  r.comms.resize(static_cast<std::size_t>(r.n));
  r.devs.resize(static_cast<std::size_t>(r.n));
  if (!ok(ncclCommInitAll(r.comms.data(), r.n, r.gpu.data()), "ncclCommInitAll")) return 1;
  if (!r.each("setup", [&](int, device& v) {
        return ok(cudaStreamCreateWithFlags(&v.stream, cudaStreamNonBlocking), "stream") &&
               ok(cudaEventCreate(&v.start), "event") && ok(cudaEventCreate(&v.stop), "event") &&
               ok(cudaMalloc(&v.send, buf_bytes), "cudaMalloc") && ok(cudaMalloc(&v.recv, buf_bytes), "cudaMalloc") &&
               ok(cudaMemset(v.send, 0, buf_bytes), "cudaMemset");
      }))
    return 1;
  double ms = 0;

  // eager: P2P alone, so the span times it.
  constexpr int eager_iters = 40;
  if (!r.group(buf_bytes, 1, 0, 0) || !r.sync()) return 1;  // warm-up (counted below)
  if (!r.record(true)) return 1;
  for (int i = 0; i < eager_iters; ++i)
    if (!r.group(buf_bytes, 1, 0, 0)) return 1;
  if (!r.record(false) || (ms = r.span()) < 0) return 1;
  line("eager", "Send", buf_bytes, eager_iters + 1, ms * 1e3 / eager_iters, "eager");
  line("eager", "Recv", buf_bytes, eager_iters + 1, ms * 1e3 / eager_iters, "eager");

  // eager_coll: AllReduce alone.
  if (!r.group(0, 0, 64 * MiB, 1) || !r.sync() || !r.record(true)) return 1;
  for (int i = 0; i < eager_iters; ++i)
    if (!r.group(0, 0, 64 * MiB, 1)) return 1;
  if (!r.record(false) || (ms = r.span()) < 0) return 1;
  line("eager_coll", "AllReduce", 64 * MiB, eager_iters + 1, ms * 1e3 / eager_iters, "eager");

  // grouped: several P2P pairs and collectives in one ncclGroupStart/End.
  constexpr int groups = 20, per_group = 4;
  for (int i = 0; i < groups; ++i)
    if (!r.group(8 * MiB, per_group, MiB, per_group)) return 1;
  if (!r.sync()) return 1;
  line("grouped", "Send", 8 * MiB, groups * per_group, -1, "eager");
  line("grouped", "Recv", 8 * MiB, groups * per_group, -1, "eager");
  line("grouped", "AllReduce", MiB, groups * per_group, -1, "eager");

  // graph: capture once, replay (each replay re-emits Group, Coll/P2p, KernelCh from a CUDA
  // host-callback thread, only when the plan has proxy or profiler ops).
  constexpr int replays = 60;
  if (!r.capture(&device::graph, 256 * KiB, 256 * KiB, 1)) return 1;
  for (int i = 0; i < replays; ++i) {
    if (!r.replay(&device::graph)) return 1;
    if (i % 30 == 29 && !r.sync()) return 1;
  }
  if (!r.sync()) return 1;
  line("graph", "Send", 256 * KiB, replays, -1, "graph");
  line("graph", "Recv", 256 * KiB, replays, -1, "graph");
  line("graph", "AllReduce", 256 * KiB, replays, -1, "graph");

  // mixed: replays and eager launches alternate on one communicator (the serving pattern).
  constexpr int mixed_iters = 40;
  if (!r.capture(&device::graph2, 512 * KiB, 0, 0)) return 1;
  double replay_ms = 0, eager_ms = 0;
  for (int i = 0; i < mixed_iters; ++i) {
    if (!r.record(true) || !r.replay(&device::graph2) || !r.record(false) || (ms = r.span()) < 0) return 1;
    replay_ms += ms;
    if (!r.record(true) || !r.group(128 * MiB, 1, 0, 0) || !r.record(false) || (ms = r.span()) < 0) return 1;
    eager_ms += ms;
  }
  line("mixed", "Send", 512 * KiB, mixed_iters, replay_ms * 1e3 / mixed_iters, "graph");
  line("mixed", "Recv", 512 * KiB, mixed_iters, replay_ms * 1e3 / mixed_iters, "graph");
  line("mixed", "Send", 128 * MiB, mixed_iters, eager_ms * 1e3 / mixed_iters, "eager");
  line("mixed", "Recv", 128 * MiB, mixed_iters, eager_ms * 1e3 / mixed_iters, "eager");

  int runtime = 0;
  (void)ncclGetVersion(&runtime);
  r.each("teardown", [](int, device& v) {
    if (v.graph) cudaGraphExecDestroy(v.graph);
    if (v.graph2) cudaGraphExecDestroy(v.graph2);
    cudaFree(v.send);
    cudaFree(v.recv);
    return true;
  });
  for (auto c : r.comms) ncclCommDestroy(c);
  std::printf("ranks\t%d\nnccl\t%d\nruntime_nccl\t%d\n", r.n, NCCL_VERSION_CODE, runtime);
  return 0;
}

}  // namespace cases
