#pragma once
/// dump_signal: the opt-in signal that asks for a state dump (NCCLINSP_STATE_SIGNAL). The handler
/// only counts the request (a lock-free atomic: async-signal-safe) and then runs the handler that
/// was installed before it, if any (a function: SIG_DFL and SIG_IGN are not run, since the signal
/// is ours to take while installed); the dumper's thread sees the count and writes the dump.
/// install() keeps the previous action, restore() puts it back if ours is still the installed one
/// (a handler installed over ours later stays). Only SIGUSR1, SIGUSR2 and SIGRTMIN..SIGRTMAX are
/// accepted: no default-on signal, and none whose default action matters (SIGTERM, SIGINT, ...).
/// Thread-safety: install/restore cold, serialized by the caller; requests() any thread.

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "ncclinsp/detail/env.hpp"

namespace ncclinsp::plugin {

class dump_signal {
 public:
  /// Parses NCCLINSP_STATE_SIGNAL: "off" or empty (0), USR1, USR2, SIGUSR1, SIGUSR2, RTMIN+n,
  /// SIGRTMIN+n, or a number in one of those ranges. False when malformed or not allowed.
  static bool parse(std::string_view v, int& sig) {
    std::string s = detail::ascii_lower(v);
    if (s.empty() || s == "off" || s == "0" || s == "none") {
      sig = 0;
      return true;
    }
    if (s.rfind("sig", 0) == 0) s.erase(0, 3);
    long long n = 0;
    if (s == "usr1") {
      sig = SIGUSR1;
    } else if (s == "usr2") {
      sig = SIGUSR2;
    } else if (s == "rtmin") {
      sig = SIGRTMIN;
    } else if (s.rfind("rtmin+", 0) == 0 && detail::parse_int(s.substr(6), n) && n >= 0 && n <= SIGRTMAX - SIGRTMIN) {
      sig = SIGRTMIN + static_cast<int>(n);
    } else if (detail::parse_int(s, n) && (n == SIGUSR1 || n == SIGUSR2 || (n >= SIGRTMIN && n <= SIGRTMAX))) {
      sig = static_cast<int>(n);
    } else {
      return false;
    }
    return true;
  }

  /// Installs the handler for `sig` (cold). False when sigaction fails.
  static bool install(int sig) noexcept {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) return false;
    if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == &on_signal) return true;  // ours already
    // Kept before ours goes in: the handler reads them once installed.
    if (old.sa_flags & SA_SIGINFO) {
      prev_action_.store(old.sa_sigaction, std::memory_order_relaxed);
      prev_handler_.store(nullptr, std::memory_order_relaxed);
    } else {
      prev_action_.store(nullptr, std::memory_order_relaxed);
      prev_handler_.store(old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN ? nullptr : old.sa_handler,
                          std::memory_order_relaxed);
    }
    saved_ = old;
    struct sigaction sa {};
    sa.sa_sigaction = &on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    if (::sigaction(sig, &sa, nullptr) != 0) return false;
    sig_ = sig;
    return true;
  }

  /// Puts the previous action back (cold) if ours is still installed for the signal install() took.
  static void restore() noexcept {
    if (!sig_) return;
    struct sigaction cur {};
    if (::sigaction(sig_, nullptr, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == &on_signal)
      (void)::sigaction(sig_, &saved_, nullptr);
    sig_ = 0;
  }

  /// Requests counted so far (the dumper compares it with the last count it served).
  static std::uint64_t requests() noexcept { return requests_.load(std::memory_order_relaxed); }

 private:
  static void on_signal(int sig, siginfo_t* info, void* ctx) noexcept {
    requests_.fetch_add(1, std::memory_order_relaxed);
    if (auto a = prev_action_.load(std::memory_order_relaxed))
      a(sig, info, ctx);
    else if (auto h = prev_handler_.load(std::memory_order_relaxed))
      h(sig);
  }
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the handler's counter is async-signal-safe");

  static inline std::atomic<std::uint64_t> requests_{0};
  static inline std::atomic<void (*)(int, siginfo_t*, void*)> prev_action_{nullptr};
  static inline std::atomic<void (*)(int)> prev_handler_{nullptr};
  static inline struct sigaction saved_ {};
  static inline int sig_ = 0;
};

}  // namespace ncclinsp::plugin
