// Conformance with real NCCL, release by release: each case drives the built plugin .so through the
// simulator's driver with one release profile (sim/nccl_release.hpp) reproducing one behaviour of that
// release's NCCL (the NCCL function is in the case's name), then checks what the plugin exports: the
// final .prom file's families and counters, the in-flight and hang signals while the job runs.
// Rule checked: never publish a wrong number as GPU-timed, never raise a false hang, never lose count.
// Each scenario runs in a forked child (the plugin's state is process-wide); the parent reads the files.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/bandwidth.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;
using ncclinsp::abi::ev_coll;
using ncclinsp::abi::ev_group;
using ncclinsp::abi::ev_kernel_ch;

namespace {

constexpr std::uint64_t us = 1000;

std::map<std::string, std::string> env_for(const std::string& dir) {
  return {{"NCCL_INSPECTOR_ENABLE", "1"},
          {"NCCL_INSPECTOR_PROM_DUMP", "1"},
          {"NCCL_INSPECTOR_DUMP_DIR", dir},
          {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "100000"},
          {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
          {"NCCLINSP_NODE_NAME", "nodeC"},
          {"NCCLINSP_PROM_KEEP_FILES", "1"}};  // the final file is read after teardown
}

/// Runs `body(dir)` in a child with the plugin's environment (+ `extra`); returns the final .prom text.
std::string run(const std::string& tag, const std::function<int(const std::string&)>& body,
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
std::string live(const std::string& dir) {
  const auto files = files_in(dir, ".prom");
  return files.empty() ? std::string() : slurp(files[0]);
}

/// Polls the live file until `ok(text)` holds (exports every 100 ms; up to 5 s on a loaded machine).
bool eventually(const std::string& dir, const std::function<bool(const std::string&)>& ok) {
  for (int i = 0; i < 100; ++i) {
    ::usleep(50'000);
    const std::string t = live(dir);
    if (!t.empty() && ok(t)) return true;
  }
  return false;
}

double value_or_zero(double v) { return std::isnan(v) ? 0.0 : v; }

/// Sum of every sample of `family` whose labels contain all needles (0 when none).
double total(const std::string& text, const std::string& family, std::initializer_list<std::string> needles = {}) {
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

sim::comm_config comm_cfg(const sim::nccl_release& rel, std::uint64_t hash, const char* name, int n_nodes = 1,
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

sim::op_desc all_reduce(std::size_t bytes, std::uint8_t channels, int channel_lo = 0) {
  sim::op_desc d;
  d.func = sim::nccl_func::all_reduce;
  d.dtype = sim::nccl_dtype::float32;
  d.count = bytes / 4;
  d.n_channels = channels;
  d.channel_lo = channel_lo;
  return d;
}

/// Per-channel kernel times: every channel from `start` to `start + len` (channel i starts i x 100 ns later).
std::vector<sim::kernel_time> span(std::uint64_t start, std::uint64_t len, int channels) {
  std::vector<sim::kernel_time> t;
  for (int i = 0; i < channels; ++i) t.push_back({start + std::uint64_t(i) * 100, start + len});
  return t;
}

double ar_busbw(std::size_t bytes, int n, std::uint64_t ns) {
  return ncclinsp::busbw_gbs(ncclinsp::func::all_reduce, bytes, n, ns);
}

/// Loads the plugin at the release's own table.
struct job {
  sim::plugin_library lib;
  explicit job(const sim::nccl_release& rel, int device = 0) : lib(NCCLINSP_PLUGIN_SO, rel.abi) { set_device(device); }
};

}  // namespace

// ---- CUDA-graph capture and replay ------------------------------------------------------------------

TEST_CASE(
    "2.27 2.28 2.30 2.31.2 graph replay - each replay is an op with its own seqNumber - enqueue.cc "
    "hostStreamPlanCallback",
    "[conformance][graph]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("replay", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x61, "graph"));
      sim::captured_graph g;
      const sim::op_desc ar = all_reduce(4u << 20, 4, 0);
      c.capture(std::span<const sim::op_desc>(&ar, 1), g);
      for (int i = 0; i < 20; ++i) {
        sim::pending_op p;
        c.replay(g, std::span<sim::pending_op>(&p, 1));
        if (p.seq != std::uint64_t(i) || !p.replay) return 3;
        const auto t = span(t0 + std::uint64_t(i) * 1000 * us, 200 * us, 4);
        c.complete(p, t);
      }
      c.finalize();
      return 0;
    });
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 20);
    CHECK(sample(text, "ncclinsp_last_completed_seq", {"collective=\"AllReduce\""}) == 19);
    CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
          Approx(ar_busbw(4u << 20, 4, 200 * us)).epsilon(0.01));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
  }
}

