// The plugin's concurrency primitives on their own: the handle codec, slot_bitmap, reader_gate,
// comm_registry (publish, look up, channel holds, retirement, reuse) and the callback recorder's ring. The thread cases run in the
// TSan stage of scripts/test.sh (and under ASan), where a use after retirement is a report.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ncclinsp/detail/reader_gate.hpp"
#include "ncclinsp/detail/slot_bitmap.hpp"
#include "ncclinsp/plugin/callback_recorder.hpp"
#include "ncclinsp/plugin/comm_registry.hpp"
#include "ncclinsp/plugin/handle.hpp"

using namespace ncclinsp;
using namespace ncclinsp::plugin;
using namespace std::chrono_literals;

namespace {

// An op handle of slot `slot` of a published communicator, as the adapter gives NCCL.
decoded op_of(const comm_state& cs, std::uint32_t slot) {
  return decode(as_handle(encode(handle_kind::op, cs.ops[slot].gen.load(), cs.handle, slot)));
}

// A communicator with `pool` op slots published at index `idx`.
comm_state& published(comm_registry& reg, comm_handle idx, std::uint32_t pool = 8) {
  comm_state* cs = reg.adopt(pool, false, 0);
  reg.publish(*cs, idx);
  return *cs;
}

}  // namespace

TEST_CASE("handle codec: every field round-trips in its own bits") {
  for (handle_kind k : {handle_kind::op, handle_kind::channel, handle_kind::auxiliary})
    for (std::uint32_t gen : {1u, 77u, gen_mask})
      for (std::uint32_t comm : {0u, 4095u, comm_mask})
        for (std::uint32_t slot : {0u, 1234u, slot_mask})
          for (std::uint32_t aux : {0u, 0x81u, aux_mask}) {
            void* h = as_handle(encode(k, gen, comm, slot, aux));
            REQUIRE(h != nullptr);  // the kind bits: no live handle is NULL
            const decoded d = decode(h);
            REQUIRE(d.kind == k);
            REQUIRE(d.gen == gen);
            REQUIRE(d.comm == comm);
            REQUIRE(d.slot == slot);
            REQUIRE(d.aux == aux);
            REQUIRE(kind_of(h) == k);
            REQUIRE(aux_of(h) == aux);
          }
  // Out-of-range inputs are masked, never spilled into a neighbouring field.
  const decoded d = decode(as_handle(encode(handle_kind::op, gen_mask + 2, comm_mask + 1, slot_mask + 3, 0x1FF)));
  CHECK(d.gen == 1);
  CHECK(d.comm == 0);
  CHECK(d.slot == 2);
  CHECK(d.aux == 0xFF);
  CHECK(d.kind == handle_kind::op);
  // Generations wrap at 22 bits; a context's slot is above every op slot.
  CHECK(handle_gen(gen_mask + 1) == 0);
  CHECK(max_op_slots == context_slot);
  CHECK(decode(nullptr).kind == handle_kind::none);
}

TEST_CASE("slot_bitmap: each index once until released, then again") {
  detail::slot_bitmap b(130);  // three words, the last one partial
  std::vector<bool> seen(130);
  for (int i = 0; i < 130; ++i) {
    const std::uint32_t idx = b.alloc();
    REQUIRE(idx < 130);
    REQUIRE_FALSE(seen[idx]);
    seen[idx] = true;
  }
  CHECK(b.alloc() == no_index);
  b.release(129);
  b.release(3);
  const std::uint32_t a = b.alloc(), c = b.alloc();
  CHECK(((a == 3 && c == 129) || (a == 129 && c == 3)));
  CHECK(b.alloc() == no_index);
}

