#pragma once
/// ncclinsp-sim's `--workload cases`: the NCCL calls of `examples/nccl_wrappers --cases`
/// (examples/nccl_wrappers/cases.hpp) on one GPU, i.e. on a one-rank communicator (ncclCommInitAll over
/// one device: commName NULL), as its real run under NCCL 2.28.9 on an H200 issued them
/// (tests/traces/nccl-2.28.9-h200-onerank-cases.issued.tsv; the callbacks NCCL made are
/// tests/traces/nccl-2.28.9-h200-onerank-cases.trace). Every group is ncclGroupStart/End (depth 2):
///
///   eager       41 x {Send + Recv 256 MiB to itself}
///   eager_coll  41 x {AllReduce 64 MiB}                      one-rank: no callback at all
///   grouped     20 x {4 x (Send + Recv 8 MiB), 4 x AllReduce 1 MiB}
///   graph       capture {Send + Recv 256 KiB, AllReduce 256 KiB}, 60 replays
///   mixed       capture {Send + Recv 512 KiB}; 40 x {replay, eager {Send + Recv 128 MiB}}
///
/// Buffers as in cases.hpp: each pair p at send + p·count and recv + p·count, the AllReduce slices above
/// them. A Send/Recv announces addP2pToPlan's channel count for a one-rank communicator on one node
/// (nChannels = min(64, bytes / 64 KiB)). Replays run on the rank's CUDA host-callback thread.
/// Thread-safety: runs on the rank's user thread.

#include "nccl_driver.hpp"
#include "side_thread.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ncclinsp::sim::app {

struct cases_program {
  static constexpr std::size_t MiB = std::size_t(1) << 20, KiB = std::size_t(1) << 10;
  static constexpr std::uintptr_t send_base = 0x7fa7bc000000, recv_base = 0x7fa7ac000000;
  static constexpr int eager_iters = 40, groups = 20, per_group = 4, replays = 60, mixed_iters = 40;

  /// addP2pToPlan on one node: minPartSize = p2pChunkSize (512 KiB) / 8, up to nChannelsMin = 64.
  static std::uint8_t self_channels(std::size_t bytes) {
    return std::uint8_t(std::clamp<std::size_t>((bytes + 64 * KiB - 1) / (64 * KiB), 1, 64));
  }

  /// cases.hpp run::group: `pairs` Send/Recv pairs of `bytes` with the ring neighbours (the rank itself)
  /// and `colls` AllReduce of `coll_bytes`.
  static std::vector<op_desc> group(int rank, int n_ranks, std::size_t bytes, int pairs, std::size_t coll_bytes,
                                    int colls, bool captured) {
    std::vector<op_desc> v;
    const std::size_t cnt = bytes / 4, ccnt = coll_bytes / 4;
    for (int p = 0; p < pairs; ++p) {
      const std::uintptr_t off = std::uintptr_t(p) * cnt * 4;
      op_desc s;
      s.kind = op_kind::p2p;
      s.func = nccl_func::send;
      s.dtype = nccl_dtype::float32;
      s.count = cnt;
      s.peer = (rank + 1) % n_ranks;
      s.n_channels = self_channels(bytes);
      s.send_buff = reinterpret_cast<const void*>(send_base + off);
      s.graph_captured = captured;
      op_desc r = s;
      r.func = nccl_func::recv;
      r.peer = (rank + n_ranks - 1) % n_ranks;
      r.send_buff = nullptr;
      r.recv_buff = reinterpret_cast<void*>(recv_base + off);
      v.push_back(s);
      v.push_back(r);
    }
    for (int c = 0; c < colls; ++c) {
      const std::uintptr_t off = std::uintptr_t(pairs) * cnt * 4 + std::uintptr_t(c) * ccnt * 4;
      op_desc a;
      a.func = nccl_func::all_reduce;
      a.dtype = nccl_dtype::float32;
      a.count = ccnt;
      a.n_channels = 2;
      a.send_buff = reinterpret_cast<const void*>(send_base + off);
      a.recv_buff = reinterpret_cast<void*>(recv_base + off);
      a.graph_captured = captured;
      v.push_back(a);
    }
    return v;
  }

  /// Runs the five phases once on `c` (rank `rank` of `n_ranks`); replays on `host_callback`.
  /// `done(op)` gets every enqueued op's token (ops with KernelCh children would need completing).
  template <class Done>
  static void run(comm_driver& c, side_thread& host_callback, Done&& done) {
    const int rank = c.config().rank, n = c.config().n_ranks;
    std::vector<pending_op> out(64);
    auto eager = [&](const std::vector<op_desc>& ops) {
      c.enqueue(ops, std::span<pending_op>(out.data(), ops.size()), 1);
      for (std::size_t i = 0; i < ops.size(); ++i) done(out[i]);
    };
    auto replay = [&](const captured_graph& g) {
      host_callback.run([&] { c.replay(g, std::span<pending_op>(out.data(), g.n)); });
      for (std::size_t i = 0; i < g.n; ++i) done(out[i]);
    };
    // eager: a warm-up group, then 40 timed ones.
    for (int i = 0; i < eager_iters + 1; ++i) eager(group(rank, n, 256 * MiB, 1, 0, 0, false));
    // eager_coll: AllReduce alone.
    for (int i = 0; i < eager_iters + 1; ++i) eager(group(rank, n, 0, 0, 64 * MiB, 1, false));
    // grouped: 4 pairs and 4 collectives per ncclGroupStart/End.
    for (int i = 0; i < groups; ++i) eager(group(rank, n, 8 * MiB, per_group, MiB, per_group, false));
    // graph: captured once, replayed 60 times.
    captured_graph g1;
    c.capture(group(rank, n, 256 * KiB, 1, 256 * KiB, 1, true), g1);
    for (int i = 0; i < replays; ++i) replay(g1);
    // mixed: a replay and an eager group alternate on one communicator.
    captured_graph g2;
    c.capture(group(rank, n, 512 * KiB, 1, 0, 0, true), g2);
    for (int i = 0; i < mixed_iters; ++i) {
      replay(g2);
      eager(group(rank, n, 128 * MiB, 1, 0, 0, false));
    }
  }
};

}  // namespace ncclinsp::sim::app