TEST_CASE(
    "2.28 2.30 graph replays mixed with eager launches - KernelCh carry another work's timestamps - "
    "proxy.cc SaveProxyProfiler",
    "[conformance][graph]") {
  for (const auto* rel : {&sim::release_2_28, &sim::release_2_30}) {
    INFO("NCCL " << rel->name);
    // Replays of a 4 MiB AllReduce on channels 0..3 after an eager 128 KiB AllReduce on the same
    // channels: every replay's KernelCh read the eager op's slot (its 20 us span, not the replay's 200 us).
    const std::string text = run("desync", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x62, "mixed"));
      sim::captured_graph g;
      const sim::op_desc big = all_reduce(4u << 20, 4, 0);
      c.capture(std::span<const sim::op_desc>(&big, 1), g);
      std::uint64_t t = t0;
      const auto eager = c.enqueue(all_reduce(128u << 10, 4, 0));
      c.complete(eager, span(t, 20 * us, 4));
      for (int i = 0; i < 10; ++i) {
        t += 1000 * us;
        sim::pending_op p;
        c.replay(g, std::span<sim::pending_op>(&p, 1));
        if (!p.stale_timestamps) return 3;  // the release's desync is what this case reproduces
        c.complete(p, span(t, 200 * us, 4));
      }
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    // Never published as GPU-timed with the eager op's span (that would read 10x the truth)...
    const double bw = sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\"", "message_size=\"4-5MB\""});
    CHECK((std::isnan(bw) || bw == Approx(ar_busbw(4u << 20, 4, 200 * us)).epsilon(0.02)));
    CHECK(value_or_zero(
              sample(text, "ncclinsp_ops_total", {"collective=\"AllReduce\"", "message_size=\"4MiB-8MiB\""})) == 0);
    // ... and never lost: each replay counted by why it has no GPU timing.
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"foreign_timestamps\""}) == 10);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
  }
}

TEST_CASE(
    "2.31.2 captured symmetric collective - channels announced and no KernelCh ever - symmetric_sched.cc "
    "ncclProfilerStartTaskEvents",
    "[conformance][graph][symmetric]") {
  const auto& rel = sim::release_2_31_2;
  const std::string dir = fresh_dir("conf_capsym");
  auto env = env_for(dir);
  REQUIRE(in_child(env, [&] {
            job j(rel);
            sim::comm_driver c(j.lib, comm_cfg(rel, 0x63, "capsym"));
            sim::op_desc d = all_reduce(1u << 20, 2, 0);
            d.symmetric = true;
            d.kernel_variant = "AllReduce_AGxLL_R";
            sim::captured_graph g;
            c.capture(std::span<const sim::op_desc>(&d, 1), g);
            for (int i = 0; i < 5; ++i) {
              sim::pending_op p;
              c.replay(g, std::span<sim::pending_op>(&p, 1));
              if (p.kernel_events) return 3;
              c.complete(p, span(t0, 10 * us, 2));  // no KernelCh: the uninstrumented kernel ran
            }
            // Not a hang: nothing stays in flight, nothing ages.
            const bool settled = eventually(dir, [](const std::string& t) {
              return total(t, "ncclinsp_inflight_ops") == 0 && total(t, "ncclinsp_filtered_ops_total") >= 5;
            });
            c.finalize();
            return settled ? 0 : 4;
          }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  INFO(text.substr(0, 3000));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == 5);
  CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
}

// ---- symmetric kernels --------------------------------------------------------------------------

TEST_CASE(
    "2.27 2.28 2.30 symmetric collectives are invisible - no Coll and no KernelCh - "
    "ncclSymmetricTaskScheduler",
    "[conformance][symmetric]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("syminv", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x64, "syminv"));
      sim::op_desc d = all_reduce(1u << 20, 2, 0);
      d.symmetric = true;
      for (int i = 0; i < 10; ++i) {
        const auto p = c.enqueue(d);
        if (p.kernel_events || p.task_handle) return 3;
      }
      const auto p = c.enqueue(all_reduce(1u << 20, 2, 0));  // a regular one is seen
      c.complete(p, span(t0, 50 * us, 2));
      c.finalize();
      return 0;
    });
    // What NCCL does not report cannot be counted; nothing else is disturbed.
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 1);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(total(text, "ncclinsp_filtered_ops_total") == 0);
  }
}

