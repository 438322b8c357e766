#pragma once
/// change_detector: in-process detection of a bus-bandwidth drop, per communicator x collective x
/// native size bucket, within a few export windows (docs/diagnosis.md).
///
/// Every export window of a key yields one value, the time-weighted bus bandwidth of the ops it
/// completed (sum of bus bytes / sum of durations, all algo_proto merged); a window with fewer
/// than `min_ops` ops is carried into the next one, so sparse keys are judged on enough ops. The
/// detector compares the median of the last `recent` values with the median of the `baseline`
/// values before them: 2% per-op jitter averages out within a window, a slow +-5% wobble moves
/// both medians together, and one outlier window moves neither. A key turns degraded after
/// `confirm` consecutive values below `threshold` whose drop also exceeds `noise_sigmas` robust
/// standard deviations of its baseline values (1.4826 x their median absolute deviation): a key
/// whose windows scatter widely (small ops where launch skew between ranks is a large share of
/// each op's time) needs a drop well outside its own scatter, a steady key just the threshold.
/// Its baseline then stays at the pre-drop level until the recent median is back above `recover`
/// (hysteresis) for `confirm` values.
///
/// Only healthy values enter the baseline: a value joins it when it leaves the recent window,
/// unless it was judged while the key was degraded (or was one of the recent values that turned
/// it degraded). So a fault does not teach the baseline its own level: when it ends, the detector
/// judges against the pre-fault level at once, and a second fault right after the first is caught
/// (a baseline that had learnt the first fault's level would see the second as an improvement).
///
/// Runs on the exporter thread (cold path), after collector::take_snapshot: update() appends
/// snapshot::busbw (gauges) and snapshot::busbw_events (state changes). Nothing on the hot path.
/// Thread-safety: one thread at a time (the exporter's).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/snapshot.hpp"

namespace ncclinsp {

struct detector_options {
  bool enabled = true;
  double threshold = 0.92;         ///< degraded when recent/baseline stays below this
  double recover = 0.95;           ///< back to healthy when recent/baseline stays above this
  std::uint32_t recent = 3;        ///< windows in the recent median
  std::uint32_t baseline = 30;     ///< windows in the baseline median (before the recent ones)
  std::uint32_t min_baseline = 8;  ///< windows needed before a key is judged
  std::uint32_t confirm = 2;       ///< consecutive values beyond a threshold to change state
  std::uint64_t min_ops = 8;       ///< ops per window value (fewer: carried into the next window)
  double noise_sigmas = 3.5;       ///< and the drop exceeds this many robust sd of the baseline values
};

/// The detector settings of the plugin's environment (NCCLINSP_DETECT*).
inline detector_options detector_options_from(const env_options& o) {
  detector_options d;
  d.enabled = o.detect;
  d.threshold = o.detect_threshold_pct / 100.0;
  d.recover = std::min(0.99, d.threshold + 0.03);
  d.recent = o.detect_recent;
  d.baseline = o.detect_baseline;
  d.min_ops = o.detect_min_ops;
  return d;
}

/// One line for a log: "bus bandwidth of AllReduce 1MiB-2MiB on comm tp (hash, rank 3/8) degraded
/// to 86% of baseline (41.2 -> 35.4 GB/s)".
inline std::string describe(const busbw_event& e) {
  return fmt::format(
      "bus bandwidth of {} {} on comm {} ({:016x}, rank {}/{}) {} to {:.0f}% of baseline ({:.3g} -> {:.3g} GB/s)",
      to_string(e.fn), pow2_bucketer::label(e.size_bucket),
      e.comm.name.empty() ? std::string_view("unknown") : std::string_view(e.comm.name), e.comm.hash, e.comm.rank,
      e.comm.nranks, e.degraded ? "degraded" : "recovered", e.ratio * 100, e.baseline_gbs, e.recent_gbs);
}

class change_detector {
 public:
  explicit change_detector(detector_options o = {}) : o_(sanitize(o)) {}

