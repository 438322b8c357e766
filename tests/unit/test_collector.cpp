#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>
#include <string>
#include <vector>

#include "ncclinsp/collector.hpp"

using namespace ncclinsp;

namespace {
op_record make_op(func f, std::uint64_t bytes, std::uint64_t dur_ns, std::uint64_t seq = 0) {
  op_record op;
  op.fn = f;
  set_size(op, bytes, dtype::int8);
  op.start_ns = 1'000'000;
  op.end_ns = op.start_ns + dur_ns;
  op.seq = seq;
  op.alg = algo::ring;
  op.pro = proto::simple;
  return op;
}
comm_desc desc(const char* name, int nranks = 4, std::string uuid = "GPU-a") {
  return {.name = name, .hash = 0x1234, .rank = 0, .nranks = nranks, .nnodes = 1, .device = 0, .uuid = std::move(uuid)};
}
cell_stats sum_cells(const snapshot& s, func f) {
  cell_stats t;
  for (const auto& c : s.cells)
    if (c.fn == f) {
      t.ops += c.total.ops;
      t.invalid += c.total.invalid;
      t.bytes += c.total.bytes;
      t.busy_ns += c.total.busy_ns;
      t.bus_bytes += c.total.bus_bytes;
      t.bw_count += c.total.bw_count;
    }
  return t;
}
}  // namespace

