#pragma once
/// ncclinsp-sim's coupled timeline: every rank's ops of one step, arrival, coupling to the last arriving
/// peer, per-channel stops, hangs, stalls, pauses, kills and network stalls (rank_faults.hpp). Every rank computes the whole job's timeline from the options and the
/// seed, so the ranks of one op agree on its timing without talking to each other.
/// Thread-safety: one instance per thread.

#include "job_hash.hpp"
#include "job_options.hpp"
#include "link_model.hpp"
#include "rank_faults.hpp"
#include "workload.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace ncclinsp::sim::job {

// ---- coupled timeline -------------------------------------------------------------------------
/// One op of one rank in one step.
struct rank_op {
  int group = 0, op = 0;                       ///< indices into model::program
  double start = 0;                            ///< this rank's kernel start (its own arrival), s
  double end = 0;                              ///< the op's common end (slowest channel), s
  double t0 = 0;                               ///< the op's data flow start (its last member's arrival), s
  std::array<double, max_channels> ch_end{};   ///< each channel's common end, s
  std::array<double, max_channels> ch_stop{};  ///< this rank's KernelCh stop per channel index
  bool hung = false;                           ///< started, never completes
  bool net_stalled = false;                    ///< hung because the network stopped: every member is inside
};

/// Every rank's ops of one step, computed for the whole job:
///  * arrival_r = own timeline (end of its previous op) + compute + uniform [0, J) + straggler delay;
///  * an op (per communicator instance; P2P per pair) starts its data flow when its last member arrives and
///    each channel ends after latency + bytes / (busbw x that channel's slowest edge); the op ends with its
///    slowest channel; the next op of a group starts at that end;
///  * KernelCh start = own arrival, KernelCh stop = the channel's common end + up to one hop (link latency);
///  * a hung op (the --hang-rank rank's first op at/after T, any op with an already-blocked member, an op
///    running when a member's process dies, a network op running at/after --net-stall) starts on every
///    member that arrives and never completes; those ranks issue nothing more;
///  * a stalled or killed rank launches nothing from its onset on (blocked, no op in flight); a paused
///    rank launches nothing in [T, T + D), its next launch waits for the pause's end.
class timeline {
 public:
  explicit timeline(const model& m)
      : m_(m),
        n_(m.o.nodes * m.o.gpus),
        cur_(std::size_t(n_), 0.0),
        arr_(std::size_t(n_), 0.0),
        blocked_(std::size_t(n_), 0),
        ops_(std::size_t(n_)),
        arrivals_(m.program.size(), std::vector<double>(std::size_t(n_), 0.0)),
        next_pause_(m.o.pause_every_s),
        faults_(m.o) {}

  int ranks() const noexcept { return n_; }
  bool blocked(int r) const noexcept { return blocked_[std::size_t(r)] != 0; }
  double now(int r) const noexcept { return cur_[std::size_t(r)]; }
  const std::vector<rank_op>& ops(int r) const noexcept { return ops_[std::size_t(r)]; }
  /// Rank r's launch time of group g in the last step (valid where r took part in g).
  double arrival(int g, int r) const noexcept { return arrivals_[std::size_t(g)][std::size_t(r)]; }
  const model& the_model() const noexcept { return m_; }
  const rank_faults& faults() const noexcept { return faults_; }
  /// The job's clock, the same for every rank: the earliest unblocked rank's time (the latest if all blocked).
  double job_now() const noexcept {
    double lo = 1e300, hi = 0;
    for (int r = 0; r < n_; ++r) {
      hi = std::max(hi, cur_[std::size_t(r)]);
      if (!blocked(r)) lo = std::min(lo, cur_[std::size_t(r)]);
    }
    return lo < 1e300 ? lo : hi;
  }

