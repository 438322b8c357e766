#pragma once
/// ncclinsp-sim's rank-fault schedule: when each rank hangs, stalls, pauses or dies, and when the network
/// stalls (`options::rank_faults`, `options::net_stall_at`), as the timeline asks it. The earliest fault
/// of each kind of a rank counts.
/// Thread-safety: immutable after construction.

#include "job_options.hpp"

#include <cstddef>
#include <vector>

namespace ncclinsp::sim::job {

class rank_faults {
 public:
  explicit rank_faults(const options& o) : at_(std::size_t(o.nodes * o.gpus)), net_stall_(o.net_stall_at) {
    for (const rank_fault& f : o.rank_faults) {
      if (f.rank < 0 || f.rank >= int(at_.size())) continue;
      times& t = at_[std::size_t(f.rank)];
      double& slot = f.kind == rank_fault_kind::hang    ? t.hang
                     : f.kind == rank_fault_kind::stall ? t.stall
                     : f.kind == rank_fault_kind::kill  ? t.kill
                                                        : t.pause;
      if (slot >= 0 && slot <= f.t) continue;
      slot = f.t;
      if (f.kind == rank_fault_kind::pause) t.pause_len = f.d;
    }
  }

  /// The op of rank r launched at `a` never completes (--hang-rank: its first op at/after T).
  bool hangs(int r, double a) const noexcept { return at(r).hang >= 0 && a >= at(r).hang; }
  /// Rank r launches nothing at `a` or later: stalled (--stall-rank) or dead (--kill-rank).
  bool silent(int r, double a) const noexcept {
    const times& t = at(r);
    return (t.stall >= 0 && a >= t.stall) || (t.kill >= 0 && a >= t.kill);
  }
  /// Rank r's process dies during [a, end): an op it launched at a and that ends at `end` never completes.
  bool dies_in(int r, double a, double end) const noexcept {
    return at(r).kill >= 0 && a < at(r).kill && at(r).kill < end;
  }
  /// Second at which rank r's process dies; -1: never.
  double kill_at(int r) const noexcept { return at(r).kill; }
  /// The launch time of an op rank r would launch at `a`: not before its pause ends (--pause-rank T:D
  /// covers every launch in [T, T + D)).
  double launch(int r, double a) const noexcept {
    const times& t = at(r);
    return t.pause >= 0 && a >= t.pause && a < t.pause + t.pause_len ? t.pause + t.pause_len : a;
  }
  /// A network op whose data flows until `end` never completes (--net-stall T: the fabric stops at T).
  bool net_stalls(double end) const noexcept { return net_stall_ >= 0 && end > net_stall_; }
  bool any_in_op() const noexcept {  // a fault that can strike an op already running
    if (net_stall_ >= 0) return true;
    for (const times& t : at_)
      if (t.kill >= 0) return true;
    return false;
  }

 private:
  struct times {
    double hang = -1, stall = -1, kill = -1, pause = -1, pause_len = 0;
  };
  const times& at(int r) const noexcept { return at_[std::size_t(r)]; }
  std::vector<times> at_;
  double net_stall_;
};

}  // namespace ncclinsp::sim::job