  const detector_options& options() const noexcept { return o_; }

  /// Reads the snapshot's window counts, appends its busbw gauges and events. Communicators that
  /// left the snapshot are forgotten.
  void update(snapshot& snap) {
    if (!o_.enabled) return;
    // Window sums per key, from this snapshot's cells.
    std::map<key, window> now;
    for (const auto& c : snap.cells) {
      if (c.window.bw_count == 0 || c.window.busy_ns == 0 || c.comm >= snap.comms.size()) continue;
      const comm_desc& d = snap.comms[c.comm].desc;
      window& w =
          now[key{d.hash, d.rank, d.uuid, c.fn, pow2_bucketer::index(inspector_bucketer::lower_bound(c.size_index))}];
      w.ops += c.window.bw_count;
      w.bus_bytes += c.window.bus_bytes;
      w.busy_ns += c.window.busy_ns;
      w.comm = c.comm;
    }
    for (auto& [k, s] : keys_) ++s.idle;
    for (auto& [k, w] : now) {
      state& s = keys_[k];
      s.carry.ops += w.ops;
      s.carry.bus_bytes += w.bus_bytes;
      s.carry.busy_ns += w.busy_ns;
      if (s.carry.ops >= o_.min_ops) {
        push(s, s.carry.bus_bytes / static_cast<double>(s.carry.busy_ns));
        s.carry = {};
        s.idle = 0;
        judge(snap, k, w.comm, s);
      }
    }
    // Export every judged key of a live communicator that had a value within the last `baseline`
    // exports (a size no longer used, or a destroyed communicator, stops reporting its last
    // state); forget the keys of communicators that left the snapshot.
    std::map<std::tuple<std::uint64_t, int, std::string>, std::uint32_t> comm_of;
    for (std::uint32_t i = 0; i < snap.comms.size(); ++i)
      comm_of[{snap.comms[i].desc.hash, snap.comms[i].desc.rank, snap.comms[i].desc.uuid}] = i;
    for (auto it = keys_.begin(); it != keys_.end();) {
      const auto c = comm_of.find({it->first.hash, it->first.rank, it->first.uuid});
      if (c == comm_of.end()) {
        it = keys_.erase(it);
        continue;
      }
      const state& s = it->second;
      if (s.judged && s.idle <= o_.baseline && !snap.comms[c->second].retired)
        snap.busbw.push_back({.comm = c->second,
                              .fn = it->first.fn,
                              .size_bucket = it->first.bucket,
                              .baseline_gbs = s.base,
                              .recent_gbs = s.recent,
                              .ratio = s.ratio,
                              .degraded = s.degraded,
                              .degradations = s.degradations});
      ++it;
    }
  }

  /// Keys tracked (tests, memory bound).
  std::size_t keys() const noexcept { return keys_.size(); }

 private:
  static constexpr std::size_t history = 128;  // values kept per ring (>= recent, >= baseline)

  struct key {
    std::uint64_t hash;
    int rank;
    std::string uuid;
    func fn;
    std::uint32_t bucket;
    bool operator<(const key& o) const {
      return std::tie(hash, rank, uuid, fn, bucket) < std::tie(o.hash, o.rank, o.uuid, o.fn, o.bucket);
    }
  };
  struct window {
    std::uint64_t ops = 0, busy_ns = 0;
    double bus_bytes = 0;
    std::uint32_t comm = 0;
  };
  /// A ring of the last `cap` values (bytes/ns = GB/s) pushed into it.
  struct ring {
    std::array<double, history> v{};
    std::size_t n = 0;  // values pushed so far
    void push(double x) { v[n++ % history] = x; }
    double at(std::size_t back) const { return v[(n - 1 - back) % history]; }  // 0 = newest
  };
  struct state {
    ring recent_values;                   // every value; the newest `recent` form the recent window
    std::array<bool, history> tainted{};  // per slot of recent_values: judged while degraded
    ring base_values;                     // healthy values that left the recent window
    window carry;
    bool judged = false, degraded = false;
    std::uint32_t streak = 0;  // consecutive values beyond the active threshold
    std::uint32_t idle = 0;    // updates since the last value
    double base = 0, recent = 0, ratio = 1;
    std::uint64_t degradations = 0;
  };

