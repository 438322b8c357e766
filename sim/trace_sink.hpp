#pragma once
/// The driver's event stream in the shared trace text (`ncclinsp-sim --trace FILE`): every call the
/// driver makes into the plugin's table (init, startEvent, stopEvent, recordEventState, finalize) as one
/// line of include/ncclinsp/abi/callback_text.hpp's format, the format real NCCL runs are recorded in
/// (tests/traces/nccl-2.28.9-h200-onerank-cases.trace), so a simulated run and a real one can be compared.
/// `t` is CLOCK_REALTIME ns at the call, `tid` the calling thread's kernel tid, ids are the handle
/// values the plugin returned (0 = NULL), `parent` the parentObj passed, `ctx` the context value.
/// One sink per process (`trace_sink::install`); with none installed the driver writes nothing.
/// Thread-safety: `write` may run on any thread (one mutex around the buffered file); the line is
/// formatted without allocation on the caller's stack. Install before any communicator exists and
/// uninstall after the last one finalized.

#include <ncclinsp/abi/callback_text.hpp>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include <sys/syscall.h>
#include <unistd.h>

namespace ncclinsp::sim {

class trace_sink {
 public:
  /// Opens `path` for writing and writes the header line (`# ncclinsp-trace abi=V nccl=N source=S`).
  trace_sink(const std::string& path, int abi_version, int nccl_version, const char* source)
      : f_(std::fopen(path.c_str(), "w")) {
    if (!f_) return;
    char buf[abi::callback_text::max_line];
    const std::size_t n = abi::callback_text::header_line(buf, abi_version, nccl_version, source);
    std::fwrite(buf, 1, n, f_);
  }
  trace_sink(const trace_sink&) = delete;
  trace_sink& operator=(const trace_sink&) = delete;
  ~trace_sink() {
    if (current() == this) install(nullptr);
    if (f_) std::fclose(f_);
  }
  bool ok() const noexcept { return f_ != nullptr; }

  /// The process's sink, or nullptr.
  static trace_sink* current() noexcept { return slot().load(std::memory_order_acquire); }
  static void install(trace_sink* s) noexcept { slot().store(s, std::memory_order_release); }

  void write(const char* line, std::size_t n) noexcept {
    if (!f_) return;
    std::lock_guard lk(mu_);
    std::fwrite(line, 1, n, f_);
  }
  void flush() noexcept {
    std::lock_guard lk(mu_);
    if (f_) std::fflush(f_);
  }

  /// CLOCK_REALTIME in ns (the trace's `t`).
  static std::uint64_t now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
  }
  /// The calling thread's kernel thread id (the trace's `tid`).
  static long tid() noexcept {
    thread_local const long t = static_cast<long>(::syscall(SYS_gettid));
    return t;
  }

 private:
  static std::atomic<trace_sink*>& slot() noexcept {
    static std::atomic<trace_sink*> s{nullptr};
    return s;
  }
  std::FILE* f_;
  std::mutex mu_;
};

}  // namespace ncclinsp::sim
