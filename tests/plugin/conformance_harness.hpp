#pragma once
// Shared by the conformance cases (tests/plugin/test_nccl_conformance_*.cpp): the plugin's environment, a
// scenario run in a forked child that returns the final .prom text, polling the live file, summing a
// family's samples, and the communicator, op and kernel-time shapes the scenarios build.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/bandwidth.hpp"

namespace ncclinsp_test::conformance {

namespace sim = ncclinsp::sim;

inline constexpr std::uint64_t us = 1000;

inline std::map<std::string, std::string> env_for(const std::string& dir) {
  return {{"NCCL_INSPECTOR_ENABLE", "1"},
          {"NCCL_INSPECTOR_PROM_DUMP", "1"},
          {"NCCL_INSPECTOR_DUMP_DIR", dir},
          {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "100000"},
          {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
          {"NCCLINSP_NODE_NAME", "nodeC"},
          {"NCCLINSP_PROM_KEEP_FILES", "1"}};  // the final file is read after teardown
}

/// Runs `body(dir)` in a child with the plugin's environment (+ `extra`); returns the final .prom text.
inline std::string run(const std::string& tag, const std::function<int(const std::string&)>& body,
                       const std::map<std::string, std::string>& extra = {}) {
  const std::string dir = fresh_dir("conf_" + tag);
  auto env = env_for(dir);
  for (const auto& [k, v] : extra) env[k] = v;
  const int rc = in_child(env, [&] { return body(dir); });
  REQUIRE(rc == 0);
  const auto files = files_in(dir, ".prom");
  REQUIRE(files.size() == 1);
  return slurp(files[0]);
}

/// The latest .prom text in `dir` (empty while none).
inline std::string live(const std::string& dir) {
  const auto files = files_in(dir, ".prom");
  return files.empty() ? std::string() : slurp(files[0]);
}

/// Polls the live file until `ok(text)` holds (exports every 100 ms; up to 5 s on a loaded machine).
inline bool eventually(const std::string& dir, const std::function<bool(const std::string&)>& ok) {
  for (int i = 0; i < 100; ++i) {
    ::usleep(50'000);
    const std::string t = live(dir);
    if (!t.empty() && ok(t)) return true;
  }
  return false;
}

inline double value_or_zero(double v) { return std::isnan(v) ? 0.0 : v; }

/// Sum of every sample of `family` whose labels contain all needles (0 when none).
inline double total(const std::string& text, const std::string& family,
                    std::initializer_list<std::string> needles = {}) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  while (std::getline(in, line)) {
    if (line.rfind(family + "{", 0) != 0 && line.rfind(family + " ", 0) != 0) continue;
    bool ok = true;
    for (const auto& n : needles) ok = ok && line.find(n) != std::string::npos;
    if (ok) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

inline sim::comm_config comm_cfg(const sim::nccl_release& rel, std::uint64_t hash, const char* name, int n_nodes = 1,
                                 int n_ranks = 4, int rank = 0) {
  sim::comm_config c;
  c.comm_hash = hash;
  c.name = name;
  c.n_nodes = n_nodes;
  c.n_ranks = n_ranks;
  c.rank = rank;
  c.release = &rel;
  return c;
}

inline sim::op_desc all_reduce(std::size_t bytes, std::uint8_t channels, int channel_lo = 0) {
  sim::op_desc d;
  d.func = sim::nccl_func::all_reduce;
  d.dtype = sim::nccl_dtype::float32;
  d.count = bytes / 4;
  d.n_channels = channels;
  d.channel_lo = channel_lo;
  return d;
}

/// Per-channel kernel times: every channel from `start` to `start + len` (channel i starts i x 100 ns later).
inline std::vector<sim::kernel_time> span(std::uint64_t start, std::uint64_t len, int channels) {
  std::vector<sim::kernel_time> t;
  for (int i = 0; i < channels; ++i) t.push_back({start + std::uint64_t(i) * 100, start + len});
  return t;
}

inline double ar_busbw(std::size_t bytes, int n, std::uint64_t ns) {
  return ncclinsp::busbw_gbs(ncclinsp::func::all_reduce, bytes, n, ns);
}

/// Loads the plugin at the release's own table.
struct job {
  sim::plugin_library lib;
  explicit job(const sim::nccl_release& rel, int device = 0) : lib(NCCLINSP_PLUGIN_SO, rel.abi) { set_device(device); }
};

}  // namespace ncclinsp_test::conformance