  static detector_options sanitize(detector_options o) {
    o.recent = std::clamp<std::uint32_t>(o.recent, 1, history / 2);
    o.baseline = std::clamp<std::uint32_t>(o.baseline, 1, static_cast<std::uint32_t>(history) - o.recent);
    o.min_baseline = std::clamp<std::uint32_t>(o.min_baseline, 1, o.baseline);
    o.confirm = std::max<std::uint32_t>(o.confirm, 1);
    o.min_ops = std::max<std::uint64_t>(o.min_ops, 1);
    return o;
  }

  /// Appends a value; the one that leaves the recent window joins the baseline if it is healthy.
  void push(state& s, double v) const {
    ring& r = s.recent_values;
    if (r.n >= o_.recent && !s.tainted[(r.n - o_.recent) % history]) s.base_values.push(r.at(o_.recent - 1));
    s.tainted[r.n % history] = s.degraded;
    r.push(v);
  }
  /// Median of the newest `count` values of a ring (fewer if it holds fewer).
  static double median(const ring& r, std::size_t count) {
    std::array<double, history> buf;
    const std::size_t m = std::min(count, r.n);
    for (std::size_t i = 0; i < m; ++i) buf[i] = r.at(i);
    if (m == 0) return 0;
    std::nth_element(buf.begin(), buf.begin() + m / 2, buf.begin() + m);
    const double hi = buf[m / 2];
    if (m % 2) return hi;
    return (hi + *std::max_element(buf.begin(), buf.begin() + m / 2)) / 2;
  }

  /// Robust standard deviation of the newest `count` values of a ring around their median `mid`:
  /// 1.4826 x the median absolute deviation (= the sd for normal scatter, blind to outliers).
  static double robust_sd(const ring& r, std::size_t count, double mid) {
    ring dev;
    for (std::size_t i = 0; i < std::min(count, r.n); ++i) dev.push(std::abs(r.at(i) - mid));
    return 1.4826 * median(dev, count);
  }

  void judge(snapshot& snap, const key& k, std::uint32_t comm, state& s) {
    if (s.recent_values.n < o_.recent || s.base_values.n < o_.min_baseline) return;
    s.recent = median(s.recent_values, o_.recent);
    s.base = median(s.base_values, o_.baseline);  // unchanged while degraded: no value joins it
    if (s.base <= 0) return;
    s.ratio = s.recent / s.base;
    s.judged = true;
    const bool beyond = s.degraded
                            ? s.ratio >= o_.recover
                            : s.ratio < o_.threshold &&
                                  s.base - s.recent > o_.noise_sigmas * robust_sd(s.base_values, o_.baseline, s.base);
    s.streak = beyond ? s.streak + 1 : 0;
    if (s.streak < o_.confirm) return;
    s.streak = 0;
    s.degraded = !s.degraded;
    if (s.degraded) {
      ++s.degradations;
      // The recent values that turned it degraded never join the baseline either.
      for (std::size_t i = 0; i < std::min<std::size_t>(o_.recent, s.recent_values.n); ++i)
        s.tainted[(s.recent_values.n - 1 - i) % history] = true;
    }
    snap.busbw_events.push_back({.comm = snap.comms[comm].desc,
                                 .fn = k.fn,
                                 .size_bucket = k.bucket,
                                 .degraded = s.degraded,
                                 .baseline_gbs = s.base,
                                 .recent_gbs = s.recent,
                                 .ratio = s.ratio,
                                 .time_unix_ns = snap.time_unix_ns});
  }

  detector_options o_;
  std::map<key, state> keys_;
};

}  // namespace ncclinsp