TEST_CASE("2.31.2 symmetric multi-task plan - only the head task gets KernelCh - symmetric_sched.cc",
          "[conformance][symmetric]") {
  const auto& rel = sim::release_2_31_2;
  const std::string text = run("symhead", [&](const std::string&) {
    job j(rel);
    sim::comm_driver c(j.lib, comm_cfg(rel, 0x65, "symhead"));
    sim::op_desc ops[3];
    for (int i = 0; i < 3; ++i) {
      ops[i] = all_reduce(1u << 20, 2, 0);
      ops[i].symmetric = true;
      ops[i].kernel_variant = "AllReduce_AGxLL_R";
      ops[i].sym_tail = i > 0;
    }
    sim::pending_op p[3];
    c.enqueue(ops, p, 1);
    if (!p[0].kernel_events || p[1].kernel_events || p[2].kernel_events) return 3;
    for (auto& x : p) c.complete(x, span(t0, 40 * us, 2));
    c.finalize();
    return 0;
  });
  INFO(text.substr(0, 3000));
  CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 1);  // the head, GPU-timed
  CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
        Approx(ar_busbw(1u << 20, 4, 40 * us)).epsilon(0.01));
  // The tail tasks: nChannels 0, timed by their enqueue only.
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"enqueue_only\""}) == 2);
  CHECK(total(text, "ncclinsp_inflight_ops") == 0);
}

// ---- CollNet (SHARP) ------------------------------------------------------------------------------

namespace {
/// `n` 8 MiB AllReduce on 4 channels, 250 us each, through the driver's CollNet path: up to 2.30 the
/// Coll event announces nChannels 0 and the 4 KernelCh still come (scheduleCollTasksToPlan).
std::string zero_announced_run(const sim::nccl_release& rel, const char* name, std::uint64_t hash, const char* algo,
                               int n) {
  return run(name, [&](const std::string&) {
    job j(rel);
    sim::comm_driver c(j.lib, comm_cfg(rel, hash, name, 2, 8, 0));
    sim::op_desc d = all_reduce(8u << 20, 4, 0);
    d.collnet = true;
    d.algo = algo;
    for (int i = 0; i < n; ++i) {
      const auto p = c.enqueue(d);
      c.complete(p, span(t0 + std::uint64_t(i) * 1000 * us, 250 * us, 4));
    }
    c.finalize();
    return 0;
  });
}
}  // namespace

TEST_CASE(
    "2.27 2.28 2.30 2.31.2 CollNet collective - nChannels 0 up to 2.30 while KernelCh arrive - enqueue.cc "
    "scheduleCollTasksToPlan",
    "[conformance][collnet]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = zero_announced_run(*rel, "sharp", 0x66, "COLLNET_DIRECT", 50);
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 50);
    CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
          Approx(ar_busbw(8u << 20, 8, 250 * us)).epsilon(0.01));
    CHECK(total(text, "ncclinsp_filtered_ops_total") == 0);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// A ring collective announced with nChannels 0 whose KernelCh arrive anyway: what an 8-bit channel
// count would send for 256 channels (the audit's RCCL claim; the RCCL read has MAXCHANNELS 128, see
// sim/README.md "Unknown"). The CollNet path on 2.28 (the table RCCL offers, v5) with a ring's name:
// nothing says how many channels to wait for, so the op is never GPU-timed from a guess, never in flight.
TEST_CASE(
    "2.28 ring collective announced with 0 channels while KernelCh arrive - counted enqueue_only - rccl "
    "profiler.cc ncclProfilerStartTaskEvents",
    "[conformance][collnet]") {
  const std::string text = zero_announced_run(sim::release_2_28, "zero_ring", 0x7a, "RING", 20);
  INFO(text.substr(0, 3000));
  CHECK(value_or_zero(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""})) == 0);
  CHECK(std::isnan(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""})));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"enqueue_only\""}) == 20);
  CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
}

// ---- copy-engine collectives ----------------------------------------------------------------------

TEST_CASE("2.30 2.31.2 copy-engine collective - events bracket the host enqueue only - ce_coll.cc ncclLaunchCeColl",
          "[conformance][ce]") {
  for (const auto* rel : {&sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("ce", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x67, "ce"));
      for (int i = 0; i < 10; ++i)
        c.enqueue(sim::op_desc{.kind = sim::op_kind::ce_coll,
                               .func = sim::nccl_func::all_gather,
                               .dtype = sim::nccl_dtype::int8,
                               .count = 4u << 20});
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    // Enqueue time is not transfer time: no bandwidth, no busy seconds from it; counted by how it was timed.
    CHECK(std::isnan(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllGather\""})));
    CHECK(total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllGather\""}) == 0);
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"enqueue_only\""}) == 10);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// ---- KernelCh timestamps of the wrong work --------------------------------------------------------

