#pragma once
/// change_detector: in-process detection of a bus-bandwidth drop, per communicator x collective x
/// native size bucket, and whether it is transient or sustained (docs/diagnosis.md).
///
/// Every export window of a key yields one value, the time-weighted bus bandwidth of the ops it
/// completed (sum of bus bytes / sum of durations, all algo_proto merged); a window with fewer
/// than `min_ops` ops is carried into the next one, so sparse keys are judged on enough ops. The
/// detector compares the median of the last `recent` values with the median of the `baseline`
/// values before them: 2% per-op jitter averages out within a window, a slow +-5% wobble moves
/// both medians together, and one outlier window (a heavy-tailed slow op) moves neither. A key
/// starts a degradation episode after `confirm` consecutive values below `threshold` whose drop also
/// exceeds `noise_sigmas` robust standard deviations of its baseline values (1.4826 x their median
/// absolute deviation): a key whose windows scatter widely (small ops where launch skew between
/// ranks is a large share of each op's time) needs a drop well outside its own scatter, a steady
/// key just the threshold.
///
/// Transient or sustained: congestion from other jobs on a shared fabric comes in bursts of a few
/// seconds, as deep as a real fault of 10-20%, and heavy-tailed ops (one op 2-10x slower: OS jitter,
/// a retransmit) make single windows low at any time, also right before or after a burst. An episode
/// is `transient` until its run has lasted `persist_s`; then it is `sustained`: only then does the
/// key's `degraded` gauge flip and `degradations` count it. The run is the newest values below the
/// threshold, one after another; its level is their median, and a value more than `band` (of the
/// baseline) below that level is an outlier: outliers at either end of the run are not part of it,
/// and outliers inside it do not count towards its length. The run has lasted the time covered by
/// the windows (in which the key completed ops) of its values after the first one: the first value
/// is partly before the onset, idle windows (a pause for a checkpoint) are not time the drop
/// persisted, and an outlier next to a burst does not make the burst look a window longer. A drop
/// with each recent value below `deep_ratio` (a link at half speed, a failed port: deeper than
/// congestion makes it) is sustained at once. An episode whose recent median is back above the
/// threshold for `confirm` values before it is sustained counts in `transients`, and its depth (1 -
/// lowest ratio) in `transient_depth`; a sustained one recovers above `recover` (hysteresis). Events:
/// one when an episode starts (transient), one when it becomes sustained, one when it ends, each
/// saying which.
///
/// Only healthy values enter the baseline: a value joins it when it leaves the recent window,
/// unless it was judged during an episode (or was one of the recent values that started it). So a
/// fault or a burst does not teach the baseline its own level: when it ends, the detector judges
/// against the pre-fault level at once, and a second fault right after the first is caught (a
/// baseline that had learnt the first fault's level would see the second as an improvement).
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
  std::uint64_t min_ops = 5;       ///< ops per window value (fewer: carried into the next window)
  double noise_sigmas = 3.5;       ///< and the drop exceeds this many robust sd of the baseline values
  double persist_s = 9;            ///< an episode is sustained once its run has lasted this long (0: at once)
  double deep_ratio = 0.60;        ///< ... or at once when each recent value is below this ratio
  double band = 0.03;              ///< a run's value this far (of the baseline) below its median is an outlier
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
  d.persist_s = o.detect_persist_s;
  d.deep_ratio = o.detect_deep_pct / 100.0;
  return d;
}

