// Wall clock jumps (NTP step, an admin's `date -s`, a VM resumed after hours) must not reach any
// duration, age or retention: those use CLOCK_MONOTONIC (or the GPU's globaltimer); only the
// export timestamps are wall time. This executable interposes clock_gettime (exported, so the
// dlopen'ed plugin's calls and libstdc++'s system_clock come here) and makes CLOCK_REALTIME jump
// at every read, alternately an hour back and a day forward. Any duration taken from wall time
// would then be negative or about a day; any age would be a day (a false hang).
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;

namespace {
std::atomic<bool> g_jumpy{false};
std::atomic<std::uint64_t> g_reads{0};
constexpr long back_s = 3600, forward_s = 86400;

int real_clock_gettime(clockid_t id, timespec* ts) {
  static const auto real = reinterpret_cast<int (*)(clockid_t, timespec*)>(::dlsym(RTLD_NEXT, "clock_gettime"));
  return real ? real(id, ts) : static_cast<int>(::syscall(SYS_clock_gettime, id, ts));
}
}  // namespace

extern "C" int clock_gettime(clockid_t id, timespec* ts) {
  const int rc = real_clock_gettime(id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) && g_jumpy.load(std::memory_order_relaxed))
    ts->tv_sec += g_reads.fetch_add(1, std::memory_order_relaxed) % 2 ? forward_s : -back_s;
  return rc;
}

TEST_CASE(
    "wall clock jumps: no negative or day-long duration, no false hang, retention and interval on the monotonic clock",
    "[plugin][clock]") {
  const std::string dir = fresh_dir("wallclock");
  const std::map<std::string, std::string> env = {
      {"NCCL_INSPECTOR_ENABLE", "1"},
      {"NCCLINSP_SINKS", "prom,json"},
      {"NCCL_INSPECTOR_DUMP_DIR", dir},
      {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
      {"NCCLINSP_NODE_NAME", "nodeW"},
      {"SLURM_JOB_ID", "9"},
      {"NCCLINSP_PROM_KEEP_FILES", "1"},              // read after teardown
      {"NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", "0"},  // keep the CPU-timed (proxy-observed) ops
      {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "100000"},
      {"NCCL_INSPECTOR_DUMP_VERBOSE", "1"}};
  REQUIRE(
      in_child(env, [&dir] {
        timespec probe{};
        ::clock_gettime(CLOCK_REALTIME, &probe);
        const long before = probe.tv_sec;
        g_jumpy = true;
        ::clock_gettime(CLOCK_REALTIME, &probe);  // the seam works: the clock jumped
        if (std::labs(probe.tv_sec - before) < back_s - 5) return 20;
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, ncclinsp::abi::newest);
        set_device(0);
        sim::comm_driver gone(lib, {.comm_hash = 11, .name = "gone", .n_ranks = 2});
        gone.complete(gone.enqueue(sim::op_desc{.func = sim::nccl_func::all_reduce,
                                                .dtype = sim::nccl_dtype::float32,
                                                .count = 1 << 20,
                                                .n_channels = 2}),
                      t0, t0 + 100'000);
        gone.finalize();  // retained 120 s (monotonic): a day-forward wall clock must not expire it
        sim::comm_driver c(lib, {.comm_hash = 12, .name = "wc", .n_ranks = 2});
        for (int i = 0; i < 50; ++i) {
          // CPU-timed: no globaltimer, the channels' start/stop times are the plugin's own reads.
          const auto p = c.enqueue(sim::op_desc{
              .func = sim::nccl_func::all_gather, .dtype = sim::nccl_dtype::int8, .count = 1 << 20, .n_channels = 2});
          const sim::kernel_time none[2] = {};
          c.complete(p, none);
          const auto q = c.enqueue(sim::op_desc{
              .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::int8, .count = 1 << 20, .n_channels = 1});
          c.complete(q, t0 + i * 1'000'000ull, t0 + i * 1'000'000ull + 50'000);
        }
        // One op in flight across exports: its age must grow like real time, not by a day.
        const auto hung = c.enqueue(sim::op_desc{.func = sim::nccl_func::reduce_scatter,
                                                 .dtype = sim::nccl_dtype::float32,
                                                 .count = 1 << 20,
                                                 .n_channels = 2});
        c.start_only(hung, t0);
        ::usleep(400'000);  // several exports, with the wall clock jumping at each
        std::ofstream(dir + "/live.prom.copy") << slurp(files_in(dir, ".prom").at(0));
        c.complete(hung, t0 + 10'000, t0 + 20'000);
        c.finalize();
        g_jumpy = false;
        return 0;
      }) == 0);
  const std::string live = slurp(dir + "/live.prom.copy");
  INFO(live.substr(0, 6000));
  // No false hang: the in-flight op is at most 0.4 s old at the last export, not a day, not negative.
  const double age = sample(live, "ncclinsp_oldest_inflight_age_seconds", {"comm_name=\"wc\""});
  CHECK(age >= 0.05);  // not clamped to 0 (the last export is up to an interval old)
  CHECK(age < 30);
  const double since = sample(live, "ncclinsp_seconds_since_last_completion", {"comm_name=\"wc\""});
  CHECK(since >= 0.05);
  CHECK(since < 30);
  // Retention is monotonic: the finalized communicator is still exported.
  CHECK(sample(live, "ncclinsp_ops_total", {"comm_name=\"gone\""}) == 1);
  // The export timestamp is wall time, so it carries the jump (proof the plugin read our clock).
  const double ts = sample(live, "ncclinsp_export_timestamp_seconds", {});
  const double real_now = static_cast<double>(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  CHECK((std::fabs(ts - (real_now - back_s)) < 60 || std::fabs(ts - (real_now + forward_s)) < 60));

  const std::string text = slurp(files_in(dir, ".prom").at(0));
  INFO(text.substr(0, 6000));
  CHECK(sample(text, "ncclinsp_ops_total", {"collective=\"AllGather\""}) == 50);
  CHECK(sample(text, "ncclinsp_ops_total", {"collective=\"AllReduce\"", "comm_name=\"wc\""}) == 50);
  // Durations: 50 CPU-timed AllGathers (microseconds each on this machine) and 50 GPU-timed
  // AllReduces of 50 us. A wall-clock duration would add an hour or a day, or go negative.
  const double busy_ag = sample(text, "ncclinsp_busy_seconds_total", {"collective=\"AllGather\""});
  const double busy_bc = sample(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\"", "comm_name=\"wc\""});
  CHECK(busy_ag >= 0);
  CHECK(busy_ag < 5);
  CHECK(busy_bc == Approx(50 * 50e-6).epsilon(0.01));
  CHECK(text.find("} -") == std::string::npos);
  CHECK(text.find("} NaN") == std::string::npos);
  // JSON records: every exec time is non-negative and under 5 s.
  const std::string json = slurp(files_in(dir, ".log").at(0));
  int records = 0;
  for (std::size_t p = 0; (p = json.find("exec_time_us\":", p)) != std::string::npos; ++records) {  // coll_ and p2p_
    p += 14;
    const double us = std::stod(json.substr(p, 24));
    INFO(json.substr(p, 40));
    CHECK(us >= 0);
    CHECK(us < 5e6);
  }
  CHECK(records >= 100);
}
