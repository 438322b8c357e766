// Conformance with real NCCL, release by release: each case drives the built plugin .so through the
// simulator's driver with one release profile (sim/nccl_release.hpp) reproducing one behaviour of that
// release's NCCL (the NCCL function is in the case's name), then checks what the plugin exports: the
// final .prom file's families and counters, the in-flight and hang signals while the job runs.
// Rule checked: never publish a wrong number as GPU-timed, never raise a false hang, never lose count.
// Each scenario runs in a forked child (the plugin's state is process-wide); the parent reads the files.
// This file: how NCCL launches and announces an op (graph replay, symmetric kernels, CollNet,
// copy-engine collectives, P2P channel ids, Send/Recv to the rank itself).
#include <catch2/catch.hpp>

#include <cmath>
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

// ---- Empty collectives ------------------------------------------------------------------------------

TEST_CASE("2.27 2.28 2.30 2.31.2 zero-count collective - no event, no seqNumber, not an op - enqueue.cc taskAppend",
          "[conformance][empty]") {
  for (const auto* rel : {&sim::release_2_27, &sim::release_2_28, &sim::release_2_30, &sim::release_2_31_2}) {
    INFO("NCCL " << rel->name);
    const std::string text = run("empty", [rel](const std::string&) {
      job j(*rel);
      sim::comm_driver c(j.lib, comm_cfg(*rel, 0x7e, "empty"));
      const sim::op_desc empty = all_reduce(0, 4, 0);
      const sim::op_desc ar = all_reduce(4u << 20, 4, 0);
      for (int i = 0; i < 10; ++i) {
        (void)c.enqueue(empty);  // on its own: an API call that reaches no profiler callback
        const sim::op_desc g[] = {empty, ar};
        sim::pending_op p[2];
        c.enqueue(g, p);
        for (auto& q : p) c.complete(q, span(t0 + std::uint64_t(i) * 1000 * us, 200 * us, 4));
      }
      c.finalize();
      return 0;
    });
    INFO(text.substr(0, 3000));
    // Only the ten real AllReduce are ops, numbered 0..9 with nothing in between, GPU-timed.
    CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 10);
    CHECK(sample(text, "ncclinsp_last_completed_seq", {"collective=\"AllReduce\""}) == 9);
    CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\""}) ==
          Approx(ar_busbw(4u << 20, 4, 200 * us)).epsilon(0.01));
    CHECK(total(text, "ncclinsp_filtered_ops_total") == 0);
    CHECK(total(text, "ncclinsp_inflight_ops") == 0);
    CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
  }
}
