// The embedded API (inspector.hpp) and the CUDA event timer (cuda/event_timer.hpp) driven by a
// fake CUDA API, so both run on machines without a GPU.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "ncclinsp/cuda/event_timer.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/inspector.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"
#include "ncclinsp/sinks/json_sink.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"

using namespace ncclinsp;
using namespace ncclinsp_test;

namespace {

/// Captures the text of the last snapshot for GPU "GPU-0".
struct capture {
  std::shared_ptr<std::string> text = std::make_shared<std::string>();
  std::shared_ptr<std::atomic<int>> writes = std::make_shared<std::atomic<int>>(0);
  callback_sink sink() {
    return callback_sink([t = text, w = writes](const snapshot& s) {
      std::string out;
      for (const auto& u : format::gpu_uuids(s)) format::write_prometheus(out, s, u);
      *t = out;
      ++*w;
    });
  }
};

// ---- a fake CUDA runtime: events complete when the test says the GPU got there ----------------
struct fake_gpu {
  struct ev {
    bool created = false, recorded = false;
    double t_ms = 0;
    int stream = 0;
  };
  std::mutex mu;
  std::vector<ev> events;
  double now_ms = 0;
  std::map<int, double> done_until;  // stream -> GPU time reached
  std::set<int> capturing;
  int fail_create_after = -1;
  bool fail_record = false, fail_query = false;
};

struct fake_api {
  using event_t = int;
  using stream_t = int;
  fake_gpu* gpu;
  bool create(int& e) noexcept {
    std::lock_guard lk(gpu->mu);
    if (gpu->fail_create_after >= 0 && static_cast<int>(gpu->events.size()) >= gpu->fail_create_after) return false;
    gpu->events.push_back({true});
    e = static_cast<int>(gpu->events.size()) - 1;
    return true;
  }
  void destroy(int e) noexcept {
    std::lock_guard lk(gpu->mu);
    gpu->events[static_cast<std::size_t>(e)].created = false;
  }
  bool record(int e, int s) noexcept {
    std::lock_guard lk(gpu->mu);
    if (gpu->fail_record) return false;
    auto& ev = gpu->events[static_cast<std::size_t>(e)];
    ev.recorded = true;
    ev.stream = s;
    ev.t_ms = gpu->now_ms;  // the GPU reaches it at the current fake time, once released
    return true;
  }
  cuda::event_status query(int e) noexcept {
    std::lock_guard lk(gpu->mu);
    if (gpu->fail_query) return cuda::event_status::error;
    const auto& ev = gpu->events[static_cast<std::size_t>(e)];
    const auto it = gpu->done_until.find(ev.stream);
    return it != gpu->done_until.end() && it->second >= ev.t_ms ? cuda::event_status::ready
                                                                : cuda::event_status::not_ready;
  }
  bool elapsed_ms(float& ms, int a, int b) noexcept {
    std::lock_guard lk(gpu->mu);
    ms = static_cast<float>(gpu->events[static_cast<std::size_t>(b)].t_ms -
                            gpu->events[static_cast<std::size_t>(a)].t_ms);
    return true;
  }
  cuda::capture_status capturing(int s) noexcept {
    std::lock_guard lk(gpu->mu);
    return gpu->capturing.count(s) ? cuda::capture_status::active : cuda::capture_status::none;
  }
};
static_assert(cuda::event_api<fake_api>);
using fake_timer = cuda::basic_event_timer<inspector, fake_api>;

}  // namespace

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

