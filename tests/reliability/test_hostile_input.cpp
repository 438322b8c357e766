// Reliability: hostile input through the loaded plugin, no torn files under concurrent readers, no
// silent loss. The plugin keeps process-wide state configured from the environment at its first init,
// so every plugin scenario runs in a forked child (which dlopens the plugin); the parent checks the
// files. Under ASan each child runs LeakSanitizer itself before it exits.
// This file: hostile names and strings, garbage environment values, bad handles.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "reliability_harness.hpp"

namespace sim = ncclinsp::sim;
namespace abi = ncclinsp::abi;
using namespace ncclinsp_test;
using namespace ncclinsp_test::reliability;
using namespace std::chrono_literals;

// ---- hostile input --------------------------------------------------------------------------------

TEST_CASE("hostile communicator names and strings: valid exposition and valid JSON", "[reliability][hostile]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(in_child(base_env(dir, "prom,json"), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            const std::string names[] = {"q\"uote",
                                         "back\\slash\\",
                                         "new\nline\r\n",
                                         "bad\xff\xfe utf8 \xc3\x28 \xe2\x82 \xed\xa0\x80",
                                         std::string(10240, 'n'),
                                         std::string("mix\"\\\n\xff") + std::string(10000, '\xc3'),
                                         "{}=,# \t\x01\x7f",
                                         "%s%n%x"};
            std::uint64_t h = 1;
            std::vector<std::unique_ptr<sim::comm_driver>> comms;  // all live at the final export
            for (const auto& n : names) {
              auto& c = *comms.emplace_back(
                  std::make_unique<sim::comm_driver>(lib, sim::comm_config{.comm_hash = h++, .name = n, .n_ranks = 2}));
              if (c.init_result() != abi::success) return 1;
              one_op(c);
              // Strings NCCL would never pass (it passes static names), through the same plugin.
              auto p = c.enqueue(sim::op_desc{.func = sim::nccl_func::all_gather,
                                              .dtype = sim::nccl_dtype::int8,
                                              .count = 1 << 20,
                                              .algo = "\"\\\n\xff",
                                              .proto = "x\xc3",
                                              .n_channels = 1});
              c.complete(p, t0, t0 + 5000);
            }
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  const std::string text = slurp(proms[0]);
  CHECK(prom_well_formed(text));
  CHECK(text.find("comm_name=\"q\\\"uote\"") != std::string::npos);
  CHECK(text.find("comm_name=\"new\\nline\r\\n\"") != std::string::npos);  // exposition escapes \\, \", \n only
  CHECK(promtool_findings(proms[0]).empty());
  const auto logs = files_in(dir, ".log");
  REQUIRE(logs.size() == 1);
  CHECK(json_lines_check(logs[0]) == "ok");
}

TEST_CASE("garbage in every NCCL_INSPECTOR_* / NCCLINSP_* variable: one warning each, defaults used",
          "[reliability][hostile][env]") {
  const std::string dir = fresh_dir("rel");
  // Every variable whose value is parsed (free-form strings such as the dump dir or node name
  // accept anything; the dump dir has its own tests below).
  const std::vector<std::pair<std::string, std::string>> garbage = {
      {"NCCLINSP_ENABLE", "perhaps"},
      {"NCCL_INSPECTOR_ENABLE_P2P", "\xff\xfe"},
      {"NCCL_INSPECTOR_DUMP_THREAD_ENABLE", "yes please"},
      {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1e9999"},
      {"NCCLINSP_INTERVAL", "5 parsecs"},
      {"NCCL_INSPECTOR_DUMP_VERBOSE", "2x"},
      {"NCCL_INSPECTOR_PROM_DUMP", "\"1\""},
      {"NCCL_INSPECTOR_PROM_DUMP_STATS", "-"},
      {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "-1"},
      {"NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", "99999999999999999999999"},
      {"NCCL_INSPECTOR_DUMP_P2P_RING_SIZE", "0x"},
      {"NCCL_INSPECTOR_COLL_POOL_SIZE", "3"},
      {"NCCL_INSPECTOR_P2P_POOL_SIZE", "ten"},
      {"NCCL_INSPECTOR_COMM_POOL_SIZE", " 256"},
      {"NCCL_INSPECTOR_POOL_GROW", "maybe"},
      {"NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", "1\n"},
      {"NCCL_INSPECTOR_OTEL_EXPORT", "on?"},
      {"NCCL_INSPECTOR_OTEL_VERBOSE", "\\"},
      {"NCCLINSP_SINKS", "prom,statsd"},
      {"NCCLINSP_LABELS", "rank=7,bad label"},
      {"NCCLINSP_USER_TAG_LABEL", "\t"},
      {"NCCLINSP_PROM_KEEP_FILES", "keep"},
      {"NCCLINSP_JSON_MAX_BYTES", std::string(5000, '9')},
      {"NCCLINSP_EXIT_FLUSH_MS", "2 seconds"},
      {"NCCLINSP_RETAIN_FINALIZED_S", "-5"},
      // Identity values: control characters or more than 256 bytes (detail/job_identity.hpp).
      {"NCCLINSP_NODE_NAME", "node\"\\\n\xff"},
      {"NCCLINSP_K8S_NAMESPACE", std::string(3000, '\xc3')},
      {"NCCLINSP_K8S_POD", "pod\"},{\n"},
      {"SLURM_JOB_ID", "\"\n"},
  };
  auto env = base_env(dir);
  env.erase("NCCLINSP_SINKS");
  for (const auto& [k, v] : garbage) env[k] = v;
  // Printable free-form values are taken as given (no warning) and must come out escaped.
  env["NODE_NAME"] = "node\"\\\xff";
  env["POD_NAMESPACE"] = std::string(200, '\xc3');
  env["POD_NAME"] = "pod\"},{";
  env["NCCLINSP_JOB_ID"] = "\"{job}\\";
  REQUIRE(in_child(env, [&garbage] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            void* ctx = nullptr;
            int mask = 0;
            if (lib.table<abi::newest>()->init(&ctx, 42, &mask, "env", 1, 2, 0, capture_logger) != abi::success || !ctx)
              return 1;
            for (const auto& [k, v] : garbage)
              if (warnings_containing(k + "=") != 1) {
                std::fprintf(stderr, "%s: %d warnings\n", k.c_str(), warnings_containing(k + "="));
                return 2;
              }
            if (warnings() != static_cast<int>(garbage.size())) return 3;
            // Defaults: JSON sink, 8192-byte minimum, pools of 256, teardown-only export, enabled.
            std::string banner;
            for (const auto& [l, m] : g_log)
              if (m.find("configuration") != std::string::npos) banner = m;
            for (const char* want : {"sinks=json\n", "min_size_bytes=8192\n", "pools=coll=256,p2p=256\n",
                                     "interval=teardown only\n", "require_kernel_timing=1\n"})
              if (banner.find(want) == std::string::npos) {
                std::fprintf(stderr, "banner lacks %s:\n%s\n", want, banner.c_str());
                return 4;
              }
            if (banner.find("rank=7") != std::string::npos) return 5;  // the rejected NCCLINSP_LABELS are not used
            sim::comm_driver c(lib, {.comm_hash = 43, .name = "env2", .n_ranks = 2});
            one_op(c);
            c.finalize();
            lib.table<abi::newest>()->finalize(ctx);
            return 0;
          }) == 0);
  const auto logs = files_in(dir, ".log");
  REQUIRE(logs.size() == 1);
  CHECK(json_lines_check(logs[0]) == "ok");
}