TEST_CASE("2.31.2 Broadcast counter drift - KernelCh end before begin - device/common.h profiler counters",
          "[conformance][drift]") {
  const auto& rel = sim::release_2_31_2;
  const std::string text = run("drift", [&](const std::string&) {
    job j(rel);
    sim::comm_driver c(j.lib, comm_cfg(rel, 0x68, "drift"));
    std::uint64_t t = t0;
    const auto first = c.enqueue(all_reduce(8u << 20, 4, 0));
    c.complete(first, span(t, 300 * us, 4));
    sim::op_desc b;
    b.func = sim::nccl_func::broadcast;
    b.dtype = sim::nccl_dtype::int8;
    b.count = 4096;
    c.enqueue(b);  // no Coll event (NCCL_ALLGATHERV_ENABLE), but the device counter moves
    for (int i = 0; i < 10; ++i) {
      t += 1000 * us;
      const auto p = c.enqueue(all_reduce(8u << 20, 4, 0));
      if (!p.drifted) return 3;
      c.complete(p, span(t, 300 * us, 4));  // sent: own start, the previous work's end
    }
    c.finalize();
    return 0;
  });
  INFO(text.substr(0, 3000));
  CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 1);  // the op before the drift
  CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
        Approx(ar_busbw(8u << 20, 4, 300 * us)).epsilon(0.01));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"rejected_timestamps\""}) == 10);
  CHECK(total(text, "ncclinsp_inflight_ops") == 0);
}

TEST_CASE("2.31.2 one KernelCh in ten ends before it begins - the op is not GPU-timed - device/common.h profiler",
          "[conformance][drift]") {
  const auto& rel = sim::release_2_31_2;
  const std::string text = run("drift10", [&](const std::string&) {
    job j(rel);
    sim::comm_driver c(j.lib, comm_cfg(rel, 0x69, "drift10"));
    for (int i = 0; i < 100; ++i) {
      const std::uint64_t t = t0 + std::uint64_t(i) * 1000 * us;
      auto ch = span(t, 400 * us, 4);
      if (i % 10 == 3) ch[2] = {t + 100, t - 5'000'000'000ull};  // seconds of drift, end before begin
      const auto p = c.enqueue(all_reduce(8u << 20, 4, 0));
      c.complete(p, ch);
    }
    c.finalize();
    return 0;
  });
  INFO(text.substr(0, 3000));
  CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 90);
  CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
        Approx(ar_busbw(8u << 20, 4, 400 * us)).epsilon(0.01));
  CHECK(total(text, "ncclinsp_bus_bytes_total", {"collective=\"AllReduce\""}) /
            total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) / 1e9 ==
        Approx(ar_busbw(8u << 20, 4, 400 * us)).epsilon(0.01));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"rejected_timestamps\""}) == 10);
}

TEST_CASE(
    "2.27 2.28 2.30 KernelCh stop on a stale kernelEventHandle - counted once - transport/profiler.cc "
    "profilerProxyProgress",
    "[conformance][stale]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("stale", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x6a, "stale"));
      // Op A on channels 0..1: channel 0 ends; a later op B got no KernelCh start on channel 0 and its
      // stop names A's channel-0 handle (never reset); then A's channel 1 ends.
      auto a = c.enqueue(all_reduce(8u << 20, 2, 0));
      sim::pending_op a0 = a;
      a0.n_channels = 1;
      c.complete(a0, t0, t0 + 300 * us);
      const auto b = c.enqueue(all_reduce(8u << 20, 1, 0));
      c.stale_kernel_ch_stop(b, t0 + 5000 * us);
      sim::pending_op a1 = a;
      a1.channel_lo = 1;
      a1.n_channels = 1;
      c.complete(a1, t0 + 100, t0 + 310 * us);
      c.complete(b, t0 + 6000 * us, t0 + 6300 * us);
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 2);
    // A: 310 us, B: 300 us; never A closed by the stale stop at 5000 us.
    CHECK(total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) == Approx(610e-6).epsilon(0.01));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// ---- proxy steps -----------------------------------------------------------------------------------

TEST_CASE(
    "2.28 2.30 2.31.2 recv ProxyStep re-started on every pass - its slot is reused - transport/net.cc "
    "recvProxyProgress",
    "[conformance][proxy]") {
  for (const auto* rel : {&sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("restart",
                                 [rel](const std::string&) {
                                   job j(*rel);
                                   auto cfg = comm_cfg(*rel, 0x6b, "restart", 2, 2, 0);
                                   cfg.recv_step_restarts = 3;
                                   sim::comm_driver c(j.lib, cfg);
                                   for (int i = 0; i < 400; ++i) {
                                     const auto p = c.enqueue(all_reduce(8u << 20, 2, 0));
                                     c.complete(p, span(t0 + std::uint64_t(i) * 1000 * us, 300 * us, 2));
                                   }
                                   c.finalize();
                                   return 0;
                                 },
                                 {{"NCCLINSP_PROXY", "1"}, {"NCCLINSP_PROXY_SAMPLE", "1"}});
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_dropped_events_total", {"reason=\"table_full\""}) == 0);
    // 400 ops x 2 channels x 2 steps, each direction.
    CHECK(total(text, "ncclinsp_proxy_steps_total", {"direction=\"recv\""}) == 1600);
    CHECK(total(text, "ncclinsp_proxy_steps_total", {"direction=\"send\""}) == 1600);
  }
}