TEST_CASE("record accumulates counters, histogram and window", "[collector]") {
  collector<> col;
  const auto h = col.add_comm(desc("tp"));
  REQUIRE(h != no_index);
  col.record(h, make_op(func::all_reduce, 4 << 20, 500'000, 7));
  col.record(h, make_op(func::all_reduce, 4 << 20, 250'000, 8));
  auto s1 = col.take_snapshot();
  REQUIRE(s1.comms.size() == 1);
  REQUIRE(s1.cells.size() == 1);
  const auto& c = s1.cells[0];
  CHECK(c.fn == func::all_reduce);
  CHECK(c.total.ops == 2);
  CHECK(c.total.bytes == 8u << 20);
  CHECK(c.total.busy_ns == 750'000);
  CHECK(c.total.bus_bytes == Approx(2 * 1.5 * (4 << 20)));
  CHECK(c.window.ops == 2);
  // geometric mean of 12.582912 and 25.165824 GB/s
  CHECK(std::exp(c.window.log_busbw_sum / static_cast<double>(c.window.bw_count)) ==
        Approx(std::sqrt(12.582912 * 25.165824)));
  CHECK(c.window.geomean_busbw_gbs() == Approx(std::sqrt(12.582912 * 25.165824)));
  // bus bytes over busy time: 2 * 1.5 * 4 MiB in 750 us
  CHECK(c.total.busbw_gbs() == Approx(2 * 1.5 * (4 << 20) / 750'000.0));
  CHECK(cell_stats{}.geomean_busbw_gbs() == 0);
  CHECK(cell_stats{}.busbw_gbs() == 0);
  CHECK(c.total.hist[duration_bucket(500'000)] == 1);
  CHECK(c.total.hist[duration_bucket(250'000)] == 1);
  CHECK(s1.comms[0].completed == 2);
  CHECK(s1.comms[0].last_seq_plus1[static_cast<std::size_t>(func::all_reduce)] == 9);

  auto s2 = col.take_snapshot();
  REQUIRE(s2.cells.size() == 1);
  CHECK(s2.cells[0].total.ops == 2);
  CHECK(s2.cells[0].window.ops == 0);  // nothing new in this window
}

TEST_CASE("bad input is recorded as invalid, excluded from bandwidth, never NaN", "[collector]") {
  collector<> col;
  const auto h = col.add_comm(desc("bad"));
  col.record(h, make_op(func::all_reduce, 1 << 20, 0));  // zero duration
  col.record(h, make_op(func::all_reduce, 0, 1000));     // zero bytes
  op_record unk = make_op(func::all_reduce, 1 << 20, 1000);
  set_size(unk, 1 << 20, dtype::unknown);  // ncclUint8 reported as "Unknown"
  col.record(h, unk);
  col.record(h, make_op(func::unknown, 1 << 20, 1000));  // unknown function
  col.record(h, make_op(func::all_reduce, 1 << 20, 1000));
  const auto s = col.take_snapshot();
  cell_stats all;
  for (const auto& c : s.cells) {
    all.ops += c.total.ops;
    all.invalid += c.total.invalid;
    all.bytes += c.total.bytes;
    CHECK(std::isfinite(c.total.log_busbw_sum));
  }
  CHECK(all.ops == 5);
  CHECK(all.invalid == 4);
  CHECK(all.bytes == 1u << 20);
  CHECK(col.take_snapshot().cells.size() == s.cells.size());
}

TEST_CASE("many threads record exact totals without locks", "[collector][threads]") {
  collector<> col;
  const auto a = col.add_comm(desc("a"));
  const auto b = col.add_comm(desc("b", 8));
  constexpr int threads = 8, per_thread = 50'000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i)
        col.record((i & 1) ? a : b, make_op((t & 1) ? func::all_gather : func::send, 1024u << (i % 8), 1000 + i % 7));
    });
  // Snapshots taken concurrently must never see more than was recorded.
  for (int i = 0; i < 20; ++i) {
    const auto s = col.take_snapshot();
    std::uint64_t n = 0;
    for (const auto& c : s.cells) n += c.total.ops;
    CHECK(n <= std::uint64_t{threads} * per_thread);
  }
  for (auto& t : ts) t.join();
  const auto s = col.take_snapshot();
  std::uint64_t ops = 0, bytes = 0, busy = 0;
  for (const auto& c : s.cells) {
    ops += c.total.ops;
    bytes += c.total.bytes;
    busy += c.total.busy_ns;
  }
  std::uint64_t want_bytes = 0, want_busy = 0;
  for (int i = 0; i < per_thread; ++i) {
    want_bytes += 1024u << (i % 8);
    want_busy += 1000 + i % 7;
  }
  CHECK(ops == std::uint64_t{threads} * per_thread);
  CHECK(bytes == want_bytes * threads);
  CHECK(busy == want_busy * threads);
  CHECK(s.comms[0].completed + s.comms[1].completed == ops);
}

struct tiny_traits : default_traits {
  static constexpr std::uint32_t max_shards = 2;  // threads beyond the first share the overflow shard
  static constexpr std::uint32_t cells_per_shard = 8;
};

TEST_CASE("threads beyond the shard count share an atomic overflow shard, exact totals", "[collector][threads]") {
  collector<tiny_traits> col;
  const auto h = col.add_comm(desc("x"));
  std::vector<std::thread> ts;
  for (int t = 0; t < 6; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000));
    });
  for (auto& t : ts) t.join();
  const auto s = col.take_snapshot();
  CHECK(sum_cells(s, func::all_reduce).ops == 120'000);
  CHECK(sum_cells(s, func::all_reduce).bytes == 120'000ull << 20);
}

TEST_CASE("a full cell table drops and counts, never overwrites", "[collector]") {
  collector<tiny_traits> col;
  const auto h = col.add_comm(desc("x"));
  for (int k = 0; k < 20; ++k) col.record(h, make_op(func::all_reduce, 1ull << (10 + k), 1000));
  const auto s = col.take_snapshot();
  CHECK(s.cells.size() == 8);
  CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::table_full)] == 12);
  CHECK(s.comms[0].completed == 20);
}

TEST_CASE("per-op records reach the snapshot in order, ring overflow is counted", "[collector]") {
  collector<> col({.record_ring_capacity = 16});
  const auto h = col.add_comm(desc("r"));
  for (int i = 0; i < 10; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, i));
  auto s = col.take_snapshot();
  REQUIRE(s.records.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(s.records[i].op.seq == static_cast<std::uint64_t>(i));
  for (int i = 0; i < 20; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, i));
  s = col.take_snapshot();
  CHECK(s.records.size() == 16);
  CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::record_ring_full)] == 4);
  CHECK(s.records.size() + s.comms[0].dropped[static_cast<std::size_t>(drop_reason::record_ring_full)] == 20);
}

TEST_CASE("a record ring rings the doorbell at its high-water mark and each multiple, take_records drains it alone",
          "[collector]") {
  collector<> col({.record_ring_capacity = 16});  // high-water mark: 4
  const auto h = col.add_comm(desc("hw"));
  const std::uint32_t bell0 = col.doorbell().value();
  for (int i = 0; i < 3; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, i));
  CHECK(col.doorbell().value() == bell0);
  CHECK(col.records_pending());
  col.record(h, make_op(func::all_reduce, 1 << 20, 1000, 3));
  CHECK(col.doorbell().value() == bell0 + 1);
  for (int i = 4; i < 7; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, i));
  CHECK(col.doorbell().value() == bell0 + 1);  // between marks: no ring
  for (int i = 7; i < 12; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, i));
  CHECK(col.doorbell().value() == bell0 + 3);  // 8 and 12: one ring per mark's worth of records
  CHECK(col.records_above_mark());

  snapshot part;
  col.take_records(part);
  CHECK(part.records_only);
  CHECK(part.cells.empty());
  REQUIRE(part.comms.size() == 1);
  CHECK(part.comms[0].desc.name == "hw");
  REQUIRE(part.records.size() == 12);
  for (int i = 0; i < 12; ++i) CHECK(part.records[i].op.seq == static_cast<std::uint64_t>(i));
  CHECK_FALSE(col.records_pending());
  CHECK_FALSE(col.records_above_mark());
  for (int i = 0; i < 4; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, 12 + i));
  CHECK(col.doorbell().value() == bell0 + 4);  // drained, so the next crossing rings again

  const auto s = col.take_snapshot();  // the rest, once; cells count every op
  CHECK(s.records.size() == 4);
  CHECK(s.records[0].op.seq == 12);
  CHECK(sum_cells(s, func::all_reduce).ops == 16);
  CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::record_ring_full)] == 0);
}