TEST_CASE("slot_bitmap threads: no index is held by two threads at once") {
  constexpr std::uint32_t n = 96;
  detail::slot_bitmap b(n);
  std::vector<std::atomic<int>> owner(n);
  std::atomic<int> doubles{0};
  std::vector<std::thread> ts;
  for (int t = 1; t <= 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const std::uint32_t idx = b.alloc();
        if (idx == no_index) continue;
        if (owner[idx].exchange(t, std::memory_order_relaxed) != 0) doubles.fetch_add(1);
        owner[idx].store(0, std::memory_order_relaxed);
        b.release(idx);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(doubles.load() == 0);
  for (std::uint32_t i = 0; i < n; ++i) CHECK(b.alloc() != no_index);  // every index came back
}

TEST_CASE("reader_gate: quiesce waits for a section opened before it, not for later ones") {
  detail::reader_gate gate;
  REQUIRE(gate.ok());
  CHECK(gate.quiesce(10ms));  // no reader

  std::atomic<int> stage{0};
  std::thread reader([&] {
    const auto in = gate.enter();
    stage.store(1);
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() != 1) std::this_thread::yield();
  CHECK_FALSE(gate.quiesce(20ms));  // the reader is still inside
  stage.store(2);
  reader.join();
  CHECK(gate.quiesce(1s));

  // A thread that keeps opening new sections does not hold quiesce up: only the section seen
  // open must end.
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load()) {
      const auto in = gate.enter();
    }
  });
  CHECK(gate.quiesce(2s));
  stop.store(true);
  churn.join();
}