TEST_CASE("2.28 2.31.2 CollNet ProxyOps are started and never stopped - bounded - proxy.cc ncclProxyOpToArgs",
          "[conformance][proxy]") {
  for (const auto* rel : {&sim::release_2_28, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("unstopped",
                                 [rel](const std::string&) {
                                   job j(*rel);
                                   sim::comm_driver c(j.lib, comm_cfg(*rel, 0x6c, "unstopped", 2, 2, 0));
                                   sim::op_desc d = all_reduce(8u << 20, 2, 0);
                                   d.collnet = true;
                                   d.algo = "COLLNET_CHAIN";
                                   for (int i = 0; i < 2000; ++i) {
                                     const auto p = c.enqueue(d);
                                     c.complete(p, span(t0 + std::uint64_t(i) * 1000 * us, 300 * us, 2));
                                   }
                                   c.finalize();
                                   return 0;
                                 },
                                 {{"NCCLINSP_PROXY", "1"}, {"NCCLINSP_PROXY_SAMPLE", "1"}});
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_dropped_events_total", {"reason=\"table_full\""}) == 0);
    CHECK(total(text, "ncclinsp_proxy_steps_total") == 2000 * 2 * 2 * 2);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// ---- threads ---------------------------------------------------------------------------------------

TEST_CASE(
    "2.28 2.31.2 Coll events from three threads at once - user, CUDA host-callback, async group thread - "
    "group.cc groupLaunchNonBlocking",
    "[conformance][threads]") {
  for (const auto* rel : {&sim::release_2_28, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("threads", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x6d, "threads"));
      sim::captured_graph g;
      const sim::op_desc small = all_reduce(1u << 20, 1, 0);
      c.capture(std::span<const sim::op_desc>(&small, 1), g);
      // Each thread enqueues its ops on its own channel range, 100 per round (within the op pool); the
      // communicator's one proxy thread (this one) then completes them in order.
      constexpr int per = 100;
      for (int round = 0; round < 3; ++round) {
        std::vector<sim::pending_op> out[3];
        std::thread user([&] {
          for (int i = 0; i < per; ++i) out[0].push_back(c.enqueue(all_reduce(2u << 20, 1, 1)));
        });
        std::thread host_cb([&] {  // graph replays (cudaLaunchHostFunc thread)
          for (int i = 0; i < per; ++i) {
            sim::pending_op p;
            c.replay(g, std::span<sim::pending_op>(&p, 1));
            p.stale_timestamps = false;  // this case is about threads, not the counter desync
            out[1].push_back(p);
          }
        });
        std::thread async([&] {  // a non-blocking communicator's ncclGroupEnd
          for (int i = 0; i < per; ++i) out[2].push_back(c.enqueue(all_reduce(4u << 20, 1, 2)));
        });
        user.join();
        host_cb.join();
        async.join();
        std::uint64_t t = t0 + std::uint64_t(round) * 1'000'000'000ull;
        for (int i = 0; i < per; ++i)
          for (auto& v : out) {
            t += 100 * us;
            c.complete(v[std::size_t(i)], t, t + 50 * us);
          }
      }
      c.finalize();
      return 0;
    });
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 900);
    CHECK(total(text, "ncclinsp_dropped_events_total") == 0);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// ---- teardown --------------------------------------------------------------------------------------

TEST_CASE(
    "2.28 2.30 2.31.2 abort leaves events open - proxy.cc ncclProxyProgressDestroy abortFlag and "
    "profilerPurgeByContext",
    "[conformance][teardown]") {
  for (const auto* rel : {&sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("abort", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x6e, "abort"));
      const auto done = c.enqueue(all_reduce(8u << 20, 2, 0));
      c.complete(done, span(t0, 300 * us, 2));
      for (int i = 0; i < 3; ++i) {  // in flight at ncclCommAbort: KernelCh started, never stopped
        const auto p = c.enqueue(all_reduce(8u << 20, 2, 0));
        c.start_only(p, t0 + 1000 * us);
      }
      c.enqueue(all_reduce(8u << 20, 2, 0));  // enqueued, never started
      c.finalize();                           // 2.31.2: profilerPurgeByContext first; the plugin sees the same
      return 0;
    });
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 1);
    CHECK(total(text, "ncclinsp_abandoned_ops_total") == 4);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(sample(text, "ncclinsp_info", {"final=\"1\""}) == 1);
  }
}

