// Conformance with real NCCL, release by release: each case drives the built plugin .so through the
// simulator's driver with one release profile (sim/nccl_release.hpp) reproducing one behaviour of that
// release's NCCL (the NCCL function is in the case's name), then checks what the plugin exports: the
// final .prom file's families and counters, the in-flight and hang signals while the job runs.
// Rule checked: never publish a wrong number as GPU-timed, never raise a false hang, never lose count.
// Each scenario runs in a forked child (the plugin's state is process-wide); the parent reads the files.
// This file: proxy steps, callbacks from several threads, teardown and masks.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conformance_harness.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;
using namespace ncclinsp_test::conformance;
using ncclinsp::abi::ev_coll;
using ncclinsp::abi::ev_group;
using ncclinsp::abi::ev_kernel_ch;

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

// ---- KernelCh NCCL drops ---------------------------------------------------------------------------

TEST_CASE(
    "2.31.2 KernelCh dropped on an allocation failure - settled by a later plan, no false hang - "
    "plugin/profiler.cc profilerEnqueueOp",
    "[conformance][dropped]") {
  const auto& rel = sim::release_2_31_2;
  constexpr int ops = 31, channels = 2, every = 3;
  // The profiler thread allocates the KernelCh ops in order (two per op) and fails every third: an op
  // keeps its timing only when neither of its two is dropped. The last op is not dropped, so every
  // dropped op has a later plan.
  int timed = 0;
  for (int i = 0; i < ops; ++i) timed += (channels * i + 1) % every != 0 && (channels * i + 2) % every != 0;
  REQUIRE((channels * (ops - 1) + 1) % every != 0);
  REQUIRE((channels * (ops - 1) + 2) % every != 0);
  const std::string dir = fresh_dir("conf_dropped");
  REQUIRE(in_child(env_for(dir), [&] {
            job j(rel);
            auto cfg = comm_cfg(rel, 0x72, "dropped");
            cfg.drop_kernel_ch = every;
            sim::comm_driver c(j.lib, cfg);
            for (int i = 0; i < ops; ++i) {
              const auto p = c.enqueue(all_reduce(8u << 20, channels, 0));
              c.complete(p, span(t0 + std::uint64_t(i) * 1000 * us, 300 * us, channels));
            }
            // Before finalize: nothing left in flight, no in-flight age (the hang signal).
            const bool settled = eventually(dir, [&](const std::string& t) {
              return total(t, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == ops - timed &&
                     total(t, "ncclinsp_inflight_ops") == 0 && total(t, "ncclinsp_oldest_inflight_age_seconds") == 0;
            });
            c.finalize();
            return settled ? 0 : 4;
          }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  INFO(text.substr(0, 3000));
  CHECK(total(text, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == ops - timed);
  CHECK(total(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == timed);
  CHECK(total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
        Approx(timed * 300e-6).epsilon(0.01));
  CHECK(total(text, "ncclinsp_bus_bytes_total", {"collective=\"AllReduce\""}) /
            total(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) / 1e9 ==
        Approx(ar_busbw(8u << 20, 4, 300 * us)).epsilon(0.01));
  CHECK(total(text, "ncclinsp_abandoned_ops_total") == 0);
  CHECK(total(text, "ncclinsp_inflight_ops") == 0);

  // One plan of two ops on channels 0 and 1 (ncclGroupStart/End): the kernel's blocks start in any
  // order, the second op's KernelCh first. An op is settled only by a later plan, never by another op
  // of its own: with drops, exactly the ops with a dropped KernelCh are counted, the others timed.
  for (const int drop : {0, every}) {
    INFO("--drop-kernel-ch " << drop);
    constexpr int plans = 31;
    int grouped_timed = 0;  // KernelCh ops allocated second op first: 2k+1 (second), 2k+2 (first)
    for (int k = 0; k < plans; ++k)
      grouped_timed += (drop == 0 || (2 * k + 1) % drop != 0) + (drop == 0 || (2 * k + 2) % drop != 0);
    const std::string g = run("dropped_grouped", [&](const std::string&) {
      job j(rel);
      auto cfg = comm_cfg(rel, 0x73, "grouped");
      cfg.drop_kernel_ch = drop;
      sim::comm_driver c(j.lib, cfg);
      const sim::op_desc two[2] = {all_reduce(8u << 20, 1, 0), all_reduce(8u << 20, 1, 1)};
      for (int k = 0; k < plans; ++k) {
        sim::pending_op p[2];
        c.enqueue(two, p);
        const std::uint64_t t = t0 + std::uint64_t(k) * 1000 * us;
        c.complete(p[1], span(t, 300 * us, 1));
        c.complete(p[0], span(t + 10 * us, 300 * us, 1));
      }
      c.finalize();
      return 0;
    });
    INFO(g.substr(0, 3000));
    CHECK(total(g, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == grouped_timed);
    CHECK(total(g, "ncclinsp_filtered_ops_total", {"reason=\"no_kernel_events\""}) == 2 * plans - grouped_timed);
    CHECK(total(g, "ncclinsp_abandoned_ops_total") == 0);
  }
}
