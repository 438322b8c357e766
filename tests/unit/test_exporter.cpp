#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"

using namespace ncclinsp;
using namespace std::chrono_literals;

namespace {
op_record ar(std::uint64_t dur) {
  op_record op;
  op.fn = func::all_reduce;
  set_size(op, 1 << 20, dtype::float32);
  op.end_ns = dur;
  return op;
}
std::uint64_t total_ops(const snapshot& s) {
  std::uint64_t n = 0;
  for (const auto& c : s.cells) n += c.total.ops;
  return n;
}
// A records sink as slow as a slow disk: 10 ms per batch (~0.4 M records/s).
struct slow_writer {
  std::atomic<std::uint64_t>* batches;
  std::atomic<std::uint64_t>* written;
  snapshot* final_snap;
  export_result write(const snapshot& s) noexcept {
    if (s.final) *final_snap = s;
    return export_result::success;
  }
  export_result write_records(const snapshot& s) noexcept {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ++*batches;
    *written += s.records.size();
    return export_result::success;
  }
};
}  // namespace

TEST_CASE("exporter exports periodically, on flush, and a final snapshot on stop", "[exporter]") {
  collector<> col;
  const auto h = col.add_comm({.name = "e", .nranks = 2, .uuid = "GPU-e"});
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, bool>> seen;  // (ops, final)
  std::vector<any_sink> sinks;
  sinks.emplace_back(callback_sink([&](const snapshot& s) {
    std::lock_guard lk(mu);
    seen.emplace_back(total_ops(s), s.final);
  }));
  exporter ex(col, std::move(sinks), {.interval = 1h});
  REQUIRE(ex.start());
  col.record(h, ar(1000));
  REQUIRE(ex.flush(5s));
  {
    std::lock_guard lk(mu);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0] == std::make_pair(std::uint64_t{1}, false));
  }
  col.record(h, ar(1000));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(ex.stop(5s));  // must not wait for the 1 h interval
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  std::lock_guard lk(mu);
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::make_pair(std::uint64_t{2}, true));
}

TEST_CASE("exporter honours short intervals", "[exporter]") {
  collector<> col;
  std::atomic<int> n{0};
  std::vector<any_sink> sinks;
  sinks.emplace_back(callback_sink([&](const snapshot&) { ++n; }));
  exporter ex(col, std::move(sinks), {.interval = 20ms});
  ex.start();
  for (int i = 0; i < 500 && n < 3; ++i) std::this_thread::sleep_for(10ms);
  CHECK(n >= 3);
}

TEST_CASE("stop with a timeout never waits for a stuck sink", "[exporter]") {
  collector<> col;
  std::atomic<bool> release{false}, shut{false};
  struct slow_sink {
    std::atomic<bool>* release;
    std::atomic<bool>* shut;
    export_result write(const snapshot&) noexcept {
      while (!release->load()) std::this_thread::sleep_for(1ms);
      return export_result::success;
    }
    void shutdown() noexcept { shut->store(true); }
  };
  std::vector<any_sink> sinks;
  sinks.emplace_back(slow_sink{&release, &shut});
  std::vector<std::string> logs;
  auto ex = std::make_unique<exporter<collector<>>>(
      col, std::move(sinks),
      exporter_options{.interval = 1h, .log = [&](log_level, std::string_view m) { logs.emplace_back(m); }});
  ex->start();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(ex->stop(100ms));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(logs.size() == 1);
  release = true;  // let the detached thread finish before col goes away
  for (int i = 0; i < 2000 && !shut; ++i) std::this_thread::sleep_for(1ms);
  CHECK(shut);
  ex.reset();
}

TEST_CASE("an exporter that was never started still writes the final snapshot", "[exporter]") {
  collector<> col;
  const auto h = col.add_comm({.name = "n", .nranks = 2, .uuid = "GPU-n"});
  int finals = 0;
  std::vector<any_sink> sinks;
  sinks.emplace_back(callback_sink([&](const snapshot& s) { finals += s.final && total_ops(s) == 1; }));
  exporter ex(col, std::move(sinks), {.interval = 0ms});
  col.record(h, ar(5));
  ex.stop();
  CHECK(finals == 1);
}

TEST_CASE(
    "after stop_records_at the final export writes queued records until then and counts the rest as dropped (exit_deadline)",
    "[exporter]") {
  // A backlog at teardown (a writer that fell behind) must end up written or counted, never cut
  // off silently by the process exit that follows.
  collector<> col({.record_ring_capacity = 65536});
  const auto h = col.add_comm({.name = "late", .nranks = 2, .uuid = "GPU-l"});
  std::atomic<std::uint64_t> batches{0}, written{0};
  snapshot final_snap;
  std::vector<any_sink> sinks;
  sinks.emplace_back(slow_writer{&batches, &written, &final_snap});
  exporter ex(col, std::move(sinks), {.interval = 1h});
  constexpr std::uint64_t n = 60000;  // 15 batches of 4096: ~150 ms of writing, 4x the budget
  for (std::uint64_t i = 0; i < n; ++i) col.record(h, ar(1000 + i % 100));
  const auto t0 = std::chrono::steady_clock::now();
  ex.stop_records_at(t0 + 35ms);  // what the plugin does at process exit
  REQUIRE(ex.stop(5s));           // never started: the final export runs here
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(final_snap.final);
  REQUIRE(final_snap.comms.size() == 1);
  const auto& d = final_snap.comms[0].dropped;
  const std::uint64_t late = d[static_cast<std::size_t>(drop_reason::exit_deadline)];
  CHECK(d[static_cast<std::size_t>(drop_reason::record_ring_full)] == 0);
  CHECK(late > 0);  // it stopped writing when the budget ran out (15 batches take >= 150 ms)
  INFO("batches written: " << batches.load());
  CHECK(written.load() + final_snap.records.size() + late == n);  // every record written or counted
  CHECK(took < 1s);
  CHECK_FALSE(col.records_pending());
}