TEST_CASE(
    "2.28 events after finalize on communicators sharing a proxy - ignored - proxy.cc "
    "ncclProxyProgressDestroy",
    "[conformance][teardown]") {
  const auto& rel = sim::release_2_28;
  const std::string text = run("after", [&](const std::string&) {
    job j(rel);
    sim::comm_driver a(j.lib, comm_cfg(rel, 0x6f, "parent"));
    sim::comm_driver b(j.lib, comm_cfg(rel, 0x70, "child"));  // shareResources: one proxy thread
    const auto pa = a.enqueue(all_reduce(8u << 20, 2, 0));
    a.finalize();
    const auto t = span(t0, 300 * us, 2);
    a.complete_after_finalize(pa, t);  // the shared proxy thread still progresses it
    const auto pb = b.enqueue(all_reduce(8u << 20, 2, 0));
    b.complete(pb, t);
    b.finalize();
    return 0;
  });
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"child\""}) == 1);
  CHECK(value_or_zero(sample(text, "ncclinsp_ops_total", {"comm_name=\"parent\""})) == 0);
  CHECK(sample(text, "ncclinsp_abandoned_ops_total", {"comm_name=\"parent\""}) == 1);
  CHECK(total(text, "ncclinsp_inflight_ops") == 0);
}

TEST_CASE(
    "2.30 2.31.2 an init error never unloads the plugin under live communicators - plugin/profiler.cc "
    "ncclProfilerPluginInit",
    "[conformance][teardown]") {
  for (const auto* rel : {&sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    // More communicators than the plugin's table holds (4096): the one past it must not fail init.
    const std::string text = run("initerr",
                                 [rel](const std::string&) {
                                   job j(*rel);
                                   std::vector<std::unique_ptr<sim::comm_driver>> comms;
                                   for (int i = 0; i < 4097; ++i)
                                     comms.push_back(std::make_unique<sim::comm_driver>(
                                         j.lib, comm_cfg(*rel, 0x1000 + std::uint64_t(i), i == 0 ? "first" : "many")));
                                   for (const auto& c : comms)
                                     if (c->init_result() != ncclinsp::abi::success) return 3;
                                   const auto p = comms[0]->enqueue(all_reduce(8u << 20, 2, 0));
                                   comms[0]->complete(p, span(t0, 300 * us, 2));
                                   for (auto& c : comms) c->finalize();
                                   return 0;
                                 },
                                 {{"NCCL_INSPECTOR_COLL_POOL_SIZE", "4"}, {"NCCL_INSPECTOR_P2P_POOL_SIZE", "4"}});
    CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"first\""}) == 1);
    CHECK(sample(text, "ncclinsp_info", {"final=\"1\""}) == 1);
    CHECK(total(text, "ncclinsp_dropped_events_total", {"reason=\"comm_table_full\""}) == 1);
  }
}

// ---- masks -----------------------------------------------------------------------------------------

