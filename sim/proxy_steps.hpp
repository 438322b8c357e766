#pragma once
/// ncclinsp-sim's proxy model: a rank's network connections of one op (channel, direction, peer) and the
/// times at which each ProxyStep changes state (src/transport/net.cc order), from the coupled timeline.
/// Thread-safety: pure functions.

#include "driver_types.hpp"
#include "job_hash.hpp"
#include "link_model.hpp"
#include "timeline.hpp"
#include "workload.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>

namespace ncclinsp::sim::job {

// ---- proxy steps ---------------------------------------------------------------------------------
/// One network connection of an op on one rank: direction, peer (global rank, and its rank in the comm),
/// and the nodes at both ends of the wire.
struct connection {
  bool is_send;
  int peer_global;
  int peer_comm_rank;
  int channel;
};

/// This rank's network connections for op `op` (NCCL creates ProxyOps for network transports only):
/// fsdp ring channel c crosses nodes at the GPU next to its NIC (c mod K): that GPU receives from the previous
/// node and sends to the next; dp (tree, modelled as a ring over nodes) and pp cross on every channel.
inline int connections(const model& m, const sim_op& op, int rank, connection* out, int cap) {
  const options& o = m.o;
  if (!comm_network(o, op.comm)) return 0;
  const int G = o.gpus, N = o.nodes, node = rank / G, local = rank % G;
  const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
  int n = 0;
  auto push = [&](bool send, int peer_node, int c) {
    const int pg = peer_node * G + local;
    if (n < cap) out[n++] = connection{send, pg, op.comm == comm_kind::fsdp ? pg : peer_node, c};
  };
  for (int c = 0; c < nch; ++c) {
    if (op.comm == comm_kind::fsdp) {
      const int K = o.nic_count();
      if (m.nic_of(op.comm, local, c) * G / K != local) continue;
    }
    if (op.comm == comm_kind::pp) {
      push(op.p2p_dir > 0, node + op.p2p_dir, c);
      continue;
    }
    push(true, (node + 1) % N, c);
    push(false, (node + N - 1) % N, c);
  }
  return n;
}

/// Step times of one connection (seconds), with the semantics of NCCL's src/transport/net.cc
/// (sendProxyProgress / recvProxyProgress). The op's channel data flows from t0 at the pace of its slowest
/// edge (d per step, ending at the channel's end); this edge moves a step in x = d * pace / edge_factor <= d.
///  send: step k is posted (start, state 8) at launch for the first NCCL_STEPS, later when step k - 8
///        completed (its slot is free); its chunk is ready (state 20) when the GPU has it: the steps of the
///        first ring step carry this rank's own data (ready at launch), later ones data forwarded from the
///        in-edge, which arrives at the ring's pace (T_k - x: just in time for this edge), or at once on a
///        bottleneck edge (slower than its in-edge: the steps queue in front of it, as in a real ring);
///        isend is accepted (state 9) as soon as the receiver has posted that buffer (it arrived, and for
///        k >= 8 it consumed step k - 8), NOT when the wire is free: the wire serves accepted steps FIFO,
///        so state 9 holds the queueing behind earlier steps in flight as well as the step's own wire time;
///        `test` looks at the oldest step only, so completions are seen in order, up to a polling delay later.
///  recv: posted (state 10) at launch for the first NCCL_STEPS, later once step k - 8 was consumed; the data
///        arrives when the sender's step completes; no GDR flush; the GPU consumes it within a small fraction
///        of a step (not before this rank arrived).
struct step_s {
  double post, ready, sent, done;
};
inline constexpr int nccl_steps = 8;          // NCCL_STEPS: slots (and requests in flight) per connection
inline constexpr double proxy_poll_s = 2e-6;  // up to one progress-loop pass between a completion and its test
/// A connection's share of op `op`: its number of steps, their bytes, and how many of the first carry the
/// sender's own data. P2P moves only its own data; a ring's first of R ring steps (AllGather/ReduceScatter
/// n-1, AllReduce 2(n-1)) is the sender's own data, the rest is forwarded from its in-edge.
struct step_split {
  int n, own;
  std::size_t bytes;
};
inline step_split split_steps(const model& m, const sim_op& op) {
  const int n_comm = comm_size(m.o, op.comm);
  const traffic tr = traffic_of(op, n_comm);
  const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
  const double wire = tr.size_bytes * tr.factor / nch;
  const int n = std::clamp(int((wire + chunk_bytes - 1) / chunk_bytes), 1, max_proxy_steps);
  const int ring_steps = std::max(1, op.func == nccl_func::all_reduce ? 2 * (n_comm - 1) : n_comm - 1);
  return {n, op.p2p_dir != 0 ? n : std::max(1, (n + ring_steps - 1) / ring_steps), std::size_t(wire / n)};
}
inline int step_times(const model& m, const sim_op& op, const rank_op& ro, int channel, int self, int peer,
                      bool is_send, double a_self, double a_peer, step_s* out, std::size_t& step_bytes) {
  const options& o = m.o;
  const step_split sp = split_steps(m, op);
  const int n = sp.n, own = sp.own;
  step_bytes = sp.bytes;
  const int G = o.gpus, local = self % G, N = o.nodes;
  const int src = (is_send ? self : peer) / G, dst = (is_send ? peer : self) / G;
  const int ch = (op.channel_lo >= 0 ? op.channel_lo : 0) + channel;
  const int nic = m.nic_of(op.comm, local, ch);
  const double t0 = ro.t0, L = m.latency(op.comm);
  const double d = std::max(0.0, ro.ch_end[std::size_t(channel)] - t0 - L) / n;
  // The channel's pace (slowest edge) and this edge's own speed, at the op's start.
  const int n0 = op.comm == comm_kind::pp ? std::min(src, dst) : 0;
  const int n1 = op.comm == comm_kind::pp ? std::max(src, dst) : N - 1;
  const double pace = m.channel_factor(op.comm, local, n0, n1, ch, t0);
  auto edge_factor = [&](int a, int b) {
    return std::max(0.01, std::min(m.net_link(a, nic, t0), m.net_link(b, nic, t0)));
  };
  const double edge = edge_factor(src, dst);
  const double x = d * std::min(1.0, pace / edge);
  const bool p2p = op.p2p_dir != 0;
  const bool bottleneck = !p2p && N > 1 && edge < 0.99 * edge_factor((src + N - 1) % N, src);
  const double a_s = is_send ? a_self : a_peer, a_r = is_send ? a_peer : a_self;
  double done[max_proxy_steps] = {}, consumed[max_proxy_steps] = {};
  double wire_free = 0, prev_done = 0, prev_consumed = 0;
  for (int k = 0; k < n; ++k) {
    const double tk = t0 + L + (k + 1) * d;  // the ring's pace delivers step k here
    const double post_s = k < nccl_steps ? a_s : done[k - nccl_steps];
    const double input = k < own || bottleneck ? a_s : tk - x;
    const double ready = std::max({post_s, input, a_s});
    const double credit = k < nccl_steps ? a_r : consumed[k - nccl_steps];
    const double sent = std::max(ready, credit);
    wire_free = std::max(sent, wire_free) + x;  // FIFO on the wire
    const double poll =                         // the same on both ends of the connection
        proxy_poll_s * unit01(mix(mix(o.seed, u64(is_send ? self : peer) * 4096 + u64(is_send ? peer : self)),
                                  u64(t0 * 1e6) * 64 + u64(k * 16 + channel)));
    done[k] = std::max(wire_free, prev_done) + poll;  // `test` sees the oldest step only
    prev_done = done[k];
    const double got = std::max(a_r, done[k]);
    consumed[k] = std::max({got + 0.02 * d, prev_consumed, a_r});
    prev_consumed = consumed[k];
    if (is_send) {
      out[k] = step_s{post_s, ready, sent, done[k]};
    } else {
      const double post_r = k < nccl_steps ? a_r : consumed[k - nccl_steps];
      out[k] = step_s{post_r, got, got, consumed[k]};
    }
  }
  return n;
}

/// Step times of one connection of an op the network stall holds (--net-stall: every member launched it,
/// the fabric delivers nothing): a send step is posted at launch (all of them: n <= NCCL_STEPS); its data is
/// ready at launch where it is the sender's own, never where it would be forwarded from the in-edge (stalled
/// too); its isend is accepted once the receiver has posted its buffer (the receiver's launch) and never
/// completes. A recv step is posted at launch and its data never arrives. `never`: a state not reached.
inline constexpr double never = std::numeric_limits<double>::infinity();
inline int stuck_step_times(const model& m, const sim_op& op, bool is_send, double a_self, double a_peer, step_s* out,
                            std::size_t& step_bytes) {
  static_assert(max_proxy_steps <= nccl_steps, "every step of a connection is posted at launch");
  const step_split sp = split_steps(m, op);
  step_bytes = sp.bytes;
  for (int k = 0; k < sp.n; ++k) {
    const double ready = is_send && k < sp.own ? a_self : never;
    out[k] = step_s{a_self, ready, ready == never ? never : std::max(ready, a_peer), never};
  }
  return sp.n;
}

}  // namespace ncclinsp::sim::job