TEST_CASE("a backlog a partial drain leaves above the high-water mark rings again within one mark's worth of records",
          "[collector]") {
  // The exporter drained part of a backlog while the recording thread kept pushing: the fill
  // stepped down from 20 to 16, still at the mark. A ring only when the fill reaches the mark
  // never came again (the exporter slept, the window filled, records were dropped).
  collector<> col({.record_ring_capacity = 64});  // high-water mark: 16
  const auto h = col.add_comm(desc("step"));
  const std::uint32_t bell0 = col.doorbell().value();
  std::uint64_t seq = 0;
  for (int i = 0; i < 20; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));
  CHECK(col.doorbell().value() == bell0 + 1);
  snapshot part;
  col.take_records(part, 4);
  REQUIRE(part.records.size() == 4);
  CHECK(col.records_above_mark());  // what the exporter checks before it sleeps
  for (int i = 0; i < 15; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));  // fill 17..31
  CHECK(col.doorbell().value() == bell0 + 1);
  col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));  // fill 32: twice the mark
  CHECK(col.doorbell().value() == bell0 + 2);
  col.take_records(part);
  CHECK(part.records.size() == 32);
  CHECK_FALSE(col.records_above_mark());
}

TEST_CASE(
    "a growing record ring: the exporter widens the window in chunks up to record_ring_max, the recording thread only fills it",
    "[collector]") {
  collector<> col({.record_ring_capacity = 64, .record_ring_max = 4096});  // chunks of 64 records
  CHECK(col.record_ring_limit() == 4096);
  const auto h = col.add_comm(desc("grow"));
  const auto ring_full = [&](const snapshot& s) {
    return s.comms[0].dropped[static_cast<std::size_t>(drop_reason::record_ring_full)];
  };
  std::uint64_t seq = 0;
  for (int i = 0; i < 65; ++i)
    col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));  // the floor: 64, one dropped
  const std::uint64_t floor_bytes = col.record_ring_bytes();
  CHECK(floor_bytes >= 64 * collector<>::bytes_per_record(false));
  snapshot part;
  col.take_records(part, 16);  // a late exporter: 48 records still waiting, so the window grows past them
  REQUIRE(part.records.size() == 16);
  CHECK(col.record_ring_bytes() > floor_bytes);
  for (int i = 0; i < 80; ++i)
    col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));  // 128 waiting now: no drop
  col.take_records(part);
  REQUIRE(part.records.size() == 128);
  CHECK(part.records.front().op.seq == 16);
  CHECK(part.records.back().op.seq == 144);  // seq 64 was the dropped one
  const auto s = col.take_snapshot();
  CHECK(ring_full(s) == 1);
  CHECK(sum_cells(s, func::all_reduce).ops == 145);
  // Never past record_ring_max, however late the exporter: the rest is dropped and counted.
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 4096; ++i) col.record(h, make_op(func::all_reduce, 1 << 20, 1000, seq++));
    col.take_records(part, 1);
  }
  CHECK(col.record_ring_bytes() <= (4096 + 2 * 64) * collector<>::bytes_per_record(false) + 4096 / 64 * 64);
  col.take_records(part);
  const auto s2 = col.take_snapshot();
  CHECK(part.records.size() + 8 + ring_full(s2) - 1 == 8 * 4096);
}