TEST_CASE("reader_gate threads: nothing a reader holds is poisoned or freed") {
  struct obj {
    int value = 42;
  };
  detail::reader_gate gate;
  std::atomic<obj*> published{new obj};
  std::atomic<bool> stop{false};
  std::atomic<long> bad{0}, reads{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        const auto in = gate.enter();
        if (obj* o = published.load(std::memory_order_seq_cst)) {
          if (o->value != 42) bad.fetch_add(1);
          reads.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  int quiet = 0, swaps = 0;
  // At least 300 swaps, and on until the readers have read (a loaded machine may not have run them).
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  for (; swaps < 300 || (reads.load() < 1000 && std::chrono::steady_clock::now() < give_up); ++swaps) {
    obj* old = published.exchange(new obj, std::memory_order_seq_cst);
    if (gate.quiesce(1s)) {
      ++quiet;
      old->value = -1;  // a reader that still held it would see this (or ASan the free)
      delete old;
    }  // else: leaked on purpose, as the registry parks a state in limbo
  }
  stop.store(true);
  for (auto& t : readers) t.join();
  delete published.load();
  CHECK(bad.load() == 0);
  CHECK(quiet == swaps);
  CHECK(reads.load() > 0);
}

TEST_CASE("comm_registry: publish, look up, retire once, reuse with new generations") {
  comm_registry reg;
  comm_state& cs = published(reg, 3);
  void* ctx = comm_registry::context_of(cs);
  CHECK(reg.from_context(ctx) == &cs);
  CHECK(reg.live(3) == &cs);
  CHECK(reg.from_context(nullptr) == nullptr);
  CHECK(reg.from_context(as_handle(encode(handle_kind::op, cs.gen + 1, 3, context_slot))) == nullptr);  // stale gen
  CHECK(reg.from_context(as_handle(encode(handle_kind::op, cs.gen, 3, 0))) == nullptr);  // an op, not a context

  const std::uint32_t slot = cs.ops.alloc();
  cs.ops[slot].started_at.store(1);
  const decoded op = op_of(cs, slot);
  comm_state* found = nullptr;
  CHECK(reg.find_op(op, found) == &cs.ops[slot]);
  CHECK(found == &cs);

  std::uint32_t inflight = 99;
  CHECK(reg.retire(cs, 100ms, inflight));
  CHECK(inflight == 1);  // the op never completed: counted, not lost
  CHECK(reg.live(3) == nullptr);
  CHECK(reg.from_context(ctx) == nullptr);
  CHECK_FALSE(reg.retire(cs, 100ms, inflight));  // finalize twice
  CHECK(reg.spare() == 1);

  // The same state comes back for the next communicator, at the same index: nothing the previous
  // one handed out names anything in it.
  comm_state* again = reg.adopt(8, false, 0);
  CHECK(again == &cs);
  reg.publish(*again, 3);
  CHECK(reg.from_context(ctx) == nullptr);
  CHECK(reg.find_op(op, found) == nullptr);
  CHECK(again->ops.inflight() == 0);
  CHECK(reg.from_context(comm_registry::context_of(*again)) == again);
  CHECK(reg.retire(*again, 100ms, inflight));  // a registry frees only retired states
}

TEST_CASE("channel_hold: holds a live op, and nothing for stale, foreign or retired handles") {
  comm_registry reg;
  comm_state& cs = published(reg, 0);
  const std::uint32_t slot = cs.ops.alloc();
  const decoded op = op_of(cs, slot);
  {
    const comm_registry::channel_hold h(reg, op);
    REQUIRE(h);
    CHECK(&h.op() == &cs.ops[slot]);
    CHECK(&h.comm() == &cs);
    CHECK((cs.ops[slot].ch_inside.load() & 1) == 1);  // inside
  }
  CHECK((cs.ops[slot].ch_inside.load() & 1) == 0);  // left

  decoded stale = op;
  stale.gen += 1;
  CHECK_FALSE(comm_registry::channel_hold(reg, stale));
  decoded out_of_range = op;
  out_of_range.slot = 8;
  CHECK_FALSE(comm_registry::channel_hold(reg, out_of_range));
  decoded foreign = op;
  foreign.comm = max_plugin_comms + 5;
  CHECK_FALSE(comm_registry::channel_hold(reg, foreign));
  CHECK((cs.ops[slot].ch_inside.load() & 1) == 0);  // a rejected handle leaves no mark

  std::uint32_t inflight = 0;
  REQUIRE(reg.retire(cs, 100ms, inflight));
  CHECK_FALSE(comm_registry::channel_hold(reg, op));
}

TEST_CASE("retire waits for a channel hold, and parks a state whose hold outlasts its budget") {
  comm_registry reg;
  comm_state& a = published(reg, 1);
  const decoded op = op_of(a, a.ops.alloc());
  std::atomic<int> stage{0};
  std::thread holder([&] {
    const comm_registry::channel_hold h(reg, op);
    stage.store(h ? 1 : -1);
    while (stage.load() != 2) std::this_thread::yield();
  });
  while (stage.load() == 0) std::this_thread::yield();
  REQUIRE(stage.load() == 1);

  std::uint32_t inflight = 0;
  CHECK(reg.retire(a, 20ms, inflight));  // the hold is still there: not reusable
  CHECK(reg.in_limbo() == 1);
  CHECK(reg.spare() == 0);
  comm_state* b = reg.adopt(8, false, 0);
  CHECK(b != &a);  // a state in limbo is never handed out again
  reg.publish(*b, 2);

  stage.store(2);
  holder.join();
  CHECK(reg.retire(*b, 1s, inflight));  // a later quiet retire also parks the one in limbo
  CHECK(reg.in_limbo() == 0);
  CHECK(reg.spare() == 2);

  // With enough budget, retire returns once the hold has ended, and the state is reusable.
  comm_state& c = published(reg, 1);
  const decoded op_c = op_of(c, c.ops.alloc());
  stage.store(0);
  std::thread short_holder([&] {
    const comm_registry::channel_hold h(reg, op_c);
    stage.store(h ? 1 : -1);
    std::this_thread::sleep_for(30ms);
  });
  while (stage.load() == 0) std::this_thread::yield();
  REQUIRE(stage.load() == 1);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(reg.retire(c, 5s, inflight));
  CHECK(std::chrono::steady_clock::now() - t0 >= 10ms);  // it waited for the hold
  short_holder.join();
  CHECK(reg.in_limbo() == 0);
}

TEST_CASE("comm_registry threads: channel holds against retirement and reuse") {
  // One communicator index, published, retired and re-published over and over while a channel
  // thread holds whichever op the newest handle names. While a hold holds, the op's generation
  // and its record do not change (nothing is recycled under it); a stale handle never holds.
  comm_registry reg;
  std::atomic<std::uint64_t> current{0};  // the newest op handle (0: none yet)
  std::atomic<bool> stop{false};
  std::atomic<long> holds{0}, changed{0};
  std::thread channel([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t v = current.load(std::memory_order_acquire);
      if (!v) continue;
      const decoded k = decode(as_handle(v));
      const comm_registry::channel_hold h(reg, k);
      if (!h) continue;
      const std::uint32_t gen = h.op().gen.load(std::memory_order_relaxed);
      const std::uint64_t count = h.op().rec.count;  // plain field: TSan reports any racing write
      std::this_thread::yield();
      if (h.op().gen.load(std::memory_order_relaxed) != gen || h.op().rec.count != count || handle_gen(gen) != k.gen)
        changed.fetch_add(1);
      holds.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::uint32_t inflight = 0;
  int limbo_seen = 0;
  for (std::uint64_t i = 1; i <= 400; ++i) {
    comm_state* cs = reg.adopt(4, false, 0);
    reg.publish(*cs, 0);
    const std::uint32_t slot = cs->ops.alloc();
    cs->ops[slot].rec.count = i;  // written before the handle is handed out
    current.store(reinterpret_cast<std::uintptr_t>(as_handle(
                      encode(handle_kind::op, cs->ops[slot].gen.load(std::memory_order_relaxed), cs->handle, slot))),
                  std::memory_order_release);
    std::this_thread::yield();
    REQUIRE(reg.retire(*cs, 2s, inflight));
    limbo_seen += reg.in_limbo() != 0;
  }
  stop.store(true);
  channel.join();
  CHECK(changed.load() == 0);
  CHECK(holds.load() > 0);
  CHECK(limbo_seen == 0);  // 2 s is plenty: every retire found the state quiet
}

// ---- callback_recorder ----------------------------------------------------------------------------

namespace {

std::string fresh_capture_dir(const char* tag) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("ncclinsp_capture_" + std::string(tag) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> v;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

}  // namespace

TEST_CASE("callback_recorder threads: every line is written or counted, none torn, the file bound holds") {
  const std::string dir = fresh_capture_dir("threads");
  std::string error;
  // 1 MiB: the threads' ~40 B lines (8 x 30000, ~9.6 MB) overflow the file and, faster than the
  // writer, the ring.
  auto rec = callback_recorder::open(dir, "host\n with space", 1u << 20, 5, 22809, error);
  REQUIRE(rec);
  REQUIRE(rec->path().find("ncclinsp-host__with_space-") != std::string::npos);
  constexpr int threads = 8, per_thread = 30000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        void* h = reinterpret_cast<void*>(static_cast<std::uintptr_t>(t * per_thread + i + 1));
        abi::state_args a{};
        a.kernelCh.pTimer = static_cast<std::uint64_t>(i);
        rec->record(h, abi::st_kernel_ch_stop, &a);
      }
    });
  for (auto& t : ts) t.join();
  rec->close();
  const auto c = rec->dropped_and_written();
  CHECK(c.lines + c.ring_full + c.file_full + c.write_failed == std::uint64_t(threads) * per_thread);
  CHECK(c.ring_full + c.file_full > 0);  // which one depends on how far the writer keeps up
  CHECK(c.write_failed == 0);
  CHECK(std::filesystem::file_size(rec->path()) <= (1u << 20) + 64 * 1024);
  const auto lines = lines_of(rec->path());
  REQUIRE(!lines.empty());
  CHECK(lines.front() == "# ncclinsp-trace abi=5 nccl=22809 source=ncclinsp format=1");
  std::uint64_t records = 0;
  for (const auto& l : lines) {
    if (l.starts_with("#")) continue;
    ++records;
    INFO(l);
    REQUIRE(l.starts_with("R "));
    CHECK(l.find(" 22 ptimer=") != std::string::npos);
  }
  CHECK(records == c.lines);
  CHECK(lines.back().starts_with("# end lines=" + std::to_string(c.lines) + " ring_full=" +
                                 std::to_string(c.ring_full) + " file_full=" + std::to_string(c.file_full)));
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "callback_recorder: a second capture in the directory gets its own file, the file bound counts, an unusable directory is an error") {
  const std::string dir = fresh_capture_dir("names");
  std::string error;
  auto a = callback_recorder::open(dir, "h", 4096, 7, 0, error);
  auto b = callback_recorder::open(dir, "h", 1u << 20, 7, 0, error);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->path() != b->path());
  CHECK(b->path() == a->path() + ".1");
  // A writer that keeps up (a flush every 100 lines, the ring never full): the lines past the
  // 4 KiB bound are counted file_full, the rest written.
  for (int batch = 0; batch < 10; ++batch) {
    for (int i = 0; i < 100; ++i) a->stop(reinterpret_cast<void*>(static_cast<std::uintptr_t>(1000 + i)));
    REQUIRE(a->flush(std::chrono::seconds(10)));
  }
  a->close();
  b->close();
  const auto c = a->dropped_and_written();
  CHECK(c.ring_full == 0);
  CHECK(c.file_full > 0);
  CHECK(c.lines + c.file_full == 1000);
  CHECK(std::filesystem::file_size(a->path()) <= 4096 + 64 * 1024);
  auto bad = callback_recorder::open("/proc/no/such/dir", "h", 1u << 20, 7, 0, error);
  CHECK(!bad);
  CHECK(error.find("cannot create /proc/no/such/dir/ncclinsp-h-") == 0);
  std::filesystem::remove_all(dir);
}
