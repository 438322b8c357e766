#pragma once
// Shared by the reliability cases (tests/reliability/test_*.cpp): the plugin's environment, NCCL's
// logger captured in the child, one op through the driver, polling, the .prom shape check, promtool,
// the monotonic clock shared by a parent and its child, and the host name.
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"

namespace ncclinsp_test::reliability {

namespace sim = ncclinsp::sim;
namespace abi = ncclinsp::abi;
using namespace std::chrono_literals;

/// promtool's findings, less the two known unit lints on Inspector's `*_microseconds` names.
/// Not installed is a finding too (the test command installs it; nothing passes by skipping).
inline std::string promtool_findings(const std::string& file) {
  if (std::string(NCCLINSP_PROMTOOL).empty()) return "promtool not found at configure time";
  return run_cmd(std::string(NCCLINSP_PROMTOOL) + " check metrics < '" + file + "' 2>&1 | grep -v microseconds");
}

inline std::map<std::string, std::string> base_env(const std::string& dir, const char* sinks = "prom") {
  return {{"NCCL_INSPECTOR_ENABLE", "1"},   {"NCCLINSP_SINKS", sinks},
          {"NCCL_INSPECTOR_DUMP_DIR", dir}, {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
          {"NCCLINSP_NODE_NAME", "nodeR"},  {"SLURM_JOB_ID", "5"},
          {"NCCLINSP_PROM_KEEP_FILES", "1"}};  // the tests read the final files after teardown
}

// Log lines the plugin sent through NCCL's logger (child process only).
inline std::mutex g_log_mu;
inline std::vector<std::pair<int, std::string>> g_log;
inline void capture_logger(abi::log_level level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard lk(g_log_mu);
  g_log.emplace_back(int(level), buf);
}
inline int warnings_containing(const std::string& needle) {
  std::lock_guard lk(g_log_mu);
  return static_cast<int>(std::count_if(g_log.begin(), g_log.end(), [&](const auto& l) {
    return l.first == abi::log_warn && l.second.find(needle) != std::string::npos;
  }));
}
inline int warnings() { return warnings_containing(""); }

/// One AllReduce of 4 MiB completed on 2 channels.
inline void one_op(sim::comm_driver& c, std::uint64_t at = t0) {
  const auto p = c.enqueue(sim::op_desc{
      .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 2});
  c.complete(p, at, at + 100'000);
}

inline bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

/// A .prom file: complete (ends with newline), the owner line first, then every line HELP, TYPE or
/// `name{labels} value`.
inline bool prom_well_formed(const std::string& text, std::set<std::string>* families = nullptr) {
  if (text.empty() || text.back() != '\n') return false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) return false;
    if (line[0] == '#') {
      const bool owner = line.data() == text.data() && line.rfind("# ncclinsp-owner v1 ", 0) == 0;  // first line
      if (line.rfind("# HELP ", 0) != 0 && line.rfind("# TYPE ", 0) != 0 && !owner) return false;
      if (families && line.rfind("# TYPE ", 0) == 0)
        families->insert(std::string(line.substr(7, line.find(' ', 7) - 7)));
      continue;
    }
    const std::size_t sp = line.rfind(' ');
    if (sp == std::string_view::npos || sp + 1 >= line.size()) return false;
    const std::string value(line.substr(sp + 1));
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (*end && value != "+Inf" && value != "-Inf" && value != "NaN") return false;
    const std::string_view series = line.substr(0, sp);
    if (series.find('{') != std::string_view::npos && series.back() != '}') return false;
  }
  return true;
}

/// CLOCK_MONOTONIC in ns (system-wide: comparable between a parent and its child).
inline std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::string hostname() {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace ncclinsp_test::reliability
