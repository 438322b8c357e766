// Reliability: hostile input through the loaded plugin, no torn files under concurrent readers, no
// silent loss. The plugin keeps process-wide state configured from the environment at its first init,
// so every plugin scenario runs in a forked child (which dlopens the plugin); the parent checks the
// files. Under ASan each child runs LeakSanitizer itself before it exits.
// This file: communicator churn without leaks, and a full communicator table.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reliability_harness.hpp"

namespace sim = ncclinsp::sim;
namespace abi = ncclinsp::abi;
using namespace ncclinsp_test;
using namespace ncclinsp_test::reliability;
using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__)
constexpr int leak_cycles = 300;
#else
constexpr int leak_cycles = 1000;
#endif

TEST_CASE("1000 communicators created and destroyed: no leak (LeakSanitizer in the ASan build)",
          "[reliability][leak]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(in_child(base_env(dir, "prom,json"), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            for (int i = 0; i < leak_cycles; ++i) {
              sim::comm_driver c(lib, {.comm_hash = 100u + i, .name = "c" + std::to_string(i), .n_ranks = 2});
              if (c.init_result() != abi::success) return 1;
              one_op(c);
              if (i % 3 == 0) {  // and some with an op still in flight at finalize
                const auto p = c.enqueue(
                    sim::op_desc{.func = sim::nccl_func::all_gather, .dtype = sim::nccl_dtype::int8, .count = 1 << 20});
                c.start_only(p, t0);
              }
            }
            return 0;  // in_child runs LSan here under ASan (97 = leaks)
          }) == 0);
  CHECK(files_in(dir, ".prom").size() == 1);
}

TEST_CASE("4096 live communicators: the next one runs without ncclinsp and is counted as comm_table_full",
          "[reliability][limits]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_COLL_POOL_SIZE"] = "10";  // small pools: 4096 communicators in little memory
  env["NCCL_INSPECTOR_ENABLE_P2P"] = "0";
  constexpr int limit = 4096;
  REQUIRE(
      in_child(env, [] {
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
        set_device(0);
        const auto* t = lib.table<abi::newest>();
        std::vector<void*> ctx(limit + 1, nullptr);
        int mask = 0;
        for (int i = 0; i < limit; ++i) {
          std::string name = "c";  // not "c" + std::to_string(i): GCC 12 -O3 reports a false -Wrestrict in operator+
          name += std::to_string(i);
          if (t->init(&ctx[i], 1000u + i, &mask, name.c_str(), 1, 2, 0, capture_logger) != abi::success || !ctx[i]) {
            std::fprintf(stderr, "communicator %d refused\n", i);
            return 1;
          }
        }
        // One more while all 4096 are live: success without a context (an error would make NCCL
        // 2.30.3+ unload the library under the 4096 others), one warning, and the drop counted.
        if (t->init(&ctx[limit], 99, &mask, "one_too_many", 1, 2, 0, capture_logger) != abi::success || ctx[limit])
          return 2;
        if (warnings_containing("communicator table full") != 1) return 3;
        // A finalized communicator's slot is taken over by the next one (the longest-retired).
        t->finalize(ctx[7]);
        void* again = nullptr;
        if (t->init(&again, 98, &mask, "after_one_left", 1, 2, 0, capture_logger) != abi::success || !again) return 4;
        for (int i = 0; i < limit; ++i)
          if (i != 7) t->finalize(ctx[i]);
        t->finalize(again);
        return 0;
      }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  CHECK(sample(text, "ncclinsp_dropped_events_total", {"reason=\"comm_table_full\""}) == 1);
  CHECK(text.find("comm_name=\"one_too_many\"") == std::string::npos);
  CHECK(text.find("comm_name=\"after_one_left\"") != std::string::npos);
}
