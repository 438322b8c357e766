// Conformance with real NCCL, release by release: each case drives the built plugin .so through the
// simulator's driver with one release profile (sim/nccl_release.hpp) reproducing one behaviour of that
// release's NCCL (the NCCL function is in the case's name), then checks what the plugin exports: the
// final .prom file's families and counters, the in-flight and hang signals while the job runs.
// Rule checked: never publish a wrong number as GPU-timed, never raise a false hang, never lose count.
// Each scenario runs in a forked child (the plugin's state is process-wide); the parent reads the files.
// This file: GPU timestamps that belong to another work or are wrong (KernelCh of the wrong work,
// the device work ring overrun, batch-shared timestamps, a garbage timer).
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "conformance_harness.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;
using namespace ncclinsp_test::conformance;
using ncclinsp::abi::ev_coll;
using ncclinsp::abi::ev_group;
using ncclinsp::abi::ev_kernel_ch;

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
