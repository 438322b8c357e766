#pragma once
/// ncclinsp-sim's all-to-all workload (`--workload alltoall`): Mixture-of-Experts expert parallelism.
/// One communicator, `ep`, over every rank of the job; every step each rank issues one group
/// (ncclGroupStart/End) of a Send and a Recv of `--a2a-bytes` to and from every rank, itself included
/// (the token dispatch of torch.distributed.all_to_all_single over NCCL). The chunk to itself is a copy
/// inside the rank's own kernel: P2p events with their channels, never a KernelCh or ProxyOp
/// (enqueue.cc addP2pToPlan, proxy.cc ncclProxySaveOp; the driver's pending_op::self_p2p). The peer
/// chunks are ordinary P2P: KernelCh, and ProxyOps across nodes.
///
/// Timing (deterministic in the options and the seed; every rank computes the whole step):
///  * rank r launches its group of step s at a_r = T_s + compute + J·u(s, r) (J = --launch-jitter-us);
///  * the exchange starts when the last rank has arrived, t0 = max a_r (every rank waits for every other);
///  * chunk a→b takes L + S / (B / k) · (1 + 0.02·u(s, a, b)): S the chunk, B 360 GB/s over NVLink (a and
///    b on one node, L 8 µs) or 45 GB/s over the network (L 20 µs), shared by a's k peers on that kind
///    of link; the rank's own chunk is a device copy (2 TB/s, no event);
///  * on rank a, Send to b: KernelCh start a_a (+ block scheduling, < 1 µs per channel), stop
///    t0 + d(a→b) + up to one hop; Recv from b: stop t0 + d(b→a) + up to one hop. The step ends with its
///    slowest chunk: T_{s+1}.
/// Channels: each pair (round r of init.cc's p2pSchedule: a2a_schedule) runs on nChannels channels from
/// the round's base, as addP2pToPlan / ncclP2pChannelBaseForRound / ncclP2pChannelForPart place it with
/// 64 P2P channels (one node: base = bit-reverse of r; several nodes: the rounds of one group of
/// a2a_group_size ranks share a base, so with 2 to 7 GPUs per node the pairs to the other GPUs of the
/// node run on the self pair's channels 0..nChannels-1), capped at the simulator's 16 channels per op.
/// Thread-safety: pure functions of the options.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "workload.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace ncclinsp::sim::job {

inline constexpr int a2a_p2p_channels = 64;      ///< comm->p2pnChannels
inline constexpr double a2a_compute_s = 200e-6;  ///< expert compute between two dispatches
inline constexpr double a2a_copy_bw = 2e12;      ///< the rank's own chunk: a device-memory copy

/// addP2pToPlan's channel count of one chunk of `bytes` (stepSize 512 KiB over NVLink, 128 KiB over
/// the network), with nChannelsMin = 64 halved while nChannelsMin x nRanks > 64.
inline int a2a_channels(const options& o, std::size_t bytes) {
  const int n_ranks = o.nodes * o.gpus;
  int min_ch = a2a_p2p_channels;
  while (min_ch * n_ranks > a2a_p2p_channels && min_ch > 1) min_ch /= 2;
  const std::size_t step = o.nodes > 1 ? 128 * 1024 : 512 * 1024;
  const std::size_t min_part = o.nodes > 1 ? step / 2 : step / 8;
  const std::size_t max_part = o.nodes > 1 ? step : step * 32;
  int nch = bytes == 0 ? 1 : int(std::min<std::size_t>(std::size_t(min_ch), (bytes + min_part - 1) / min_part));
  std::size_t part = std::max(min_part, (bytes + std::size_t(nch) - 1) / std::size_t(nch));
  while (part > max_part && nch <= a2a_p2p_channels / 2) {
    nch *= 2;
    part = (bytes + std::size_t(nch) - 1) / std::size_t(nch);
  }
  return std::clamp(nch, 1, int(max_channels));
}

/// init.cc ncclP2pSchedule's group size: NCCL_P2P_SCHEDULE_GROUP_SIZE (8) across nodes, lowered to its
/// gcd with the GPUs per node where those are fewer or not a multiple; one node: its GPUs.
inline int a2a_group_size(const options& o) {
  if (o.nodes <= 1) return std::max(o.gpus, 1);
  int g = 8;
  if (o.gpus % g != 0 || o.gpus < g) g = std::gcd(g, std::max(o.gpus, 1));
  return g;
}

