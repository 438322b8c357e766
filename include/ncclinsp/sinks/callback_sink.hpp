#pragma once
/// callback_sink: hands each snapshot to a user callable (in-house telemetry). An exception thrown
/// by the callable is caught, reported through the logger and turned into export_result::failure;
/// it never reaches the exporter loop or a recording thread. Thread-safety: the callable runs on
/// the exporter thread only.

#include <exception>
#include <functional>
#include <string>
#include <utility>

#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

class callback_sink {
 public:
  using callback = std::function<void(const snapshot&)>;
  explicit callback_sink(callback cb, log_fn log = {}) : cb_(std::move(cb)), log_(std::move(log)) {}

  export_result write(const snapshot& snap) noexcept {
    if (!cb_) return export_result::success;
    try {
      cb_(snap);
      return export_result::success;
    } catch (const std::exception& e) {
      emitf(log_, log_level::warn, "callback sink threw: {}", e.what());
    } catch (...) {
      emit(log_, log_level::warn, "callback sink threw a non-standard exception");
    }
    return export_result::failure;
  }
  std::string_view name() const noexcept { return "callback"; }

 private:
  callback cb_;
  log_fn log_;
};

}  // namespace ncclinsp
