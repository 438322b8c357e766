#pragma once
/// Process-global NCCL state every communicator shares (as in NCCL): the one activation-mask int whose
/// address every `init` receives, and the `ncclDebugLogger_t` given to `init`.
/// Thread-safety: the mask is read and written with relaxed atomics; the logger may run on any thread.

#include <ncclinsp/abi/nccl_profiler.hpp>

#include <atomic>
#include <cstdarg>
#include <cstdio>

#include <unistd.h>

namespace ncclinsp::sim {

// ---- process-global state shared by all communicators (as in NCCL) -------------------------------

/// NCCL's `ncclProfilerEventMask`: ONE int per process; every `init` gets a pointer to it.
inline int& global_mask() noexcept {
  static int mask = 0;
  return mask;
}
inline int load_mask() noexcept { return std::atomic_ref<int>(global_mask()).load(std::memory_order_relaxed); }
inline void store_mask(int v) noexcept { std::atomic_ref<int>(global_mask()).store(v, std::memory_order_relaxed); }

inline std::atomic<bool>& logger_verbose() noexcept {
  static std::atomic<bool> v{false};
  return v;
}
inline std::atomic<int>& logger_warn_count() noexcept {
  static std::atomic<int> n{0};
  return n;
}

/// The `ncclDebugLogger_t` given to `init`: WARN/ABORT always go to stderr (and are counted), the rest only
/// when `logger_verbose()` is set.
inline void logger(abi::log_level level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  if (level == abi::log_warn || level == abi::log_abort) logger_warn_count().fetch_add(1, std::memory_order_relaxed);
  if (!logger_verbose().load(std::memory_order_relaxed) && level != abi::log_warn && level != abi::log_abort) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  static constexpr const char* names[] = {"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"};
  const char* lv = (level >= 0 && level <= 5) ? names[level] : "?";
  std::fprintf(stderr, "[ncclinsp-sim %d] NCCL %s [%#lx] %s:%d %s\n", int(::getpid()), lv, flags, file ? file : "?",
               line, buf);
}
}  // namespace ncclinsp::sim