/// comm->p2pSchedule of rank `me` (init.cc ncclP2pSchedule): round r sends to `send[r]` and receives
/// from `recv[r]`; round 0 is the rank itself. Groups of a2a_group_size ranks on one node; the group
/// deltas follow the quadratic sequence (x*x+x)/2 mod pow2Up(nGroups), skipping those >= nGroups.
struct a2a_schedule {
  std::vector<int> send, recv;
  a2a_schedule(const options& o, int me) {
    const int gs = a2a_group_size(o), n = o.nodes * o.gpus, n_groups = n / gs;
    const int local = (me % o.gpus) % gs;
    const int group = me / gs;  // the groups of earlier nodes, then this node's (me % gpus) / gs
    int pow2 = 1;
    while (pow2 < n_groups) pow2 *= 2;
    auto rank_of = [&](int g, int l) { return g * gs + l; };  // group g is node (g*gs)/gpus, local base (g*gs)%gpus
    unsigned group_round = 0, group_delta = 0;
    do {
      if (int(group_delta) < n_groups) {
        const int sg = (group + int(group_delta)) % n_groups, rg = (group - int(group_delta) + n_groups) % n_groups;
        for (int d = 0; d < gs; ++d) {
          send.push_back(rank_of(sg, (local + d) % gs));
          recv.push_back(rank_of(rg, (local - d + gs) % gs));
        }
      }
      group_round += 1;
      group_delta = (group_delta + group_round) & unsigned(pow2 - 1);
    } while (int(group_round) != pow2);
  }
  int send_round(int peer) const { return int(std::find(send.begin(), send.end(), peer) - send.begin()); }
  int recv_round(int peer) const { return int(std::find(recv.begin(), recv.end(), peer) - recv.begin()); }
};

/// ncclP2pChannelBaseForRound: the first channel of round r's pair. One node: reverseBits(r); several:
/// rounds of one group delta share a base (groupDelta * divUp(groupSize, 8) + localDelta / 8).
inline int a2a_channel_base(const options& o, int round) {
  int v = round;
  if (o.nodes > 1) {
    const int gs = a2a_group_size(o);
    v = (round / gs) * ((gs + 7) / 8) + (round % gs) / 8;  // NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8
  }
  int r = 0;
  for (int b = 0, x = v; b < 6; ++b, x >>= 1) r = (r << 1) | (x & 1);  // reverseBits(v, log2(64))
  return r;
}

/// One step of the all-to-all, the same on every rank.
class a2a_model {
 public:
  explicit a2a_model(const options& o)
      : o_(o), n_(o.nodes * o.gpus), arr_(std::size_t(n_)), dur_(std::size_t(n_ * n_)) {}

  int ranks() const noexcept { return n_; }
  /// Step s starting at T: arrivals, chunk durations, the exchange's start and the step's end.
  void step(u64 s, double T) {
    t0_ = T;
    for (int r = 0; r < n_; ++r) {
      arr_[std::size_t(r)] = T + a2a_compute_s + o_.launch_jitter_us * 1e-6 * unit01(mix(mix(o_.seed, s), u64(r)));
      t0_ = std::max(t0_, arr_[std::size_t(r)]);
    }
    end_ = t0_;
    for (int a = 0; a < n_; ++a)
      for (int b = 0; b < n_; ++b) {
        double d;
        if (a == b) {
          d = double(o_.a2a_bytes) / a2a_copy_bw;
        } else {
          const bool net = a / o_.gpus != b / o_.gpus;
          const int peers = net ? n_ - o_.gpus : o_.gpus - 1;
          const double bw = (net ? network_busbw : nvlink_busbw) / std::max(1, peers);
          const double j = jitter_frac * unit_jitter(mix(mix(o_.seed ^ 0xa2a, s), u64(a) * 65536 + u64(b)));
          d = (net ? network_latency : nvlink_latency) + double(o_.a2a_bytes) / bw * (1.0 + j);
        }
        dur_[std::size_t(a * n_ + b)] = d;
        end_ = std::max(end_, t0_ + d);
      }
  }
  double arrival(int r) const noexcept { return arr_[std::size_t(r)]; }
  double t0() const noexcept { return t0_; }
  double end() const noexcept { return end_; }
  /// When chunk a→b has arrived (the Send's on a and the Recv's on b common end).
  double chunk_end(int a, int b) const noexcept { return t0_ + dur_[std::size_t(a * n_ + b)]; }
  double latency(int a, int b) const noexcept { return a / o_.gpus != b / o_.gpus ? network_latency : nvlink_latency; }

 private:
  const options& o_;
  int n_;
  std::vector<double> arr_, dur_;
  double t0_ = 0, end_ = 0;
};

}  // namespace ncclinsp::sim::job
