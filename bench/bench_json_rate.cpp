// Sustained lossless rate of the JSON mode (README "Performance"): for each rate, a fresh process loads the
// plugin through its newest table (abi::newest) with the default settings plus
// NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=1000000, drives one communicator (8 ranks) with
// AllReduce/AllGather/ReduceScatter of 1 MiB on 4 channels paced steadily at that rate
// (sim/paced_load.hpp), finalizes and exits; the parent counts the records in the JSON file and the
// drops its dump_stats report, and reads the child's peak RSS. The lossless rate is the highest
// rate of the sweep at which this and every lower rate wrote every op and dropped none.
//
//   bench_json_rate [seconds per rate (3)] [rates... (20000 50000 100000 200000 300000 400000)]
// Env: NCCLINSP_SINKS, NCCL_INSPECTOR_DUMP_VERBOSE etc. pass through (verbose mode: set it to 1).
// Prints a Markdown table, then one JSON line per rate.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_driver.hpp"
#include "paced_load.hpp"
#include "plugin_env.hpp"

namespace {
namespace sim = ncclinsp::sim;

struct row {
  double rate = 0, achieved = 0, seconds = 0;
  std::uint64_t ops = 0, records = 0, dropped = 0, completed = 0;
  long max_rss_kib = 0;
  double cpu_s = 0;         // user + system CPU of the whole child
  double writer_cpu_s = 0;  // of the exporter thread during the paced run
  bool ok = false;
};

std::uint64_t json_uint(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  return at == std::string::npos ? 0 : std::stoull(line.substr(at + key.size() + 3, 24));
}

/// CPU seconds (user + system) of this process's threads other than the calling one: the
/// plugin's exporter thread (the writer), read from /proc before the communicator is finalized.
double other_threads_cpu_s() {
  double ticks = 0;
  const std::string self = std::to_string(::syscall(SYS_gettid));
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (auto* e = ::readdir(d)) {
      const std::string tid = e->d_name;
      if (tid == "." || tid == ".." || tid == self) continue;
      std::ifstream f("/proc/self/task/" + tid + "/stat");
      std::string line;
      std::getline(f, line);
      std::istringstream rest(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
      std::string field;
      for (int i = 3; i <= 15 && rest >> field; ++i)
        if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
    }
    ::closedir(d);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

/// The JSON file the plugin wrote in `dir` ("<host>-pid<pid>.log").
std::string log_in(const std::string& dir) {
  std::string out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 4 && n.compare(n.size() - 4, 4, ".log") == 0) out = dir + "/" + n;
    }
    ::closedir(d);
  }
  return out;
}