TEST_CASE(
    "2.31.2 RAS mask override with Coll and without KernelCh - no false hang - plugin/profiler.cc "
    "ncclProfilerSetRasOverride",
    "[conformance][mask]") {
  const auto& rel = sim::release_2_31_2;
  const std::string dir = fresh_dir("conf_ras");
  REQUIRE(in_child(env_for(dir), [&] {
            job j(rel);
            auto cfg = comm_cfg(rel, 0x71, "ras");
            cfg.mask_override = int(ev_group | ev_coll);
            sim::comm_driver c(j.lib, cfg);
            if (c.mask() & ev_kernel_ch) return 3;
            for (int i = 0; i < 8; ++i) {
              const auto p = c.enqueue(all_reduce(8u << 20, 2, 0));
              c.complete(p, span(t0, 300 * us, 2));  // gated by the mask: no KernelCh
            }
            const bool settled = eventually(dir, [](const std::string& t) {
              return total(t, "ncclinsp_inflight_ops") == 0 && total(t, "ncclinsp_filtered_ops_total") >= 8;
            });
            c.finalize();
            return settled ? 0 : 4;
          }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == 8);
  CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
}

// ---- channel ids -----------------------------------------------------------------------------------

TEST_CASE("2.28 P2P channel ids that wrap around - ncclP2pChannelForPart", "[conformance][p2p]") {
  const auto& rel = sim::release_2_28;
  const std::string text = run("wrap", [&](const std::string&) {
    job j(rel);
    sim::comm_driver c(j.lib, comm_cfg(rel, 0x72, "wrap", 2, 2, 0));
    sim::op_desc s{.kind = sim::op_kind::p2p,
                   .func = sim::nccl_func::send,
                   .dtype = sim::nccl_dtype::int8,
                   .count = 8u << 20,
                   .peer = 1,
                   .n_channels = 4,
                   .channel_lo = 62};
    auto p = c.enqueue(s);
    // (base + part) & (n - 1) with 64 P2P channels: 62, 63, 0, 1.
    sim::pending_op hi = p, lo = p;
    hi.n_channels = 2;
    lo.channel_lo = 0;
    lo.n_channels = 2;
    c.complete(hi, span(t0, 100 * us, 2));
    c.complete(lo, span(t0 + 50, 100 * us, 2));
    c.finalize();
    return 0;
  });
  CHECK(sample(text, "ncclinsp_ops_total", {"collective=\"Send\""}) == 1);
  CHECK(sample(text, "nccl_p2p_exec_time_microseconds", {"p2p_operation=\"Send\""}) == Approx(100.0).epsilon(0.01));
}

// ---- The 64-slot device work ring ---------------------------------------------------------------------

// The reader stalls while 64 works run and the 65th starts: the first op's KernelCh start reads its
// workStarted slot, now the 65th work's start, and its stop its own end (the 65th has not ended): end
// before begin, rejected. (A work whose both slots were overwritten carries another work's start and end,
// indistinguishable from its own in the events: sim/README.md "The device work ring".)
TEST_CASE(
    "2.27 2.28 2.30 2.31.2 device work ring overrun - a reader 64 works behind reads a later work's start - "
    "device.h ncclDevProfiler, profilerProxyProgress / profilerProgressOps",
    "[conformance][ring]") {
  for (const auto& rel : sim::releases) {
    INFO("release " << rel.name);
    constexpr int healthy = 20, behind = 65;
    constexpr std::size_t bytes = 8u << 20;
    // Kernel k runs for 200 + (k % 7) x 50 us: a later work's times give another bandwidth.
    const auto len = [](int k) { return (200 + std::uint64_t(k % 7) * 50) * us; };
    const std::string text = run(std::string("ring_") + rel.name, [&](const std::string&) {
      job j(rel);
      sim::comm_driver c(j.lib, comm_cfg(rel, 0x6A, "ring"));
      std::uint64_t t = t0;
      for (int k = 0; k < healthy; ++k, t += 1000 * us) {  // a reader that keeps up
        const auto p = c.enqueue(all_reduce(bytes, 4, 0));
        c.device_run(p, span(t, len(k), 4));
        if (!c.read_back(p)) return 3;
      }
      std::vector<sim::pending_op> ops;
      for (int k = 0; k < behind; ++k, t += 1000 * us) {  // the reader stalls: 64 works run, the 65th starts
        ops.push_back(c.enqueue(all_reduce(bytes, 4, 0)));
        c.device_run(ops.back(), span(t, len(healthy + k), 4), k + 1 < behind);
      }
      if (c.read_back(ops.back())) return 4;  // the 65th has not ended: nothing to read yet
      for (int k = 0; k + 1 < behind; ++k)
        if (!c.read_back(ops[std::size_t(k)])) return 5;
      c.device_run(ops.back(), span(t - 1000 * us, len(healthy + behind - 1), 4));  // the 65th ends
      if (!c.read_back(ops.back())) return 6;
      c.finalize();
      return 0;
    });
    // Published with their own times: every op but the first stalled one.
    double truth_bytes = 0, truth_s = 0;
    for (int k = 0; k < healthy + behind; ++k) {
      if (k == healthy) continue;
      truth_bytes += ncclinsp::bus_bytes(ncclinsp::func::all_reduce, bytes, 4);
      truth_s += double(len(k)) / 1e9;
    }
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == healthy + behind - 1);
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"rejected_timestamps\""}) == 1);
    CHECK(total(text, "ncclinsp_bus_bytes_total", {"collective=\"AllReduce\""}) /
              total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
          Approx(truth_bytes / truth_s).epsilon(0.02));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// Grouped same-function ops on one channel run in one work batch and share its start and stop: each is
