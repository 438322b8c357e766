#pragma once
/// Logging hook used on cold paths (configuration, sink errors). The plugin routes it to NCCL's
/// logger (subsystem PROFILE); the default writes one line to stderr. Never called on the hot path.

#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace ncclinsp {

enum class log_level { info, warn };

using log_fn = std::function<void(log_level, std::string_view)>;

/// Default logger: "ncclinsp WARN: ..." on stderr.
inline void stderr_log(log_level lvl, std::string_view msg) {
  fmt::print(stderr, "ncclinsp {}: {}\n", lvl == log_level::warn ? "WARN" : "INFO", msg);
}

/// Calls `log` (or stderr_log when empty) and swallows anything it throws.
inline void emit(const log_fn& log, log_level lvl, std::string_view msg) noexcept {
  try {
    if (log)
      log(lvl, msg);
    else
      stderr_log(lvl, msg);
  } catch (...) {}
}

/// Formats the message with {fmt} (`fmt::format` syntax, checked at compile time), then emit();
/// a formatting failure (out of memory) drops the line.
template <class... A>
void emitf(const log_fn& log, log_level lvl, fmt::format_string<A...> f, A&&... args) noexcept {
  try {
    emit(log, lvl, fmt::format(f, std::forward<A>(args)...));
  } catch (...) {}
}

}  // namespace ncclinsp