TEST_CASE("in-flight, oldest age, retirement and abandoned ops", "[collector]") {
  collector<> col({.retired_retention = std::chrono::milliseconds(0)});
  const std::uint64_t started_at = collector<>::steady_ns() - 3'000'000'000ull;
  const auto h = col.add_comm(desc("life"), [&](comm_handle) { return started_at; });
  for (int i = 0; i < 3; ++i) col.note_started(h);
  col.record(h, make_op(func::all_reduce, 1 << 20, 1000));
  auto s = col.take_snapshot();
  CHECK(s.comms[0].inflight == 2);
  CHECK(s.comms[0].oldest_inflight_age_s == Approx(3.0).margin(0.5));
  col.note_filtered(h, filter_reason::no_gpu_timing);
  col.retire_comm(h, 1);
  s = col.take_snapshot();
  REQUIRE(s.comms.size() == 1);
  CHECK(s.comms[0].retired);
  CHECK(s.comms[0].abandoned == 1);
  CHECK(s.comms[0].inflight == 0);
  CHECK(s.comms[0].filtered[1] == 1);
  s = col.take_snapshot();
  CHECK(s.comms.empty());
  CHECK(s.cells.empty());
}

TEST_CASE("user tags become a bounded label set", "[collector]") {
  collector<> col({.user_tag_label = true});
  const auto h = col.add_comm(desc("t"));
  for (std::uint64_t tag = 1; tag <= 40; ++tag) {
    auto op = make_op(func::all_reduce, 1 << 20, 1000);
    op.user_tag = tag;
    col.record(h, op);
  }
  const auto s = col.take_snapshot();
  CHECK(s.user_tags.size() == default_traits::max_user_tags);
  std::uint64_t other = 0;
  for (const auto& c : s.cells)
    if (c.tag_index == 31) other += c.total.ops;
  CHECK(other == 40 - default_traits::max_user_tags);
}

struct few_comms : default_traits {
  static constexpr std::uint32_t max_comms = 3;
};

TEST_CASE("the comm table is bounded and overflow is counted", "[collector]") {
  using few = few_comms;
  collector<few> col;
  for (int i = 0; i < 3; ++i) CHECK(col.add_comm(desc("c")) != no_index);
  const auto h = col.add_comm(desc("c"));
  CHECK(h == no_index);
  col.record(h, make_op(func::all_reduce, 1 << 20, 1000));  // ignored, counted
  CHECK(col.take_snapshot().comm_table_full == 2);
}

struct small_traits : default_traits {
  static constexpr std::uint32_t max_comms = 3;
  static constexpr std::uint32_t cells_per_shard = 8;
};

TEST_CASE("finalized communicators free their slot and their cells", "[collector]") {
  // 3 comm slots and 8 cells per shard, 200 communicator lifetimes with 2 cells each.
  collector<small_traits> col({.retired_retention = std::chrono::milliseconds(0)});
  for (int life = 0; life < 200; ++life) {
    const auto h = col.add_comm(desc("life"));
    REQUIRE(h != no_index);
    col.record(h, make_op(func::all_reduce, 1 << 20, 1000));
    col.record(h, make_op(func::all_gather, 1 << 20, 1000));
    col.retire_comm(h, 0);
    const auto s = col.take_snapshot();
    REQUIRE(s.comms.size() == 1);
    CHECK(s.comms[0].completed == 2);  // counters start from zero on a reused slot
    CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::table_full)] == 0);
    REQUIRE(s.cells.size() == 2);
    for (const auto& c : s.cells) CHECK(c.total.ops == 1);
  }
  CHECK(col.take_snapshot().comm_table_full == 0);
}