  /// Advance every unblocked rank by one training step.
  void step(u64 s) {
    const options& o = m_.o;
    for (auto& v : ops_) v.clear();
    // --pause: once the job's clock passes the next pause, every rank idles pause_len_s (a checkpoint
    // save, an evaluation pass): no collective runs, then the job resumes where it was.
    if (o.pause_every_s > 0 && o.pause_len_s > 0 && job_now() >= next_pause_) {
      for (int r = 0; r < n_; ++r)
        if (!blocked(r)) cur_[std::size_t(r)] += o.pause_len_s;
      while (next_pause_ <= job_now()) next_pause_ += o.pause_every_s;
    }
    const double c = m_.step_compute(s);
    for (std::size_t gi = 0; gi < m_.program.size(); ++gi) {
      const sim_group& g = m_.program[gi];
      if (g.first_step_only && s != 0) continue;
      for (int r = 0; r < n_; ++r) {
        if (blocked(r)) continue;
        const double t = cur_[std::size_t(r)] + c * g.compute_frac;
        arr_[std::size_t(r)] = faults_.launch(
            r, t + m_.jitter_s() * unit01(mix(mix(o.seed, s), u64(gi) * 65536 + u64(r))) + m_.straggle(r, t));
        if (faults_.silent(r, arr_[std::size_t(r)])) blocked_[std::size_t(r)] = 1;  // nothing in flight
      }
      arrivals_[gi] = arr_;
      const bool ce_only = std::all_of(g.ops.begin(), g.ops.end(), [](const sim_op& op) { return op.ce; });
      const comm_kind k = g.ops.front().comm;
      if (ce_only) {
        for (int r = 0; r < n_; ++r)
          if (!blocked(r)) {
            rank_op ro;
            ro.group = int(gi);
            ro.start = ro.end = arr_[std::size_t(r)];
            ops_[std::size_t(r)].push_back(ro);
          }
      } else if (k == comm_kind::pp) {
        run_p2p(s, gi);
      } else {
        for (const auto& members : instances(k)) run_coll(s, gi, members);
      }
      // Ranks outside every instance of this group (none today) just did their compute.
      for (int r = 0; r < n_; ++r)
        if (!blocked(r)) cur_[std::size_t(r)] = std::max(cur_[std::size_t(r)], arr_[std::size_t(r)]);
    }
    for (int r = 0; r < n_; ++r)
      if (!blocked(r)) cur_[std::size_t(r)] += c * m_.tail_compute_frac();
  }