TEST_CASE("garbage NCCL_INSPECTOR_ENABLE: one warning, disabled (the default), NCCL unaffected",
          "[reliability][hostile][env]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_ENABLE"] = "\xff";
  REQUIRE(in_child(env, [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, 5);
            void* ctx = reinterpret_cast<void*>(1);
            int mask = 0;
            if (lib.table<5>()->init(&ctx, 1, &mask, "x", 1, 2, 0, capture_logger) != abi::success || ctx) return 1;
            return warnings_containing("NCCL_INSPECTOR_ENABLE=") == 1 && warnings() == 1 ? 0 : 2;
          }) == 0);
  CHECK(files_in(dir).empty());
}

TEST_CASE(
    "bad handles: NULL, unknown, already stopped, stopped twice before completion, events after finalize, finalize twice",
    "[reliability][hostile][handles]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(
      in_child(base_env(dir), [] {
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
        set_device(0);
        auto t = lib.table<abi::newest>();
        abi::state_args a{};
        for (void* h :
             {static_cast<void*>(nullptr), reinterpret_cast<void*>(0x1), reinterpret_cast<void*>(~std::uintptr_t{0}),
              reinterpret_cast<void*>(std::uintptr_t{0x40000123456789abull}),
              reinterpret_cast<void*>(std::uintptr_t{0x80000000000001ffull})}) {
          t->stopEvent(h);
          t->recordEventState(h, abi::st_kernel_ch_stop, &a);
          t->recordEventState(h, abi::st_kernel_ch_stop, nullptr);
          t->recordEventState(h, static_cast<abi::event_state>(-1), nullptr);
        }
        sim::comm_driver keeper(lib, {.comm_hash = 10, .name = "keeper", .n_ranks = 2});  // one exporter throughout
        sim::comm_driver c(lib, {.comm_hash = 11, .name = "h", .n_ranks = 2});
        // Already stopped (NCCL stops a Coll at enqueue), stopped again before its kernel completes:
        // the op must still complete once, not vanish.
        const auto p = c.enqueue(sim::op_desc{
            .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 2});
        t->stopEvent(p.task_handle);
        t->stopEvent(p.task_handle);
        c.complete(p, t0, t0 + 1000);
        t->stopEvent(p.task_handle);  // after completion
        // A channel handle stopped twice.
        const auto q = c.enqueue(sim::op_desc{
            .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 1});
        c.complete(q, t0, t0 + 1000);
        void* ctx = c.context();
        c.finalize();
        // Events after finalize, with the dead context and the dead handles.
        abi::version<abi::newest>::descr d{};
        d.type = abi::ev_coll;
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclFloat32";
        d.coll.count = 1 << 20;
        d.coll.nChannels = 1;
        void* h = reinterpret_cast<void*>(0x77);
        t->startEvent(ctx, &h, &d);
        if (h) return 1;
        d.type = abi::ev_kernel_ch;
        d.parentObj = p.task_handle;
        t->startEvent(ctx, &h, &d);
        if (h) return 2;
        t->stopEvent(p.task_handle);
        t->recordEventState(p.task_handle, abi::st_kernel_ch_stop, &a);
        t->finalize(ctx);  // finalize twice
        t->finalize(ctx);
        t->finalize(nullptr);
        // A new communicator after all that still works.
        sim::comm_driver c2(lib, {.comm_hash = 12, .name = "h2", .n_ranks = 2});
        one_op(c2);
        return 0;
      }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  INFO(text.substr(0, 2000));
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"h\""}) == 2);
  CHECK(sample(text, "ncclinsp_inflight_ops", {"comm_name=\"h\""}) == 0);
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"h2\""}) == 1);
}

// Each cycle finalizes the last communicator, so the exporter's final export runs and is joined (a
// 100 ms bound). Under ASan that join alone took ~50 of the test's ~90 s (half the cycles reach the
// bound), close to ctest's 120 s when the suite runs two at a time: 300 cycles there prove the same.