// published with the batch's span (docs/nccl-versions.md: an upper bound of its own time), never a
// shorter one, and every op is counted.
TEST_CASE(
    "2.27 2.28 2.30 2.31.2 batch-shared timestamps - grouped AllReduce ops on one channel share the batch's "
    "start and stop - device/common.h profiler",
    "[conformance][batch]") {
  for (const auto& rel : sim::releases) {
    INFO("release " << rel.name);
    constexpr int groups = 10;
    constexpr std::size_t bytes = 4u << 20;
    constexpr std::uint64_t batch = 600 * us;  // two works of about 300 us each, run as one batch
    const std::string text = run(std::string("batch_") + rel.name, [&](const std::string&) {
      job j(rel);
      sim::comm_driver c(j.lib, comm_cfg(rel, 0x6B, "batch"));
      const sim::op_desc d[2] = {all_reduce(bytes, 1, 0), all_reduce(bytes, 1, 0)};
      for (int g = 0; g < groups; ++g) {
        sim::pending_op p[2];
        c.enqueue(std::span<const sim::op_desc>(d, 2), std::span<sim::pending_op>(p, 2));
        const auto t = span(t0 + std::uint64_t(g) * 1000 * us, batch, 1);
        c.device_run_batch(std::span<const sim::pending_op>(p, 2), t);
        for (const auto& op : p)
          if (!c.read_back(op)) return 3;
      }
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 2 * groups);
    CHECK(total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
          Approx(2.0 * groups * double(batch) / 1e9).epsilon(0.001));
    CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
          Approx(ar_busbw(bytes, 4, batch)).epsilon(0.01));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}

// ---- Send/Recv to the rank itself (real 2.28.9 trace tests/traces/nccl-2.28.9-h200-onerank-cases.trace) --

namespace {

sim::op_desc p2p(sim::nccl_func f, int peer, std::size_t bytes, std::uint8_t channels) {
  sim::op_desc d;
  d.kind = sim::op_kind::p2p;
  d.func = f;
  d.dtype = sim::nccl_dtype::float32;
  d.count = bytes / 4;
  d.peer = peer;
  d.n_channels = channels;
  d.send_buff = reinterpret_cast<const void*>(0x1000);  // out of place: NCCL drops an in-place self pair
  d.recv_buff = reinterpret_cast<void*>(0x2000);
  return d;
}

}  // namespace

TEST_CASE(
    "2.27 2.28 2.30 2.31.2 all-to-all with the rank itself - the self pair settles at its stop, no KernelCh "
    "awaited - enqueue.cc addP2pToPlan",
    "[conformance][p2p]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    // 200 iterations of one group {Send, Recv to itself (channels 0..1); Send, Recv to the peer (the
    // driver's peer channels, 3..4)}, then an AllReduce on channels 0..3, where the self pairs ran.
    const std::string text = run("alltoall", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x71, "moe", 1, 2, 0));
      std::uint64_t t = t0;
      for (int i = 0; i < 200; ++i) {
        const sim::op_desc g[] = {p2p(sim::nccl_func::send, 0, 8u << 20, 2), p2p(sim::nccl_func::recv, 0, 8u << 20, 2),
                                  p2p(sim::nccl_func::send, 1, 8u << 20, 2), p2p(sim::nccl_func::recv, 1, 8u << 20, 2)};
        sim::pending_op p[4];
        c.enqueue(g, p, 0);
        if (!p[0].self_p2p || !p[1].self_p2p || p[2].self_p2p) return 3;
        // The self pair: no KernelCh up to 2.31.0a; 2.31.2 posts them after the P2p stop (ignored).
        for (auto& q : p) c.complete(q, span(t, 100 * us, 2));
        t += 1000 * us;
      }
      const auto ar = c.enqueue(all_reduce(4u << 20, 4, 0));
      c.complete(ar, span(t, 200 * us, 4));
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == 400);
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"Send\""}) == 200);
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"Recv\""}) == 200);
    // Up to 2.31.0a the device counts the self work on channels 0..1 and the host does not: the
    // AllReduce's KernelCh there read an earlier work's slot and are never published; 2.31.2 counts it.
    const bool shifted = rel->abi <= 6;
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"foreign_timestamps\""}) == (shifted ? 1 : 0));
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == (shifted ? 0 : 1));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
    CHECK(total(text, "ncclinsp_dropped_events_total") == 0);
  }
}

TEST_CASE(
    "2.27 2.28 2.30 2.31.2 a garbage GPU timer - a KernelCh stop 584 years after its start - "
    "device/common.h profiler()",
    "[conformance][timer]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    // 100 AllReduce of 4 MiB, 200 us each; every 10th has a stop value near 2^64 on one channel.
    const std::string text = run("timer", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x72, "timer"));
      std::uint64_t t = t0;
      for (int i = 0; i < 100; ++i) {
        const auto p = c.enqueue(all_reduce(4u << 20, 4, 0));
        auto k = span(t, 200 * us, 4);
        if (i % 10 == 3) k[2].stop_ns = ~std::uint64_t(0) - 12345;
        c.complete(p, k);
        t += 1000 * us;
      }
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"rejected_timestamps\""}) == 10);
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 90);
    CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
          Approx(ar_busbw(4u << 20, 4, 200 * us)).epsilon(0.01));
    CHECK(total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
          Approx(90 * 200e-6).epsilon(0.02));
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
  }
}
