// The embedded API (inspector.hpp): recording, in-flight accounting, slot reuse, concurrency and
// the environment mapping, bounded shutdown, sinks, and comm_hash_of_unique_id.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/inspector.hpp"
#include "ncclinsp/runtime_options.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"
#include "ncclinsp/sinks/json_sink.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "snapshot_capture.hpp"

using namespace ncclinsp;
using namespace ncclinsp_test;

TEST_CASE("inspector: records ops into a .prom file with the plugin's schema", "[embedded]") {
  const std::string dir = fresh_dir("embedded");
  process_identity id;
  id.node = "nodeE";
  id.slurm_job_id = "5";
  id.labels = {{"team", "x"}};
  {
    inspector insp({.sinks = make_sinks(prom_textfile_sink({.dir = dir})),
                    .interval = std::chrono::milliseconds(0),
                    .collector = {.identity = id}});
    const comm_handle h = insp.add_comm(
        {.name = "tp", .hash = 0x1234, .rank = 2, .nranks = 8, .nnodes = 1, .device = 1, .uuid = "GPU-abc"});
    REQUIRE(h != no_index);
    op_record op = make_op(func::all_reduce, 1 << 20, dtype::bfloat16, 1'000, 101'000);  // 2 MiB in 100 us
    op.alg = algo::ring;
    op.pro = proto::ll128;
    op.seq = 41;
    insp.record(h, op);
    insp.record(h, make_op(func::send, 4 << 20, dtype::int8, 0, 50'000));
  }  // destruction: the final export (its window holds both ops, for the Inspector gauges)
  const std::string text = slurp(dir + "/nccl_inspector_metrics_GPU-abc.job-5.prom");
  INFO(text.substr(0, 3000));
  CHECK(sample(text, "ncclinsp_ops_total",
               {"node=\"nodeE\"", "gpu=\"GPU1\"", "uuid=\"GPU-abc\"", "comm_name=\"tp\"",
                "comm_hash=\"0000000000001234\"", "rank=\"2\"", "nranks=\"8\"", "collective=\"AllReduce\"",
                "message_size=\"2MiB-4MiB\"", "algo_proto=\"RING_LL128\"", "team=\"x\""}) == 1);
  CHECK(sample(text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) == Approx(100e-6));
  CHECK(sample(text, "nccl_bus_bandwidth_gbs", {"collective=\"AllReduce\"", "slurm_job_id=\"5\""}) ==
        Approx(busbw_gbs(func::all_reduce, 2u << 20, 8, 100'000)));
  CHECK(sample(text, "nccl_p2p_exec_time_microseconds", {"p2p_operation=\"Send\""}) == Approx(50.0));
  CHECK(sample(text, "ncclinsp_last_completed_seq", {"collective=\"AllReduce\""}) == 41);
  CHECK(sample(text, "ncclinsp_info", {"abi=\"embedded\"", "final=\"1\""}) == 1);
}

TEST_CASE("inspector: begin/end in-flight accounting gives the hang signal, cancel and filters", "[embedded]") {
  capture cap;
  inspector insp({.sinks = make_sinks(cap.sink()),
                  .interval = std::chrono::milliseconds(0),
                  .min_size_bytes = 1024,
                  .inflight_pool = 2,
                  .collector = {.retired_retention = std::chrono::milliseconds(0)}});
  const comm_handle h = insp.add_comm({.name = "dp", .hash = 1, .nranks = 2, .device = 0, .uuid = "GPU-0"});
  auto a = insp.begin(h, func::all_reduce, 1 << 20);
  auto b = insp.begin(h, func::all_reduce, 1 << 20);
  auto c = insp.begin(h, func::all_reduce, 1 << 20);  // pool of 2: counted, no age, drop counted
  CHECK(c.slot == no_index);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"dp\""}) == 3);
  CHECK(sample(*cap.text, "ncclinsp_oldest_inflight_age_seconds", {"comm_name=\"dp\""}) >= 0.025);
  CHECK(sample(*cap.text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""}) == 1);

  insp.end(a, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));
  insp.end(
      a, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));  // twice: ignored, the slot is not freed twice
  insp.cancel(b);
  insp.end(c, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));
  auto small = insp.begin(h, func::all_reduce, 16);  // below min size: not counted
  CHECK(!small.counted);
  insp.end(small, make_op(func::all_reduce, 4, dtype::float32, 0, 10'000));
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"dp\""}) == 0);
  CHECK(sample(*cap.text, "ncclinsp_oldest_inflight_age_seconds", {"comm_name=\"dp\""}) == 0);
  CHECK(sample(*cap.text, "ncclinsp_filtered_ops_total", {"reason=\"no_gpu_timing\""}) == 1);
  CHECK(sample(*cap.text, "ncclinsp_filtered_ops_total", {"reason=\"min_size\""}) == 1);
  CHECK(sample(*cap.text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 2);  // a and c, a once

  auto left = insp.begin(h, func::all_reduce, 1 << 20);  // never ends: abandoned at removal
  CHECK(left.counted);
  insp.remove_comm(h);
  REQUIRE(insp.flush());  // retention 0: exported once more, then gone
  CHECK(sample(*cap.text, "ncclinsp_abandoned_ops_total", {"comm_name=\"dp\""}) == 1);
  REQUIRE(insp.flush());
  CHECK(cap.text->find("comm_name=\"dp\"") == std::string::npos);

  // The next communicator reuses the slot and its in-flight table, emptied: both pool entries free.
  const comm_handle h2 = insp.add_comm({.name = "dp2", .hash = 2, .nranks = 2, .device = 0, .uuid = "GPU-0"});
  CHECK(h2 == h);
  auto n1 = insp.begin(h2, func::all_reduce, 1 << 20);
  auto n2 = insp.begin(h2, func::all_reduce, 1 << 20);
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"dp2\""}) == 2);
  // Per-GPU counters never go backwards: dp's one pool drop is still counted, dp2 added none.
  CHECK(sample(*cap.text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""}) == 1);
  CHECK(sample(*cap.text, "ncclinsp_filtered_ops_total", {"reason=\"min_size\""}) == 1);
  insp.end(n1, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));
  insp.end(n2, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));
  insp.end(left, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 10'000));  // dp's, too late: ignored
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_ops_total", {"comm_name=\"dp2\"", "collective=\"AllReduce\""}) == 2);
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"dp2\""}) == 0);
}