TEST_CASE("event timer: resolves on the exporter thread from event times, in order, never blocking",
          "[embedded][cuda]") {
  fake_gpu gpu;
  capture cap;
  inspector insp({.sinks = make_sinks(cap.sink()), .interval = std::chrono::milliseconds(0)});
  const comm_handle h = insp.add_comm({.name = "tp", .hash = 2, .nranks = 4, .device = 0, .uuid = "GPU-0"});
  {
    fake_timer timer(insp, fake_api{&gpu}, {.pool_size = 4});
    const int stream = 7;
    for (int i = 0; i < 3; ++i) {
      auto t = timer.start(h, stream, func::all_reduce, 4u << 20);
      gpu.now_ms += 0.25 * (i + 1);  // the kernel takes 250, 500, 750 us on the GPU
      op_record op = make_op(func::all_reduce, 1u << 20, dtype::float32, 0, 0);
      op.seq = static_cast<std::uint64_t>(i);
      timer.stop(t, stream, op);
    }
    CHECK(timer.stats().pending == 3);
    REQUIRE(insp.flush());  // the GPU has not got there: nothing resolved, all in flight
    CHECK(std::isnan(sample(*cap.text, "ncclinsp_ops_total", {"collective=\"AllReduce\""})));
    CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"tp\""}) == 3);

    gpu.done_until[stream] = 0.3;  // first op done
    REQUIRE(insp.flush());
    CHECK(sample(*cap.text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 1);
    CHECK(sample(*cap.text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
          Approx(250e-6).epsilon(1e-3));
    gpu.done_until[stream] = 100;
    REQUIRE(insp.flush());
    CHECK(sample(*cap.text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 3);
    CHECK(sample(*cap.text, "ncclinsp_busy_seconds_total", {"collective=\"AllReduce\""}) ==
          Approx(1500e-6).epsilon(1e-3));
    CHECK(sample(*cap.text, "ncclinsp_last_completed_seq", {"collective=\"AllReduce\""}) ==
          2);  // resolved in enqueue order
    CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"tp\""}) == 0);
    CHECK(timer.stats().timed == 3);
    CHECK(timer.stats().pending == 0);

    // Graph capture: skipped and counted, never recorded on the stream.
    gpu.capturing.insert(9);
    auto tc = timer.start(h, 9, func::all_reduce, 1 << 20);
    timer.stop(tc, 9, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 0));
    CHECK(timer.stats().captured == 1);

    // Pool exhaustion: 4 slots, the 5th is not timed and is counted; the caller is not blocked.
    gpu.done_until.clear();
    std::vector<fake_timer::token> toks;
    for (int i = 0; i < 5; ++i) toks.push_back(timer.start(h, stream, func::all_reduce, 1 << 20));
    CHECK(toks[4].slot == no_index);
    CHECK(timer.stats().pool_exhausted == 1);
    for (auto& t : toks) timer.stop(t, stream, make_op(func::all_reduce, 1 << 18, dtype::float32, 0, 0));
    REQUIRE(insp.flush());
    CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"tp\""}) == 4);
    CHECK(sample(*cap.text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""}) == 1);
    CHECK(sample(*cap.text, "ncclinsp_filtered_ops_total", {"reason=\"no_gpu_timing\""}) == 1);

    // A failed NCCL call: abort() releases the slot... after a CUDA query error the op is cancelled.
    gpu.fail_query = true;
    REQUIRE(insp.flush());
    CHECK(timer.stats().cuda_errors == 4);
    CHECK(timer.stats().pending == 0);
    gpu.fail_query = false;
    auto ta = timer.start(h, stream);
    timer.abort(ta);
    CHECK(timer.stats().pending == 0);
  }  // timer gone: its poller is unregistered
  REQUIRE(insp.flush());
  CHECK(sample(*cap.text, "ncclinsp_inflight_ops", {"comm_name=\"tp\""}) == 0);
}

TEST_CASE("event timer: events that cannot be created shrink the pool", "[embedded][cuda]") {
  fake_gpu gpu;
  gpu.fail_create_after = 3;  // one pair, then a lone start event (destroyed), then nothing
  inspector insp({.interval = std::chrono::milliseconds(0)});
  const comm_handle h = insp.add_comm({.name = "z", .nranks = 2, .uuid = "GPU-0"});
  fake_timer timer(insp, fake_api{&gpu}, {.pool_size = 3});
  CHECK(timer.stats().cuda_errors == 2);
  auto a = timer.start(h, 1);
  auto b = timer.start(h, 1);
  CHECK(a.slot != no_index);
  CHECK(b.slot == no_index);
  timer.abort(a);
}
