#pragma once
/// Loads the ncclinsp plugin (and the do-nothing plugin) for the benchmarks, with the environment
/// the plugin reads at its first init: enabled, Prometheus sink, dump dir in /tmp, no periodic
/// export (NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=-1). Variables already set win, so
/// `NCCLINSP_SINKS=json bench_plugin` measures the JSON configuration (per-op record ring).

#include <cstdlib>
#include <string>

#include <unistd.h>

#include "nccl_driver.hpp"

namespace ncclinsp::bench {

/// NCCL_INSPECTOR_DUMP_DIR when set (run.sh sets it), else /tmp/ncclinsp-bench-<pid>.
inline std::string bench_dump_dir() {
  if (const char* d = std::getenv("NCCL_INSPECTOR_DUMP_DIR"); d && *d) return d;
  return std::string("/tmp/ncclinsp-bench-").append(std::to_string(::getpid()));
}

/// Call before the first plugin init.
inline void set_plugin_env() {
  ::setenv("NCCL_INSPECTOR_ENABLE", "1", 1);
  ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "-1", 1);
  ::setenv("NCCL_INSPECTOR_DUMP_DIR", bench_dump_dir().c_str(), 0);
  ::setenv("NCCLINSP_SINKS", "prom", 0);
  ::setenv("NCCLINSP_NODE_NAME", "bench", 0);
  ::setenv("NCCLINSP_JOB_ID", "bench", 1);       // the file name's job key
  ::setenv("NCCLINSP_PROM_KEEP_FILES", "1", 1);  // the final file is measured after teardown
}

inline std::string plugin_path() {
  if (const char* p = std::getenv("NCCLINSP_BENCH_PLUGIN_PATH")) return p;
#ifdef NCCLINSP_BENCH_PLUGIN
  return NCCLINSP_BENCH_PLUGIN;
#else
  return "libnccl-profiler-ncclinsp.so";
#endif
}

/// The do-nothing plugin (bench/null_plugin.cpp): the floor the plugin benchmarks compare with.
inline std::string null_plugin_path() {
  if (const char* p = std::getenv("NCCLINSP_BENCH_NULL_PLUGIN_PATH")) return p;
#ifdef NCCLINSP_BENCH_NULL_PLUGIN
  return NCCLINSP_BENCH_NULL_PLUGIN;
#else
  return "libnccl-profiler-null.so";
#endif
}

}  // namespace ncclinsp::bench