/// `enabled` false: the same run with the plugin loaded but off (the RSS baseline).
row measure(double rate, double seconds, bool enabled = true) {
  row r;
  r.rate = rate;
  const std::string dir = ncclinsp::bench::bench_dump_dir() + "-rate" + std::to_string(static_cast<long>(rate));
  (void)std::system(("rm -rf '" + dir + "'").c_str());
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("NCCL_INSPECTOR_ENABLE", enabled ? "1" : "0", 1);
    ::setenv("NCCL_INSPECTOR_DUMP_DIR", dir.c_str(), 1);
    ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1000000", 1);
    ::setenv("NCCLINSP_SINKS", "json", 0);
    ::setenv("NCCLINSP_NODE_NAME", "bench", 0);
    sim::plugin_library lib(ncclinsp::bench::plugin_path(), ncclinsp::abi::newest);
    if (!lib.ok()) std::_Exit(10);
    sim::comm_driver comm(lib, {.comm_hash = 0x7a7e, .name = "rate", .n_nodes = 1, .n_ranks = 8, .rank = 0});
    if (enabled && !comm.active()) std::_Exit(11);
    ::mkdir(dir.c_str(), 0755);
    const sim::paced_result p = sim::run_paced(comm, rate, seconds);
    const double writer_cpu = other_threads_cpu_s();
    comm.finalize();
    std::ofstream(dir + "/ops.txt") << p.ops << ' ' << p.seconds << ' ' << writer_cpu << '\n';
    std::exit(0);  // the plugin's exit flush waits (bounded) for a final export still running
  }
  int st = 0;
  rusage ru{};
  ::wait4(pid, &st, 0, &ru);
  r.max_rss_kib = ru.ru_maxrss;
  r.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
            static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    std::fprintf(stderr, "bench_json_rate: child failed (status %d)\n", st);
    return r;
  }
  std::ifstream(dir + "/ops.txt") >> r.ops >> r.seconds >> r.writer_cpu_s;
  r.achieved = r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
  std::ifstream in(log_in(dir));
  for (std::string line; std::getline(in, line);) {
    if (line.find("_perf\":") != std::string::npos) {
      ++r.records;
    } else if (line.find("\"dump_stats\"") != std::string::npos) {
      r.dropped = json_uint(line, "dropped_total");
      r.completed = json_uint(line, "completed_total");
    }
  }
  r.ok = r.ops > 0 && r.records == r.ops && r.dropped == 0 && r.completed == r.ops;
  if (!std::getenv("NCCLINSP_BENCH_KEEP")) (void)std::system(("rm -rf '" + dir + "'").c_str());
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  std::vector<double> rates;
  for (int i = 2; i < argc; ++i) rates.push_back(std::atof(argv[i]));
  if (rates.empty()) rates = {20'000, 50'000, 100'000, 200'000, 300'000, 400'000};
  const row off = measure(rates.front(), seconds, false);
  std::vector<row> rows;
  for (double r : rates) rows.push_back(measure(r, seconds));
  double lossless = 0;
  for (const row& r : rows) {
    if (!r.ok) break;
    lossless = r.rate;
  }
  const char* verbose = std::getenv("NCCL_INSPECTOR_DUMP_VERBOSE");
  std::printf(
      "JSON mode (%s), interval 1 s, 1 communicator, 1 MiB AllReduce/AllGather/ReduceScatter, 4 channels, %.0f s per rate\n\n",
      verbose && *verbose == '1' ? "verbose" : "default", seconds);
  std::printf(
      "| target ops/s | achieved ops/s | ops | records written | dropped (counted) | peak RSS MiB | writer CPU us/record | process CPU s | lossless |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  double best_cost = 0;
  for (const row& r : rows) {
    const double cost = r.records ? r.writer_cpu_s / static_cast<double>(r.records) * 1e6 : 0;
    if (cost > 0 && r.ok && (best_cost == 0 || cost < best_cost))
      best_cost = cost;  // lossless runs: every record written in the run
    std::printf("| %.0f | %.0f | %llu | %llu | %llu | %.1f | %.2f | %.2f | %s |\n", r.rate, r.achieved,
                static_cast<unsigned long long>(r.ops), static_cast<unsigned long long>(r.records),
                static_cast<unsigned long long>(r.dropped), static_cast<double>(r.max_rss_kib) / 1024.0, cost, r.cpu_s,
                r.ok ? "yes" : "no");
  }
  std::printf("\nsustained lossless rate: %.0f ops/s (highest rate of the sweep with every lower rate lossless too)\n",
              lossless);
  if (best_cost > 0)
    std::printf("writer capacity: %.2f us of CPU per record (exporter thread) = %.0f records/s on one free core\n",
                best_cost, 1e6 / best_cost);
  std::printf("plugin loaded but disabled (same driver, %.0f ops/s): peak RSS %.1f MiB\n\n", off.rate,
              static_cast<double>(off.max_rss_kib) / 1024.0);
  for (const row& r : rows)
    std::printf(
        "{\"rate\":%.0f,\"achieved\":%.1f,\"ops\":%llu,\"records\":%llu,\"dropped\":%llu,\"max_rss_kib\":%ld,\"lossless\":%s}\n",
        r.rate, r.achieved, static_cast<unsigned long long>(r.ops), static_cast<unsigned long long>(r.records),
        static_cast<unsigned long long>(r.dropped), r.max_rss_kib, r.ok ? "true" : "false");
  return 0;
}