TEST_CASE("inspector: more communicator lifetimes than slots reuse slots and in-flight tables (no leak under LSan)",
          "[embedded]") {
  capture cap;
  inspector insp({.sinks = make_sinks(cap.sink()), .interval = std::chrono::milliseconds(0), .inflight_pool = 4});
  // Default retention (120 s): once the 4096 slots are taken, the longest-removed one is taken over.
  constexpr int lifetimes = static_cast<int>(default_traits::max_comms) + 500;
  std::set<comm_handle> handles;
  for (int i = 0; i < lifetimes; ++i) {
    const comm_handle h = insp.add_comm(
        {.name = "life" + std::to_string(i), .hash = static_cast<std::uint64_t>(i), .nranks = 2, .uuid = "GPU-0"});
    REQUIRE(h != no_index);
    handles.insert(h);
    auto t = insp.begin(h, func::all_reduce, 1 << 20);
    if (i % 2) insp.end(t, make_op(func::all_reduce, 1 << 20, dtype::float32, 0, 10'000));  // else: abandoned
    insp.remove_comm(h);
  }
  CHECK(handles.size() == default_traits::max_comms);
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_dropped_events_total", {"reason=\"comm_table_full\""}) == 0);
  CHECK(
      std::isnan(sample(*cap.text, "ncclinsp_abandoned_ops_total", {"comm_name=\"life0\""})));  // slot taken over: gone
  CHECK(sample(*cap.text, "ncclinsp_abandoned_ops_total",
               {"comm_name=\"life" + std::to_string(lifetimes - 2) + "\""}) == 1);
  CHECK(sample(*cap.text, "ncclinsp_ops_total", {"comm_name=\"life" + std::to_string(lifetimes - 1) + "\""}) == 1);
}

