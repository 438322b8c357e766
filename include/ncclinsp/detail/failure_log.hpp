#pragma once
/// When a sink logs a failure that recurs at every export, so that a broken disk or endpoint gives
/// a few lines, not one per export: the first failure, a change of cause (errno value, status),
/// and optionally a reminder every `repeat` while it lasts, never two lines closer than `min_gap`;
/// then one line when it works again. Exporter thread only (cold path), not thread-safe.

#include <chrono>

namespace ncclinsp::detail {

class failure_log {
 public:
  using clock = std::chrono::steady_clock;
  /// Default: a line per new failure or change of cause, no reminders (the file sinks).
  explicit failure_log(clock::duration min_gap = clock::duration::zero(),
                       clock::duration repeat = clock::duration::max()) noexcept
      : min_gap_(min_gap), repeat_(repeat) {}

  /// A failure with `cause` (non-zero); true when it should be logged now.
  bool failed(int cause) noexcept {
    const auto now = clock::now();
    const auto since = now - last_;
    const bool log = !logged_ || (since >= min_gap_ && (cause != cause_ || since >= repeat_));
    cause_ = cause;
    if (log) {
      logged_ = true;
      last_ = now;
    }
    return log;
  }
  /// A success; true when it ends a failure (log "works again").
  bool succeeded() noexcept {
    const bool was = cause_ != 0;
    cause_ = 0;
    return was;
  }

 private:
  clock::duration min_gap_, repeat_;
  clock::time_point last_{};
  int cause_ = 0;
  bool logged_ = false;
};

}  // namespace ncclinsp::detail