TEST_CASE("a retired communicator keeps its final values for the retention period", "[collector]") {
  collector<> col({.record_ring_capacity = 0, .retired_retention = std::chrono::milliseconds(300)});
  const auto gone = col.add_comm(desc("short-lived"));
  const auto live = col.add_comm(desc("long-lived"));
  col.record(gone, make_op(func::all_reduce, 1 << 20, 1000));
  col.record(live, make_op(func::all_reduce, 1 << 20, 1000));
  col.retire_comm(gone, 0);
  const auto find = [](const snapshot& s, const std::string& name) -> const comm_snapshot* {
    for (const auto& c : s.comms)
      if (c.desc.name == name) return &c;
    return nullptr;
  };
  const auto ops_of = [](const snapshot& s, std::uint32_t comm) {
    std::uint64_t n = 0;
    for (const auto& c : s.cells) n += c.comm == comm ? c.total.ops : 0;
    return n;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto s = col.take_snapshot();
  REQUIRE(find(s, "short-lived"));
  CHECK(find(s, "short-lived")->retired);
  CHECK(find(s, "short-lived")->newly_retired);
  CHECK(ops_of(s, static_cast<std::uint32_t>(find(s, "short-lived") - s.comms.data())) == 1);
  s = col.take_snapshot();
  if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(250)) {  // still retained
    REQUIRE(find(s, "short-lived"));
    CHECK(find(s, "short-lived")->retired);
    CHECK_FALSE(find(s, "short-lived")->newly_retired);
    CHECK(ops_of(s, static_cast<std::uint32_t>(find(s, "short-lived") - s.comms.data())) == 1);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  s = col.take_snapshot();  // retention over: this is its last appearance
  REQUIRE(find(s, "short-lived"));
  s = col.take_snapshot();
  CHECK_FALSE(find(s, "short-lived"));
  REQUIRE(find(s, "long-lived"));
  CHECK(s.cells.size() == 1);
  // The freed slot is reused with fresh counters.
  const auto again = col.add_comm(desc("next"));
  CHECK(again == gone);
  col.record(again, make_op(func::all_gather, 1 << 20, 1000));
  s = col.take_snapshot();
  REQUIRE(find(s, "next"));
  CHECK(find(s, "next")->completed == 1);
  CHECK(ops_of(s, static_cast<std::uint32_t>(find(s, "next") - s.comms.data())) == 1);
}

TEST_CASE("a full table takes over the slot of the longest-retired communicator", "[collector]") {
  collector<few_comms> col;  // default retention (120 s): nothing expires during this test
  const auto a = col.add_comm(desc("a"));
  const auto b = col.add_comm(desc("b"));
  const auto c = col.add_comm(desc("c"));
  for (auto h : {a, b, c}) col.record(h, make_op(func::all_reduce, 1 << 20, 1000));
  col.retire_comm(b, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  col.retire_comm(a, 0);
  auto s = col.take_snapshot();
  CHECK(s.comms.size() == 3);
  const auto d = col.add_comm(desc("d"));  // table full: b retired first, so b gives up its slot
  CHECK(d == b);
  col.record(d, make_op(func::all_gather, 1 << 20, 1000));
  s = col.take_snapshot();
  std::vector<std::string> names;
  for (const auto& x : s.comms) names.push_back(x.desc.name);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a", "c", "d"});
  for (const auto& cell : s.cells) {
    const auto& owner = s.comms[cell.comm].desc.name;
    CHECK(cell.total.ops == 1);
    CHECK((owner == "d") == (cell.fn == func::all_gather));
  }
  CHECK(s.comm_table_full == 0);
  const auto e = col.add_comm(desc("e"));  // a is the only retired one left
  CHECK(e == a);
  CHECK(col.add_comm(desc("f")) == no_index);  // none retired: counted
  CHECK(col.take_snapshot().comm_table_full == 1);
}

TEST_CASE("drop and filter counts of departed communicators stay in their GPU's totals", "[collector]") {
  collector<> col({.retired_retention = std::chrono::milliseconds(0)});
  const auto a = col.add_comm(desc("a"));
  col.note_dropped(a, drop_reason::op_pool_full);
  col.note_filtered(a, filter_reason::min_size);
  col.retire_comm(a, 0);
  auto s = col.take_snapshot();  // last appearance: counted in the communicator itself
  REQUIRE(s.comms.size() == 1);
  CHECK(s.comms[0].dropped[static_cast<std::size_t>(drop_reason::op_pool_full)] == 1);
  CHECK(s.departed.empty());
  s = col.take_snapshot();  // gone: counted in departed, once
  CHECK(s.comms.empty());
  REQUIRE(s.departed.size() == 1);
  CHECK(s.departed[0].gpu.uuid == desc("a").uuid);
  CHECK(s.departed[0].dropped[static_cast<std::size_t>(drop_reason::op_pool_full)] == 1);
  CHECK(s.departed[0].filtered[static_cast<std::size_t>(filter_reason::min_size)] == 1);
  const auto b = col.add_comm(desc("b"));  // same GPU: one entry, summed
  col.note_dropped(b, drop_reason::op_pool_full);
  col.retire_comm(b, 0);
  col.take_snapshot();
  s = col.take_snapshot();
  REQUIRE(s.departed.size() == 1);
  CHECK(s.departed[0].dropped[static_cast<std::size_t>(drop_reason::op_pool_full)] == 2);
}
