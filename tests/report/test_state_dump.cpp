// The state dumper (include/ncclinsp/plugin/state_dumper.hpp) with the plugin's own op lifecycle,
// its files read back by `ncclinsp-report hang`'s reader (tools/report/hang.hpp), its options, its
// signal, and the verdict on dumps written by it for a rank that never joined.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hang.hpp"
#include "ncclinsp/plugin/dump_signal.hpp"
#include "ncclinsp/plugin/op_lifecycle.hpp"
#include "ncclinsp/plugin/state_dumper.hpp"

namespace fs = std::filesystem;
namespace hang = ncclinsp::report::hang;
using namespace ncclinsp;
using namespace ncclinsp::plugin;

namespace {

std::string scratch(const std::string& name) {
  auto p = fs::temp_directory_path() / ("ncclinsp-state-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

struct logs {
  std::vector<std::string> lines;
  log_fn fn() {
    return [this](log_level, std::string_view m) { lines.emplace_back(m); };
  }
  bool has(std::string_view s) const {
    for (const auto& l : lines)
      if (l.find(s) != std::string::npos) return true;
    return false;
  }
};

process_identity ident(const std::string& node, long pid) {
  return {.node = node, .hostname = "host-" + node, .slurm_job_id = "77", .job_id = "77", .pid = pid};
}
comm_desc desc(const std::string& name, std::uint64_t hash, int rank, int nranks, int gpu) {
  return {.name = name,
          .hash = hash,
          .rank = rank,
          .nranks = nranks,
          .nnodes = 1,
          .device = gpu,
          .uuid = "GPU-test-" + std::to_string(gpu)};
}

/// One rank's communicator driven through the plugin's own op lifecycle: ops started (begin,
/// publish), channels started and ended as the event adapter marks them, completed (complete).
struct rank_comm {
  collector<> col;
  comm_state cs{16, false, 0};
  op_lifecycle ops{col, adapter_config{.require_kernel_timing = false}};  // every size, Send/Recv followed
  explicit rank_comm(const comm_desc& d) { cs.handle = col.add_comm(d); }

  std::uint32_t start(func f, std::uint64_t seq, std::uint64_t count, std::uint32_t channels, int peer = -1) {
    const std::uint32_t idx = ops.begin(cs, f, count, "ncclFloat32", channels, false);
    REQUIRE(idx != no_index);
    cs.ops[idx].rec.seq = seq;
    cs.ops[idx].rec.peer = peer;
    (void)ops.publish(cs, idx);
    return idx;
  }
  void channel(std::uint32_t idx, int ch, bool ended) {
    op_slot& s = cs.ops[idx];
    s.ch_begun.store(s.ch_begun.load() | std::uint64_t(1) << ch);
    relaxed_min(s.gpu_lo, 1'000'000 + static_cast<std::uint64_t>(ch));
    if (ended) {
      s.ch_ended.store(s.ch_ended.load() | std::uint64_t(1) << ch);
      relaxed_max(s.gpu_hi, 2'000'000 + static_cast<std::uint64_t>(ch));
    }
  }
  void finish(std::uint32_t idx) {
    ops.complete(cs, cs.ops[idx], /*enqueue_only=*/false);
    op_lifecycle::release(cs, idx, cs.ops[idx]);
  }
  void run(func f, std::uint64_t seq, std::uint64_t count, int channels) {
    const std::uint32_t idx = start(f, seq, count, static_cast<std::uint32_t>(channels));
    for (int c = 0; c < channels; ++c) channel(idx, c, true);
    finish(idx);
  }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("state dump: a known op history and the ops in flight, read back") {
  const std::string dir = scratch("known");
  logs lg;
  rank_comm rc(desc("fsdp", 0xabc, 3, 8, 1));
  for (std::uint64_t s = 0; s < 40; ++s) rc.run(func::all_reduce, s, 1 << 20, 4);  // 40 AllReduce, 4 MiB each
  rc.run(func::all_gather, 7, 1024, 2);
  const std::uint32_t a = rc.start(func::reduce_scatter, 12, 256, 4);  // in flight, 2 of 4 channels ended
  for (int c = 0; c < 4; ++c) rc.channel(a, c, c < 2);
  const std::uint32_t b = rc.start(func::send, 5, 64, 2, 6);  // in flight, not started on the GPU
  (void)b;

  state_dumper d({.dir = dir, .warn_after_s = 60, .every_s = 0}, ident("nodeA", 4242), lg.fn());
  d.add(&rc.cs, desc("fsdp", 0xabc, 3, 8, 1));
  REQUIRE(d.dump_now("signal"));
  const std::string path = dir + "/nodeA-pid4242-GPU-test-1.state.json";
  REQUIRE(fs::exists(path));
  CHECK(d.path_of(desc("x", 0, 0, 1, 1)) == path);

  hang::dumps ds = hang::read_dumps({dir});
  REQUIRE(ds.errors.empty());
  REQUIRE(ds.files.size() == 1);
  const hang::dump& f = ds.files[0];
  CHECK(f.reason == "signal");
  CHECK(f.node == "nodeA");
  CHECK(f.pid == 4242);
  CHECK(f.gpu == 1);
  CHECK(f.uuid == "GPU-test-1");
  CHECK(f.job_id == "77");
  REQUIRE(f.comms.size() == 1);
  const hang::comm_view& c = f.comms[0];
  CHECK(c.name == "fsdp");
  CHECK(c.hash == "0x0000000000000abc");
  CHECK(c.rank == 3);
  CHECK(c.nranks == 8);
  CHECK(c.last_seq.at("AllReduce") == 39);
  CHECK(c.last_seq.at("AllGather") == 7);
  CHECK(c.last_seq.count("ReduceScatter") == 0);
  // The history reads the last op_history::depth - 1 of the 41 completed (the oldest entry's slot is the
  // one the next completion writes): AllReduce 10..39, then the AllGather.
  REQUIRE(c.completed.size() == op_history::depth - 1);
  CHECK(c.completed.front().fn == "AllReduce");
  CHECK(c.completed.front().seq == 10);
  CHECK(c.completed[c.completed.size() - 2].seq == 39);
  CHECK(c.completed.back().fn == "AllGather");
  CHECK(c.completed.back().seq == 7);
  CHECK(c.completed.back().bytes == 4096);
  CHECK(c.completed.back().state == "completed");
  CHECK(c.completed.back().gpu_ns == 1'000'001);  // channel 1's stop - channel 0's start
  for (const auto& o : c.completed) {
    CHECK(o.end_ns >= o.start_ns);
    CHECK(o.end_ns <= f.time_ns);
  }
  // In flight, oldest first: the ReduceScatter with its channels, then the Send to 6.
  CHECK(c.inflight_total == 2);
  REQUIRE(c.inflight.size() == 2);
  const hang::op& rs = c.inflight[0];
  CHECK(rs.fn == "ReduceScatter");
  CHECK(rs.seq == 12);
  CHECK(rs.bytes == 1024);
  CHECK(rs.state == "started");
  CHECK(rs.channels == 4);
  CHECK(rs.ch_started == std::vector<int>{0, 1, 2, 3});
  CHECK(rs.ch_ended == std::vector<int>{0, 1});
  const hang::op& snd = c.inflight[1];
  CHECK(snd.fn == "Send");
  CHECK(snd.peer == 6);
  CHECK(snd.state == "enqueued");
  CHECK(snd.ch_started.empty());
  CHECK(lg.has("state dump (signal) written to " + path));
  // Atomic replacement: a second dump replaces the file, no temporary file is left.
  REQUIRE(d.dump_now("trigger"));
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  CHECK(files == 1);
  CHECK(slurp(path).find("\"reason\":\"trigger\"") != std::string::npos);
  d.remove(&rc.cs);
}

TEST_CASE("state dump: an op's identity packs hostile descriptor values without overflow") {
  using ncclinsp::plugin::op_ident;
  // NCCL's peer is an int: INT_MAX (a fuzzer's value) must pack without signed overflow, which a
  // constant expression may not have (the compiler rejects it) and UBSan reports at run time.
  static_assert(op_ident::pack_xfer(1, true, std::numeric_limits<std::int32_t>::max()) != 0);
  for (const std::int32_t peer :
       {-1, 0, 7, std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min()}) {
    const std::uint64_t x = op_ident::pack_xfer(~std::uint64_t{0}, true, peer);
    CHECK(op_ident::bytes(x) == op_ident::low40);  // capped, not wrapped
    CHECK(op_ident::bytes_valid(x));
    if (peer >= -1 && peer < (1 << 23) - 1) CHECK(op_ident::peer(x) == peer);
  }
  CHECK_FALSE(op_ident::bytes_valid(op_ident::pack_xfer(5, false, 3)));
}

TEST_CASE("state dump: bounded size, whole communicators only, most urgent first") {
  const std::string dir = scratch("bounded");
  logs lg;
  std::vector<std::unique_ptr<rank_comm>> comms;
  state_dumper d({.dir = dir, .every_s = 0, .max_kb = 16}, ident("n", 1), lg.fn());
  for (int i = 0; i < 12; ++i) {
    comms.push_back(std::make_unique<rank_comm>(desc("c" + std::to_string(i), 0x100 + i, 0, 2, 0)));
    for (std::uint64_t s = 0; s < 64; ++s) comms.back()->run(func::all_reduce, s, 1 << 20, 8);
    d.add(&comms.back()->cs, desc("c" + std::to_string(i), 0x100 + i, 0, 2, 0));
  }
  const std::uint32_t late = comms[7]->start(func::all_reduce, 64, 16, 8);  // the one op in flight: listed first
  comms[7]->cs.ops[late].started_at.store(detail::coarse_ns() - 1'000'000'000ull);
  REQUIRE(d.dump_now("signal"));
  const std::string path = dir + "/n-pid1-GPU-test-0.state.json";
  CHECK(fs::file_size(path) <= 16 * 1024);
  hang::dumps ds = hang::read_dumps({path});
  REQUIRE(ds.files.size() == 1);
  const auto& f = ds.files[0];
  REQUIRE(!f.comms.empty());
  CHECK(f.comms.size() < 12);
  CHECK(f.comms[0].name == "c7");
  CHECK(slurp(path).find("\"comms_left_out\":" + std::to_string(12 - f.comms.size())) != std::string::npos);
  for (auto& c : comms) d.remove(&c->cs);
}

TEST_CASE("state dump: options from the environment, bad values named") {
  logs lg;
  std::map<std::string, std::string> env = {{"NCCLINSP_STATE_WARN_S", "abc"},
                                            {"NCCLINSP_STATE_EVERY_S", "5"},
                                            {"NCCLINSP_STATE_MAX_KB", "1"},
                                            {"NCCLINSP_STATE_SIGNAL", "TERM"}};
  auto get = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  state_dump_options o = state_dump_options::from_env(lg.fn(), get, "/tmp/dumpdir");
  CHECK(o.enable);
  CHECK(o.dir == "/tmp/dumpdir");
  CHECK(o.warn_after_s == 60);
  CHECK(o.every_s == 5);
  CHECK(o.max_kb == 1024);
  CHECK(o.signal == 0);
  CHECK(lg.has("ignoring NCCLINSP_STATE_WARN_S=\"abc\": expected an integer in [1, 604800]"));
  CHECK(lg.has("ignoring NCCLINSP_STATE_MAX_KB=\"1\": expected an integer in [16, 1048576]"));
  CHECK(lg.has("ignoring NCCLINSP_STATE_SIGNAL=\"TERM\": expected off, USR1, USR2 or RTMIN+n"));
  env = {{"NCCLINSP_STATE", "0"}, {"NCCLINSP_STATE_DIR", "/x"}, {"NCCLINSP_STATE_SIGNAL", "sigusr1"}};
  o = state_dump_options::from_env(lg.fn(), get, "/tmp/dumpdir");
  CHECK(!o.enable);
  CHECK(o.dir == "/x");
  CHECK(o.signal == SIGUSR1);
  CHECK(o.describe() == "state dumps off");
  int sig = 0;
  CHECK(dump_signal::parse("RTMIN+2", sig));
  CHECK(sig == SIGRTMIN + 2);
  CHECK(dump_signal::parse("USR2", sig));
  CHECK(sig == SIGUSR2);
  CHECK(dump_signal::parse("off", sig));
  CHECK(sig == 0);
  CHECK_FALSE(dump_signal::parse(std::to_string(SIGINT), sig));
  CHECK_FALSE(dump_signal::parse("RTMIN+999", sig));
  CHECK_FALSE(dump_signal::parse("KILL", sig));
}

TEST_CASE("state dump: an unwritable directory gives one clear message, nothing thrown") {
  const std::string dir = scratch("unwritable");
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "x";
  logs lg;
  rank_comm rc(desc("tp", 1, 0, 2, 0));
  state_dumper d({.dir = file + "/sub", .every_s = 0}, ident("n", 2), lg.fn());
  d.add(&rc.cs, desc("tp", 1, 0, 2, 0));
  CHECK_FALSE(d.dump_now("signal"));
  CHECK_FALSE(d.dump_now("signal"));
  CHECK(d.failed() == 2);
  CHECK(d.written() == 0);
  std::size_t n = 0;
  for (const auto& l : lg.lines) n += l.find("cannot write") != std::string::npos;
  CHECK(n == 1);  // the same cause again is not logged twice
  CHECK(lg.has("state dumps: cannot write " + file + "/sub/n-pid2-GPU-test-0.state.json: Not a directory"));
  CHECK(lg.has("NCCLINSP_STATE_DIR"));
  d.remove(&rc.cs);
}

namespace {
std::atomic<int> g_previous_ran{0};
void previous_handler(int) { g_previous_ran.fetch_add(1); }
}  // namespace

TEST_CASE("state dump: the opt-in signal writes a dump, the previous handler still runs and comes back") {
  const int sig = SIGRTMIN + 3;
  struct sigaction prev {
  }, old{};
  prev.sa_handler = &previous_handler;
  sigemptyset(&prev.sa_mask);
  REQUIRE(::sigaction(sig, &prev, &old) == 0);
  const std::string dir = scratch("signal");
  logs lg;
  rank_comm rc(desc("tp", 9, 1, 2, 3));
  rc.run(func::all_reduce, 0, 1024, 2);
  {
    state_dumper d({.dir = dir, .every_s = 0, .signal = sig, .poll = std::chrono::milliseconds(20)}, ident("s", 3),
                   lg.fn());
    d.add(&rc.cs, desc("tp", 9, 1, 2, 3));
    const std::string path = dir + "/s-pid3-GPU-test-3.state.json";
    CHECK_FALSE(fs::exists(path));  // no heartbeat, nothing in flight: nothing written
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_FALSE(fs::exists(path));
    REQUIRE(::raise(sig) == 0);
    CHECK(g_previous_ran.load() == 1);  // chained
    for (int i = 0; i < 200 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(fs::exists(path));
    CHECK(slurp(path).find("\"reason\":\"signal\"") != std::string::npos);
    // Touching the trigger file asks again, once per new mtime.
    std::ofstream(dir + "/" + state_dumper::trigger_name) << "";
    for (int i = 0; i < 200 && slurp(path).find("\"reason\":\"trigger\"") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(slurp(path).find("\"reason\":\"trigger\"") != std::string::npos);
    d.remove(&rc.cs);  // the last communicator: the previous action is back
    struct sigaction now {};
    REQUIRE(::sigaction(sig, nullptr, &now) == 0);
    CHECK(!(now.sa_flags & SA_SIGINFO));
    CHECK(now.sa_handler == &previous_handler);
  }
  ::sigaction(sig, &old, nullptr);
}

TEST_CASE("state dump: an op in flight past the threshold is dumped once by the thread") {
  const std::string dir = scratch("threshold");
  logs lg;
  rank_comm rc(desc("dp", 5, 0, 2, 0));
  const std::uint32_t idx = rc.start(func::all_reduce, 3, 1024, 2);
  // Started 2 s ago as the coarse clock counts it (the threshold's unit is the second).
  rc.cs.ops[idx].started_at.store(detail::coarse_ns() - 2'000'000'000ull);
  state_dumper d({.dir = dir, .warn_after_s = 1, .every_s = 0, .poll = std::chrono::milliseconds(20)}, ident("h", 4),
                 lg.fn());
  d.add(&rc.cs, desc("dp", 5, 0, 2, 0));
  const std::string path = dir + "/h-pid4-GPU-test-0.state.json";
  for (int i = 0; i < 300 && !fs::exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(path));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(d.written() == 1);  // once per op, not at every poll
  hang::dumps ds = hang::read_dumps({path});
  REQUIRE(ds.files.size() == 1);
  CHECK(ds.files[0].reason == "hang");
  REQUIRE(ds.files[0].comms[0].inflight.size() == 1);
  CHECK(ds.files[0].comms[0].inflight[0].age_s >= 2.0);
  d.remove(&rc.cs);
}

TEST_CASE("hang verdict: the rank that never joined, its victims, and a gone process, from written dumps") {
  // A 4-rank job on 2 nodes: world (4 ranks) and tp per node (2 ranks). Rank 2 stopped after
  // AllReduce 9 on world; ranks 0, 1, 3 wait inside AllReduce 10. Rank 3's tp peer (rank 2) never
  // joined tp either; rank 0's tp peer (rank 1) waits in world.
  const std::string dir = scratch("verdict");
  logs lg;
  struct rank {
    std::unique_ptr<rank_comm> world, tp;
  };
  std::vector<rank> r(4);
  std::vector<std::unique_ptr<state_dumper>> dumpers;
  for (int i = 0; i < 4; ++i) {
    r[i].world = std::make_unique<rank_comm>(desc("world", 0xA, i, 4, i % 2));
    r[i].tp = std::make_unique<rank_comm>(desc("tp", 0xB0 + i / 2, i % 2, 2, i % 2));
    for (std::uint64_t s = 0; s < 10; ++s) r[i].world->run(func::all_reduce, s, 1 << 20, 2);
    r[i].tp->run(func::all_gather, 0, 1024, 2);
  }
  for (int i : {0, 1, 3}) {
    const std::uint32_t idx = r[i].world->start(func::all_reduce, 10, 1 << 20, 2);
    r[i].world->cs.ops[idx].started_at.store(detail::coarse_ns() - 90'000'000'000ull);
  }
  {
    const std::uint32_t idx = r[3].tp->start(func::all_gather, 1, 1024, 2);  // rank 3 in tp, rank 2 is not
    r[3].tp->cs.ops[idx].started_at.store(detail::coarse_ns() - 80'000'000'000ull);
  }
  for (int i = 0; i < 4; ++i) {
    // every_s 30 (the default: a dump 95 s behind is stale); the thread never polls during the test.
    dumpers.push_back(std::make_unique<state_dumper>(
        state_dump_options{.dir = dir + "/node" + std::to_string(i / 2), .poll = std::chrono::hours(1)},
        ident("node" + std::to_string(i / 2), 100 + i), lg.fn()));
    dumpers.back()->add(&r[i].world->cs, desc("world", 0xA, i, 4, i % 2));
    dumpers.back()->add(&r[i].tp->cs, desc("tp", 0xB0 + i / 2, i % 2, 2, i % 2));
    REQUIRE(dumpers.back()->dump_now("signal"));
  }
  hang::dumps ds = hang::read_dumps({dir});
  REQUIRE(ds.files.size() == 4);
  std::vector<hang::job_verdict> v = hang::analyze(ds, {});
  REQUIRE(v.size() == 1);
  REQUIRE(v[0].hang);
  const auto& c0 = v[0].comms.at(0);
  CHECK(c0.kind == "never_joined");
  REQUIRE(c0.culprits.size() == 1);
  CHECK(c0.ranks[c0.culprits[0]].rank == 2);
  CHECK(ds.files[c0.ranks[c0.culprits[0]].dump].node == "node1");
  CHECK(ds.files[c0.ranks[c0.culprits[0]].dump].global_rank == 2);
  bool world = false, tp1 = false;
  for (const auto& c : v[0].comms) {
    if (c.name == "world") {
      world = true;
      CHECK(c.seq == 10);
      CHECK(c.fn == "AllReduce");
      CHECK(c.ranks[2].what == "not_joined");
      CHECK(c.ranks[0].what == "inside");
      CHECK(c.ranks[3].what == "inside");
    }
    if (c.name == "tp" && c.hash == "0x00000000000000b1") {
      tp1 = true;
      CHECK(c.kind == "never_joined");
      CHECK(c.ranks[0].what == "not_joined");  // rank 2 of world is rank 0 of tp on node1
    }
  }
  CHECK(world);
  CHECK(tp1);
  std::ostringstream text;
  hang::write_text(text, ds, v);
  CHECK(text.str().find("Verdict: rank 2 of world never joined world 0x000000000000000a AllReduce seq 10") !=
        std::string::npos);
  CHECK(text.str().find("node1 GPU 0 (GPU-test-0), global rank 2 (world)") != std::string::npos);
  CHECK(text.str().find("never joined AllReduce seq 10 (its last: seq 9); last completed AllReduce seq 9 (4 MiB)") !=
        std::string::npos);

  // Rank 2's process dies instead: its dump is the last it wrote, 200 s before its peers'.
  const std::string p2 = dir + "/node1/node1-pid102-GPU-test-0.state.json";
  std::string s = slurp(p2);
  const auto at = s.find("\"time_ns\":") + 10;
  const auto end = s.find(',', at);
  s.replace(at, end - at, std::to_string(std::stoull(s.substr(at, end - at)) - 200'000'000'000ull));
  std::ofstream(p2, std::ios::trunc) << s;
  ds = hang::read_dumps({dir});
  v = hang::analyze(ds, {});
  REQUIRE(v[0].hang);
  CHECK(v[0].comms.at(0).kind == "process_gone");
  CHECK(v[0].comms.at(0).ranks[v[0].comms.at(0).culprits.at(0)].rank == 2);
  std::ostringstream json;
  hang::write_json(json, ds, v);
  CHECK(json.str().find("\"kind\":\"process_gone\",") != std::string::npos);
  CHECK(json.str().find("\"state\":\"gone\"") != std::string::npos);
  for (int i = 0; i < 4; ++i) {
    dumpers[i]->remove(&r[i].world->cs);
    dumpers[i]->remove(&r[i].tp->cs);
  }
}
