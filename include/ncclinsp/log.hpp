#pragma once
/// Logging hook used on cold paths (configuration, sink errors). The plugin routes it to NCCL's
/// logger (subsystem PROFILE); the default writes one line to stderr. Never called on the hot path.

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace ncclinsp {

enum class log_level { info, warn };

using log_fn = std::function<void(log_level, std::string_view)>;

/// Default logger: "ncclinsp WARN: ..." on stderr.
inline void stderr_log(log_level lvl, std::string_view msg) {
  std::fprintf(stderr, "ncclinsp %s: %.*s\n", lvl == log_level::warn ? "WARN" : "INFO", static_cast<int>(msg.size()), msg.data());
}

/// Calls `log` (or stderr_log when empty) and swallows anything it throws.
inline void emit(const log_fn& log, log_level lvl, std::string_view msg) noexcept {
  try {
    if (log)
      log(lvl, msg);
    else
      stderr_log(lvl, msg);
  } catch (...) {
  }
}

}  // namespace ncclinsp