TEST_CASE("without stop_records_at the final export writes every queued record, however long it takes", "[exporter]") {
  collector<> col({.record_ring_capacity = 16384});
  const auto h = col.add_comm({.name = "all", .nranks = 2, .uuid = "GPU-a"});
  std::atomic<std::uint64_t> batches{0}, written{0};
  snapshot final_snap;
  std::vector<any_sink> sinks;
  sinks.emplace_back(slow_writer{&batches, &written, &final_snap});
  exporter ex(col, std::move(sinks), {.interval = 1h});  // no stop_records_at: not exiting
  for (int i = 0; i < 12000; ++i) col.record(h, ar(1000));
  REQUIRE(ex.stop(5s));
  CHECK(written.load() + final_snap.records.size() == 12000);
  CHECK(final_snap.comms.at(0).dropped[static_cast<std::size_t>(drop_reason::exit_deadline)] == 0);
}

TEST_CASE(
    "records past a ring's high-water mark reach write_records between exports, a sink without it waits for the export",
    "[exporter]") {
  collector<> col({.record_ring_capacity = 64});  // high-water mark: 16
  const auto h = col.add_comm({.name = "hw", .nranks = 2, .uuid = "GPU-h"});
  struct record_taker {
    std::atomic<std::uint64_t>* drained;
    std::atomic<std::uint64_t>* in_exports;
    export_result write(const snapshot& s) noexcept {
      *in_exports += s.records.size();
      return export_result::success;
    }
    export_result write_records(const snapshot& s) noexcept {
      if (!s.records_only || !s.cells.empty()) return export_result::failure;
      *drained += s.records.size();
      return export_result::success;
    }
  };
  std::atomic<std::uint64_t> drained{0}, in_exports{0}, plain{0};
  std::vector<any_sink> sinks;
  sinks.emplace_back(record_taker{&drained, &in_exports});
  sinks.emplace_back(callback_sink([&](const snapshot& s) { plain += s.records.size(); }));
  CHECK(sinks[0].takes_records());
  CHECK_FALSE(sinks[1].takes_records());
  exporter ex(col, std::move(sinks), {.interval = 1h});
  REQUIRE(ex.start());
  // 10 rounds of 40 records: 400 in all through a 64-entry ring, with no export in between.
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 40; ++i) col.record(h, ar(1000 + i));
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (drained.load() < 40u * (round + 1) - 15 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
  }
  CHECK(ex.exports() == 0);
  REQUIRE(ex.stop(5s));
  CHECK(drained.load() + in_exports.load() == 400);
  CHECK(drained.load() >= 400 - 15);
  CHECK(plain.load() == in_exports.load());  // the callback sink saw only the final export's records
  const auto s = col.take_snapshot();
  CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::record_ring_full)] == 0);
}

TEST_CASE("two exporters of one collector take turns: every record reaches exactly one of them",
          "[exporter][threads]") {
  // The plugin's re-init: the last communicator's final export still runs (its sink is slow) when
  // a new communicator starts a second exporter on the same collector. Both drain the rings and
  // take snapshots; the collector allows one consumer at a time (TSan checks the turns).
  collector<> col({.record_ring_capacity = 256});
  const auto h = col.add_comm({.name = "twice", .nranks = 2, .uuid = "GPU-t"});
  struct counter {
    std::atomic<std::uint64_t>* records;
    export_result write(const snapshot& s) noexcept {
      *records += s.records.size();
      return export_result::success;
    }
    export_result write_records(const snapshot& s) noexcept {
      *records += s.records.size();
      return export_result::success;
    }
  };
  std::atomic<std::uint64_t> seen_a{0}, seen_b{0};
  std::vector<any_sink> sa, sb;
  sa.emplace_back(counter{&seen_a});
  sb.emplace_back(counter{&seen_b});
  exporter a(col, std::move(sa), {.interval = 2ms});
  exporter b(col, std::move(sb), {.interval = 3ms});
  REQUIRE(a.start());
  REQUIRE(b.start());
  constexpr std::uint64_t n = 20000;
  for (std::uint64_t i = 0; i < n; ++i) {
    col.record(h, ar(1000 + i % 50));
    if (i % 64 == 0) std::this_thread::yield();
  }
  REQUIRE(a.stop(5s));
  REQUIRE(b.stop(5s));
  const auto s = col.take_snapshot();
  const std::uint64_t full = s.comms.at(0).dropped[static_cast<std::size_t>(drop_reason::record_ring_full)];
  INFO("a: " << seen_a.load() << " b: " << seen_b.load() << " ring full: " << full);
  // How the records split between the two depends on scheduling (one may take them all); what
  // must hold is that each was taken exactly once. The data race itself is TSan's to find (this
  // case fails under TSan with the consumer lock removed).
  CHECK(seen_a.load() + seen_b.load() + s.records.size() + full == n);
  CHECK(total_ops(s) == n);
}
