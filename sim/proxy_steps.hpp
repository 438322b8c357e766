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

/// Step times of one connection (seconds). The op's channel data flows from t0 at the pace of its slowest edge
/// (d per step, ending at the channel's end); this edge moves a step in x = d * pace / edge_factor <= d:
///  send: posted at launch (all steps fit NCCL_STEPS); GPU has step k's chunk at a_s (k = 0) or when the
///        ring's pace delivers it (T_k - x); the isend is accepted once the receiver has arrived and the wire is
///        free; network completion x later;
///  recv: posted at launch; data arrives when the sender's step completes; no GDR flush; the GPU consumes it
///        within a small fraction of a step (not before this rank arrived).
struct step_s {
  double post, ready, sent, done;
};
inline int step_times(const model& m, const sim_op& op, const rank_op& ro, int channel, int self, int peer,
                      bool is_send, double a_self, double a_peer, step_s* out, std::size_t& step_bytes) {
  const options& o = m.o;
  const traffic tr = traffic_of(op, comm_size(o, op.comm));
  const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
  const double wire = tr.size_bytes * tr.factor / nch;
  const int n = std::clamp(int((wire + chunk_bytes - 1) / chunk_bytes), 1, max_proxy_steps);
  step_bytes = std::size_t(wire / n);
  const int G = o.gpus, local = self % G;
  const int src = (is_send ? self : peer) / G, dst = (is_send ? peer : self) / G;
  const int ch = (op.channel_lo >= 0 ? op.channel_lo : 0) + channel;
  const int nic = m.nic_of(op.comm, local, ch);
  const double t0 = ro.t0, L = m.latency(op.comm);
  const double d = std::max(0.0, ro.ch_end[std::size_t(channel)] - t0 - L) / n;
  // The channel's pace (slowest edge) and this edge's own speed, at the op's start.
  const int n0 = op.comm == comm_kind::pp ? std::min(src, dst) : 0;
  const int n1 = op.comm == comm_kind::pp ? std::max(src, dst) : o.nodes - 1;
  const double pace = m.channel_factor(op.comm, local, n0, n1, ch, t0);
  const double edge = std::max(0.01, std::min(m.net_link(src, nic, t0), m.net_link(dst, nic, t0)));
  const double x = d * std::min(1.0, pace / edge);
  const double a_s = is_send ? a_self : a_peer, a_r = is_send ? a_peer : a_self;
  double prev_done = 0, prev_consumed = 0;
  for (int k = 0; k < n; ++k) {
    const double tk = t0 + L + (k + 1) * d;  // the ring's pace delivers step k here
    const double ready = k == 0 ? a_s : std::max(a_s, tk - x);
    const double sent = std::max({ready, a_r, prev_done});
    const double done = sent + x;
    prev_done = done;
    if (is_send) {
      out[k] = step_s{a_s, ready, sent, done};
    } else {
      const double got = std::max(a_r, done);
      const double consumed = std::max({got + 0.02 * d, prev_consumed, a_r});
      prev_consumed = consumed;
      out[k] = step_s{a_r, got, got, consumed};
    }
  }
  return n;
}

}  // namespace ncclinsp::sim::job
