// The CUDA event timer (cuda/event_timer.hpp) driven by a fake CUDA API, so it runs on machines
// without a GPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>
#include <vector>

#include "ncclinsp/cuda/event_timer.hpp"
#include "ncclinsp/inspector.hpp"
#include "plugin_harness.hpp"
#include "snapshot_capture.hpp"

using namespace ncclinsp;
using namespace ncclinsp_test;

namespace {

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