/// One line for a log: "bus bandwidth of AllReduce 1MiB-2MiB on comm tp (hash, rank 3/8) degraded
/// to 86% of baseline (41.2 -> 35.4 GB/s): transient so far (3 s)", "...: sustained (10 s)",
/// "... recovered to 99% of baseline (...) after a transient degradation of 6 s, lowest 85%".
inline std::string describe(const busbw_event& e) {
  const std::string head = fmt::format(
      "bus bandwidth of {} {} on comm {} ({:016x}, rank {}/{}) {} to {:.0f}% of baseline ({:.3g} -> {:.3g} GB/s)",
      to_string(e.fn), pow2_bucketer::label(e.size_bucket),
      e.comm.name.empty() ? std::string_view("unknown") : std::string_view(e.comm.name), e.comm.hash, e.comm.rank,
      e.comm.nranks, e.degraded ? "degraded" : "recovered", e.ratio * 100, e.baseline_gbs, e.recent_gbs);
  if (e.degraded)
    return head + fmt::format(": {} ({:.0f} s)", e.sustained ? "sustained" : "transient so far", e.duration_s);
  return head + fmt::format(" after a {} degradation of {:.0f} s, lowest {:.0f}%",
                            e.sustained ? "sustained" : "transient", e.duration_s, e.lowest_ratio * 100);
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
    // The window this snapshot closes: since the previous update (0 for the first one).
    const std::uint64_t window_ns = last_ns_ && snap.time_unix_ns > last_ns_ ? snap.time_unix_ns - last_ns_ : 0;
    last_ns_ = snap.time_unix_ns;
    for (auto& [k, s] : keys_) ++s.idle;
    for (auto& [k, w] : now) {
      state& s = keys_[k];
      s.carry.ops += w.ops;
      s.carry.bus_bytes += w.bus_bytes;
      s.carry.busy_ns += w.busy_ns;
      s.carry.covered_ns += window_ns;
      if (s.carry.ops >= o_.min_ops) {
        push(s, s.carry.bus_bytes / static_cast<double>(s.carry.busy_ns), s.carry.covered_ns);
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
                              .degraded = s.ph == phase::sustained,
                              .degradations = s.degradations,
                              .transients = s.transients,
                              .transient_depth = s.transient_depth});
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
    std::uint64_t covered_ns = 0;  // the windows (with ops of the key) this value spans
  };
  /// A ring of the last `cap` values (bytes/ns = GB/s) pushed into it.
  struct ring {
    std::array<double, history> v{};
    std::size_t n = 0;  // values pushed so far
    void push(double x) { v[n++ % history] = x; }
    double at(std::size_t back) const { return v[(n - 1 - back) % history]; }  // 0 = newest
  };
  enum class phase : std::uint8_t { healthy, transient, sustained };
  struct state {
    ring recent_values;                               // every value; the newest `recent` form the recent window
    std::array<std::uint64_t, history> covered_ns{};  // per slot of recent_values: the windows it spans
    std::array<bool, history> tainted{};              // per slot of recent_values: judged during an episode
    ring base_values;                                 // healthy values that left the recent window
    window carry;
    bool judged = false;
    phase ph = phase::healthy;
    std::uint32_t streak = 0;  // consecutive values beyond the active threshold
    std::uint32_t idle = 0;    // updates since the last value
    double base = 0, recent = 0, ratio = 1;
    double lasted_s = 0;  // the episode's run so far (its longest, once the run has ended)
    double lowest = 1;    // the episode's lowest ratio
    std::uint64_t degradations = 0, transients = 0;
    double transient_depth = 0;
  };

  static detector_options sanitize(detector_options o) {
    o.recent = std::clamp<std::uint32_t>(o.recent, 1, history / 2);
    o.baseline = std::clamp<std::uint32_t>(o.baseline, 1, static_cast<std::uint32_t>(history) - o.recent);
    o.min_baseline = std::clamp<std::uint32_t>(o.min_baseline, 1, o.baseline);
    o.confirm = std::max<std::uint32_t>(o.confirm, 1);
    o.min_ops = std::max<std::uint64_t>(o.min_ops, 1);
    o.persist_s = std::clamp(o.persist_s, 0.0, 86400.0);
    o.deep_ratio = std::clamp(o.deep_ratio, 0.0, o.threshold);
    o.band = std::clamp(o.band, 0.0, 1.0);
    return o;
  }

  /// Appends a value; the one that leaves the recent window joins the baseline if it is healthy.
  void push(state& s, double v, std::uint64_t covered_ns) const {
    ring& r = s.recent_values;
    if (r.n >= o_.recent && !s.tainted[(r.n - o_.recent) % history]) s.base_values.push(r.at(o_.recent - 1));
    s.tainted[r.n % history] = s.ph != phase::healthy;
    s.covered_ns[r.n % history] = covered_ns;
    r.push(v);
  }
  /// How long the newest run of values below `cut` has lasted, in seconds (see the header comment):
  /// its values one after another below `cut`, less the outliers at either end (more than `band` x
  /// base below the run's median), counting the windows covered by its values after the first one,
  /// outliers inside the run excepted.
  double run_lasted(const state& s, double cut) const {
    const ring& r = s.recent_values;
    std::size_t len = 0;  // the run: values [0, len) back from the newest
    while (len < std::min(r.n, history) && r.at(len) < cut) ++len;
    if (len < 2) return 0;
    ring run;
    for (std::size_t i = 0; i < len; ++i) run.push(r.at(i));
    const double lo = median(run, len) - o_.band * s.base;
    std::size_t newest = 0, oldest = len - 1;
    while (newest < oldest && r.at(newest) < lo) ++newest;
    while (oldest > newest && r.at(oldest) < lo) --oldest;
    std::uint64_t ns = 0;
    for (std::size_t i = newest; i < oldest; ++i)
      if (r.at(i) >= lo) ns += s.covered_ns[(r.n - 1 - i) % history];
    return static_cast<double>(ns) * 1e-9;
  }
  /// The newest `count` values all below `cut`.
  static bool all_below(const ring& r, std::size_t count, double cut) {
    for (std::size_t i = 0; i < std::min(count, r.n); ++i)
      if (r.at(i) >= cut) return false;
    return true;
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
    s.base = median(s.base_values, o_.baseline);  // unchanged during an episode: no value joins it
    if (s.base <= 0) return;
    s.ratio = s.recent / s.base;
    s.judged = true;
    if (s.ph == phase::healthy) {
      const bool beyond =
          s.ratio < o_.threshold && s.base - s.recent > o_.noise_sigmas * robust_sd(s.base_values, o_.baseline, s.base);
      s.streak = beyond ? s.streak + 1 : 0;
      if (s.streak < o_.confirm) return;
      s.streak = 0;
      s.ph = phase::transient;
      s.lowest = s.ratio;
      s.lasted_s = run_lasted(s, o_.threshold * s.base);
      // The recent values that started it never join the baseline either.
      for (std::size_t i = 0; i < std::min<std::size_t>(o_.recent, s.recent_values.n); ++i)
        s.tainted[(s.recent_values.n - 1 - i) % history] = true;
      emit(snap, k, comm, s, true, false);
      sustain_if_due(snap, k, comm, s);
      return;
    }
    s.lowest = std::min(s.lowest, s.ratio);
    if (s.ph == phase::sustained)  // a sustained episode lasts until it recovers
      s.lasted_s += static_cast<double>(s.covered_ns[(s.recent_values.n - 1) % history]) * 1e-9;
    // A sustained episode ends above `recover` (hysteresis: it alerted); a transient one as soon as
    // the median is back above the threshold, so a later burst starts an episode of its own.
    s.streak = s.ratio >= (s.ph == phase::sustained ? o_.recover : o_.threshold) ? s.streak + 1 : 0;
    if (s.streak >= o_.confirm) {
      s.streak = 0;
      const bool was_sustained = s.ph == phase::sustained;
      if (!was_sustained) {
        ++s.transients;
        s.transient_depth += 1.0 - s.lowest;
      }
      s.ph = phase::healthy;
      emit(snap, k, comm, s, false, was_sustained);
      return;
    }
    if (s.ph == phase::transient) sustain_if_due(snap, k, comm, s);
  }

  /// A transient episode becomes sustained once its run has lasted persist_s with the recent median
  /// and each of the newest `recent` values below the threshold, or at once when each of them is
  /// below deep_ratio (one heavy-tailed op in a burst window is not).
  void sustain_if_due(snapshot& snap, const key& k, std::uint32_t comm, state& s) {
    const double cut = o_.threshold * s.base;
    const double lasted = run_lasted(s, cut);
    s.lasted_s = std::max(s.lasted_s, lasted);
    const bool low = s.ratio < o_.threshold && all_below(s.recent_values, o_.recent, cut);
    const bool deep = all_below(s.recent_values, o_.recent, o_.deep_ratio * s.base);
    if (!deep && !(low && lasted >= o_.persist_s)) return;
    s.ph = phase::sustained;
    ++s.degradations;
    emit(snap, k, comm, s, true, true);
  }

  void emit(snapshot& snap, const key& k, std::uint32_t comm, const state& s, bool degraded, bool sustained) const {
    snap.busbw_events.push_back({.comm = snap.comms[comm].desc,
                                 .fn = k.fn,
                                 .size_bucket = k.bucket,
                                 .degraded = degraded,
                                 .sustained = sustained,
                                 .baseline_gbs = s.base,
                                 .recent_gbs = s.recent,
                                 .ratio = s.ratio,
                                 .lowest_ratio = s.lowest,
                                 .duration_s = s.lasted_s,
                                 .time_unix_ns = snap.time_unix_ns});
  }

  detector_options o_;
  std::map<key, state> keys_;
  std::uint64_t last_ns_ = 0;  // the previous update's snapshot time
};

}  // namespace ncclinsp