TEST_CASE("inspector: concurrent recording threads, disabled inspector, from_env mapping", "[embedded]") {
  capture cap;
  {
    inspector insp({.sinks = make_sinks(cap.sink()), .interval = std::chrono::milliseconds(5)});
    const comm_handle h = insp.add_comm({.name = "x", .hash = 9, .nranks = 4, .device = 0, .uuid = "GPU-0"});
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&] {
        for (int i = 0; i < 5000; ++i) {
          auto tok = insp.begin(h, func::all_gather, 1 << 16);
          insp.end(tok, make_op(func::all_gather, 1 << 16, dtype::int8, 0, 1000 + static_cast<unsigned>(i)));
        }
      });
    for (auto& t : ts) t.join();
  }
  CHECK(sample(*cap.text, "ncclinsp_ops_total", {"collective=\"AllGather\""}) == 20000);
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"x\""}) == 0);

  inspector off({.sinks = make_sinks(cap.sink()), .enabled = false});
  CHECK(!off.enabled());
  CHECK(off.add_comm({.name = "y"}) == no_index);
  off.record(0, make_op(func::all_reduce, 1, dtype::float32, 0, 1));  // ignored, no crash
  CHECK(!off.flush());

  std::map<std::string, std::string> env = {{"NCCL_INSPECTOR_ENABLE", "1"},
                                            {"NCCL_INSPECTOR_PROM_DUMP", "1"},
                                            {"NCCL_INSPECTOR_DUMP_DIR", "/tmp/x"},
                                            {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "2000000"},
                                            {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "0"},
                                            {"NCCLINSP_LABELS", "cluster=c1"},
                                            {"NCCLINSP_NODE_NAME", "nn"},
                                            {"SLURM_JOB_ID", "3"}};
  auto o = inspector_options::from_env({}, [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  CHECK(o.enabled);
  CHECK(o.interval == std::chrono::milliseconds(2000));
  REQUIRE(o.sinks.size() == 1);
  CHECK(o.sinks[0].name() == "prometheus-textfile");
  CHECK(o.collector.identity.node == "nn");
  CHECK(o.collector.identity.slurm_job_id == "3");
  CHECK(o.collector.identity.labels == std::vector<std::pair<std::string, std::string>>{{"cluster", "c1"}});
  CHECK(o.min_size_bytes == 0);
  env.erase("NCCL_INSPECTOR_ENABLE");
  auto o2 = inspector_options::from_env({}, [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  });
  CHECK(!o2.enabled);
  CHECK(o2.sinks.empty());
}

namespace {
/// A sink whose write() blocks until the test opens the gate (a hung filesystem or collector).
struct gate_state {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> writes{0};
  std::atomic<std::uint64_t> last_ops{0};
  std::atomic<bool> shut{false};
};
struct blocking_sink {
  std::shared_ptr<gate_state> g;
  export_result write(const snapshot& s) noexcept {
    std::unique_lock lk(g->mu);
    g->cv.wait(lk, [&] { return g->open; });
    std::uint64_t ops = 0;
    for (const auto& c : s.cells) ops += c.total.ops;
    g->last_ops = ops;
    ++g->writes;
    return export_result::success;
  }
  void shutdown() noexcept { g->shut = true; }
};
/// A sink with state the test reads back through find_sink.
struct counting_sink {
  int writes = 0;
  export_result write(const snapshot&) noexcept {
    ++writes;
    return export_result::success;
  }
};
}  // namespace

TEST_CASE("inspector: shutdown(timeout) is bounded when a sink blocks, the final export lands later", "[embedded]") {
  auto g = std::make_shared<gate_state>();
  const auto t0 = std::chrono::steady_clock::now();
  {
    inspector insp({.sinks = make_sinks(blocking_sink{g}),
                    .interval = std::chrono::milliseconds(0),
                    .shutdown_timeout = std::chrono::milliseconds(50)});
    const comm_handle h = insp.add_comm({.name = "x", .hash = 1, .nranks = 2, .device = 0, .uuid = "GPU-0"});
    for (int i = 0; i < 3; ++i) insp.record(h, make_op(func::all_reduce, 1 << 20, dtype::float32, 0, 1000));
    CHECK(!insp.shutdown(std::chrono::milliseconds(100)));  // the final write blocks
    CHECK(!insp.shutdown(std::chrono::milliseconds(100)));  // once: the first result
    CHECK(!insp.flush(std::chrono::milliseconds(10)));
    insp.record(h, make_op(func::all_reduce, 1 << 20, dtype::float32, 0, 1000));  // after shutdown: harmless
  }                                                                               // the destructor does not wait again
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(g->writes == 0);
  {
    std::lock_guard lk(g->mu);
    g->open = true;
  }
  g->cv.notify_all();
  // The detached exporter thread finishes on its own data (ASan: no use after the inspector is gone).
  for (int i = 0; i < 500 && !g->shut; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(g->shut);
  CHECK(g->writes == 1);
  CHECK(g->last_ops == 3);

  // The destructor's default is bounded too (inspector_options::shutdown_timeout).
  auto g2 = std::make_shared<gate_state>();
  const auto t1 = std::chrono::steady_clock::now();
  {
    inspector insp({.sinks = make_sinks(blocking_sink{g2}),
                    .interval = std::chrono::milliseconds(0),
                    .shutdown_timeout = std::chrono::milliseconds(100)});
  }
  const auto waited = std::chrono::steady_clock::now() - t1;
  CHECK(waited >= std::chrono::milliseconds(100));
  CHECK(waited < std::chrono::seconds(5));
  {
    std::lock_guard lk(g2->mu);
    g2->open = true;
  }
  g2->cv.notify_all();
  for (int i = 0; i < 500 && !g2->shut; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(g2->shut);

  // A sink that does not block: shutdown() reports the final export done in time.
  auto g3 = std::make_shared<gate_state>();
  g3->open = true;
  inspector ok({.sinks = make_sinks(blocking_sink{g3}), .interval = std::chrono::milliseconds(0)});
  CHECK(ok.shutdown(std::chrono::seconds(30)));
  CHECK(g3->writes == 1);
  CHECK(g3->shut);
}

TEST_CASE("inspector_options::from takes the plugin's mapping of the environment (runtime_options_from)",
          "[embedded]") {
  for (const char* p2p : {"1", "0"}) {
    const std::map<std::string, std::string> env = {{"NCCL_INSPECTOR_ENABLE", "1"},
                                                    {"NCCL_INSPECTOR_ENABLE_P2P", p2p},
                                                    {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "4096"},
                                                    {"NCCL_INSPECTOR_COLL_POOL_SIZE", "100"},
                                                    {"NCCL_INSPECTOR_P2P_POOL_SIZE", "50"},
                                                    {"NCCLINSP_USER_TAG_LABEL", "1"},
                                                    {"NCCLINSP_DETECT", "0"}};
    const getenv_fn get = [&](const char* k) -> const char* {
      auto it = env.find(k);
      return it == env.end() ? nullptr : it->second.c_str();
    };
    const env_options e = env_options::from_env({}, get);
    const runtime_options plugin = runtime_options_from(e, /*nccl_events=*/true);
    const inspector_options embedded = inspector_options::from(e, {}, get);
    INFO("NCCL_INSPECTOR_ENABLE_P2P=" << p2p);
    const bool on = std::string(p2p) == "1";
    // The plugin's values, from the one mapping.
    CHECK(plugin.filter.min_size_bytes == 4096);
    CHECK(plugin.filter.p2p == on);
    CHECK(plugin.inflight_pool == (on ? 150u : 100u));
    CHECK(plugin.collector.user_tag_label);
    CHECK_FALSE(plugin.detector.enabled);
    // The embedded inspector gets the same ones.
    CHECK(embedded.min_size_bytes == plugin.filter.min_size_bytes);
    CHECK(embedded.enable_p2p == plugin.filter.p2p);
    CHECK(embedded.inflight_pool == plugin.inflight_pool);
    CHECK(embedded.collector.user_tag_label == plugin.collector.user_tag_label);
    CHECK(embedded.detector.enabled == plugin.detector.enabled);
    // The filter itself: below the threshold is filtered, an unknown size never is, Send/Recv per the switch.
    CHECK(plugin.filter.too_small(true, 4095));
    CHECK_FALSE(plugin.filter.too_small(true, 4096));
    CHECK_FALSE(plugin.filter.too_small(false, 1));
    CHECK(plugin.filter.skips(func::send) == !on);
    CHECK_FALSE(plugin.filter.skips(func::all_reduce));
  }
}

TEST_CASE("inspector: sinks are reachable after being moved in (find_sink, any_sink::target)", "[embedded]") {
  inspector insp({.sinks = make_sinks(counting_sink{}, prom_textfile_sink({.dir = fresh_dir("find_sink")})),
                  .interval = std::chrono::milliseconds(0)});
  counting_sink* c = insp.find_sink<counting_sink>();
  REQUIRE(c != nullptr);
  CHECK(insp.find_sink<prom_textfile_sink>() != nullptr);
  CHECK(insp.find_sink<json_sink>() == nullptr);
  REQUIRE(insp.flush());
  CHECK(c->writes == 1);  // read after flush() returned
  REQUIRE(insp.flush());
  CHECK(c->writes == 2);
  CHECK(insp.find_sink<prom_textfile_sink>()->failed_exports() == 0);

  any_sink a(counting_sink{});
  CHECK(a.target<counting_sink>() != nullptr);
  CHECK(a.target<blocking_sink>() == nullptr);
  CHECK(std::as_const(a).target<counting_sink>()->writes == 0);

  inspector off({.sinks = make_sinks(counting_sink{}), .enabled = false});  // disabled: still reachable
  CHECK(off.find_sink<counting_sink>() != nullptr);
}

TEST_CASE("comm_hash_of_unique_id: NCCL's commHash of an ncclUniqueId (DJB2a over its 128 bytes)", "[embedded]") {
  struct fake_unique_id {
    char internal[128];
  };
  fake_unique_id zero{}, a{}, b{};
  for (int i = 0; i < 128; ++i) {
    a.internal[i] = static_cast<char>(i);
    b.internal[i] = static_cast<char>(255 - i);
  }
  // Reference values from an independent implementation (Python) of NCCL's getHash.
  CHECK(comm_hash_of_unique_id(zero) == 0x90116b2eaa8b6505ull);
  CHECK(comm_hash_of_unique_id(a) == 0xbf47c767cbdf3105ull);
  // Bytes above 127: NCCL XORs the char, sign-extended where char is signed (x86), not where unsigned (Arm).
  CHECK(comm_hash_of_unique_id(b) == (std::is_signed_v<char> ? 0x0ef65392009eb905ull : 0xb4bef0506d8cb105ull));
  CHECK(comm_hash_of_unique_id(a.internal, sizeof a.internal) == comm_hash_of_unique_id(a));
  fake_unique_id a2 = a;  // every rank holding the same id gets the same hash; one byte changes it
  CHECK(comm_hash_of_unique_id(a2) == comm_hash_of_unique_id(a));
  a2.internal[127] = 1;
  CHECK(comm_hash_of_unique_id(a2) != comm_hash_of_unique_id(a));
}