 private:
  bool hangs_now(int r) const { return faults_.hangs(r, arr_[std::size_t(r)]); }
  /// Whether a group that starts its data flow at t0 on these members would be struck while it runs: a
  /// member's process dies before its end, or the network stalls (network communicators only). The ops of a
  /// collective group run one after the other, a P2P pair's Send and Recv (`concurrent`) side by side.
  /// `net` (optional) is set when the network stall is what strikes it.
  bool struck(u64 s, std::size_t gi, const std::vector<int>& members, int local, int n0, int n1, double t0, u64 inst,
              bool concurrent = false, bool* net = nullptr) const {
    if (!faults_.any_in_op()) return false;
    const sim_group& g = m_.program[gi];
    double end = t0;
    std::array<double, max_channels> ends{};
    for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
      if (g.ops[oi].ce) continue;
      double e = 0;
      channel_ends(s, gi, oi, local, n0, n1, concurrent ? t0 : end, inst, ends, e);
      end = std::max(end, e);
    }
    if (comm_network(m_.o, g.ops.front().comm) && faults_.net_stalls(end)) {
      if (net) *net = true;
      return true;
    }
    return std::any_of(members.begin(), members.end(),
                       [&](int r) { return faults_.dies_in(r, arr_[std::size_t(r)], end); });
  }
  std::vector<std::vector<int>> instances(comm_kind k) const {
    const int N = m_.o.nodes, G = m_.o.gpus;
    std::vector<std::vector<int>> v;
    if (k == comm_kind::tp) {
      for (int n = 0; n < N; ++n) {
        v.emplace_back();
        for (int l = 0; l < G; ++l) v.back().push_back(n * G + l);
      }
    } else if (k == comm_kind::fsdp) {
      v.emplace_back();
      for (int r = 0; r < N * G; ++r) v.back().push_back(r);
    } else {
      for (int l = 0; l < G; ++l) {
        v.emplace_back();
        for (int n = 0; n < N; ++n) v.back().push_back(n * G + l);
      }
    }
    return v;
  }
  /// Per-channel ends of op `op` whose data flow starts at t0 on the nodes [n0, n1] (GPU `local`).
  void channel_ends(u64 s, std::size_t gi, std::size_t oi, int local, int n0, int n1, double t0, u64 inst,
                    std::array<double, max_channels>& ends, double& end) const {
    const sim_op& op = m_.program[gi].ops[oi];
    const double j = m_.op_jitter(mix(mix(m_.o.seed, s), mix(u64(gi) * 16 + oi, inst)));
    const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
    const int ch_lo = op.channel_lo >= 0 ? op.channel_lo : 0;
    end = t0;
    // A slow op instance (--heavy-tail) is slow on every channel: its ranks are coupled.
    const double tail =
        m_.o.tail_frac > 0 ? m_.tail_factor(mix(mix(m_.o.seed ^ 0x7a11, s), mix(u64(gi) * 16 + oi, inst))) : 1.0;
    for (int c = 0; c < nch; ++c) {
      const double f = m_.channel_factor(op.comm, local, n0, n1, ch_lo + c, t0) / tail;
      ends[std::size_t(c)] = t0 + m_.duration(op, f, j);
      end = std::max(end, ends[std::size_t(c)]);
    }
  }
  void stops_for(int r, u64 s, std::size_t gi, const sim_op& op, rank_op& ro) const {
    const int nch = std::clamp<int>(op.n_channels, 1, int(max_channels));
    for (int c = 0; c < nch; ++c) {
      const double hop = m_.latency(op.comm) * unit01(mix(mix(m_.o.seed, s), u64(r) * 4096 + gi * 64 + u64(c)));
      ro.ch_stop[std::size_t(c)] += hop;
    }
  }
  void run_coll(u64 s, std::size_t gi, const std::vector<int>& members) {
    const sim_group& g = m_.program[gi];
    bool hung = false;
    double t0 = 0;
    for (int r : members) {
      if (blocked(r) || hangs_now(r))
        hung = true;
      else
        t0 = std::max(t0, arr_[std::size_t(r)]);
    }
    const int local = m_.o.gpus > 0 ? members.front() % m_.o.gpus : 0;
    const int n0 = members.front() / m_.o.gpus, n1 = members.back() / m_.o.gpus;
    bool net = false;
    if (!hung) hung = struck(s, gi, members, local, n0, n1, t0, u64(members.front()), false, &net);
    if (hung) {
      for (int r : members) {
        if (blocked(r)) continue;
        for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
          rank_op ro;
          ro.group = int(gi);
          ro.op = int(oi);
          ro.start = arr_[std::size_t(r)];
          ro.hung = true;
          ro.net_stalled = net;
          ops_[std::size_t(r)].push_back(ro);
        }
      }
      for (int r : members) blocked_[std::size_t(r)] = 1;
      return;
    }
    for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
      const sim_op& op = g.ops[oi];
      std::array<double, max_channels> ends{};
      double end = t0;
      if (!op.ce) channel_ends(s, gi, oi, local, n0, n1, t0, u64(members.front()), ends, end);
      for (int r : members) {
        rank_op ro;
        ro.group = int(gi);
        ro.op = int(oi);
        ro.start = oi == 0 ? arr_[std::size_t(r)] : t0;
        ro.end = end;
        ro.t0 = t0;
        ro.ch_end = ends;
        ro.ch_stop = ends;
        if (!op.ce) stops_for(r, s, gi, op, ro);
        ops_[std::size_t(r)].push_back(ro);
      }
      t0 = end;
    }
    for (int r : members) cur_[std::size_t(r)] = t0;
  }
  /// pp: rank (node k, GPU l) sends to (k+1, l) and receives from (k-1, l) in one group; each pair is coupled.
  void run_p2p(u64 s, std::size_t gi) {
    const sim_group& g = m_.program[gi];
    const int N = m_.o.nodes, G = m_.o.gpus;
    std::vector<char> newly(std::size_t(n_), 0);
    std::vector<double> done(std::size_t(n_), 0.0);
    for (int r = 0; r < n_; ++r) done[std::size_t(r)] = arr_[std::size_t(r)];
    for (int l = 0; l < G; ++l)
      for (int k = 0; k + 1 < N; ++k) {
        const int a = k * G + l, b = (k + 1) * G + l;
        if (blocked(a) && blocked(b)) continue;
        const double t0 = std::max(blocked(a) ? 0.0 : arr_[std::size_t(a)], blocked(b) ? 0.0 : arr_[std::size_t(b)]);
        bool net = false;
        const bool hung = blocked(a) || blocked(b) || hangs_now(a) || hangs_now(b) ||
                          struck(s, gi, {a, b}, l, k, k + 1, t0, u64(a), true, &net);
        for (std::size_t oi = 0; oi < g.ops.size(); ++oi) {
          const sim_op& op = g.ops[oi];
          const int r = op.p2p_dir > 0 ? a : b;  // the send runs on a, the matching recv on b
          if (blocked(r)) continue;
          rank_op ro;
          ro.group = int(gi);
          ro.op = int(oi);
          ro.start = arr_[std::size_t(r)];
          if (hung) {
            ro.hung = true;
            ro.net_stalled = net;
            newly[std::size_t(r)] = 1;
          } else {
            channel_ends(s, gi, oi, l, k, k + 1, t0, u64(a), ro.ch_stop, ro.end);
            ro.t0 = t0;
            ro.ch_end = ro.ch_stop;
            stops_for(r, s, gi, op, ro);
            done[std::size_t(r)] = std::max(done[std::size_t(r)], ro.end);
          }
          ops_[std::size_t(r)].push_back(ro);
        }
      }
    // A rank's group ends when both its Send and its Recv are done; program order (Send before Recv).
    for (auto& v : ops_)
      std::stable_sort(v.begin(), v.end(), [](const rank_op& x, const rank_op& y) {
        return x.group != y.group ? x.group < y.group : x.op < y.op;
      });
    for (int r = 0; r < n_; ++r) {
      if (newly[std::size_t(r)])
        blocked_[std::size_t(r)] = 1;
      else if (!blocked(r))
        cur_[std::size_t(r)] = done[std::size_t(r)];
    }
  }

  const model& m_;
  int n_;
  std::vector<double> cur_, arr_;
  std::vector<char> blocked_;
  std::vector<std::vector<rank_op>> ops_;
  std::vector<std::vector<double>> arrivals_;
  double next_pause_;  ///< job time of the next --pause
  rank_faults faults_;
};

}  // namespace ncclinsp::sim::job
