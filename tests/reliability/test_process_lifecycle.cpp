// Reliability: hostile input through the loaded plugin, no torn files under concurrent readers, no
// silent loss. The plugin keeps process-wide state configured from the environment at its first init,
// so every plugin scenario runs in a forked child (which dlopens the plugin); the parent checks the
// files. Under ASan each child runs LeakSanitizer itself before it exits.
// This file: finalize racing NCCL's threads, fork after init, two processes on one GPU, re-init.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "reliability_harness.hpp"

namespace sim = ncclinsp::sim;
namespace abi = ncclinsp::abi;
using namespace ncclinsp_test;
using namespace ncclinsp_test::reliability;
using namespace std::chrono_literals;

// ---- finalize racing NCCL's threads ------------------------------------------------------------------

namespace {
/// Raw calls through the newest table (abi::newest) for one communicator, as NCCL's threads make them
/// (no driver state shared between the threads, so only the plugin's own synchronization is exercised).
struct raw_comm {
  const abi::version<abi::newest>::table* t;
  void* ctx = nullptr;
  static constexpr int channels = 2;

  void* start_coll(std::uint64_t seq) const {
    abi::version<abi::newest>::descr d{};
    d.type = abi::ev_coll;
    d.coll.seqNumber = seq;
    d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32";
    d.coll.count = 1 << 20;
    d.coll.nChannels = channels;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    void* h = nullptr;
    t->startEvent(ctx, &h, &d);
    return h;
  }
  /// The proxy side of one op: ProxyOps and every KernelCh start, stop state and stop.
  void kernel(void* parent, std::uint64_t at) const {
    for (std::uint8_t ch = 0; ch < channels; ++ch) {
      abi::version<abi::newest>::descr d{};
      d.type = abi::ev_proxy_op;
      d.parentObj = parent;
      d.proxyOp.pid = ::getpid();
      d.proxyOp.channelId = ch;
      void* ph = nullptr;
      t->startEvent(ctx, &ph, &d);
      t->stopEvent(ph);
      d = {};
      d.type = abi::ev_kernel_ch;
      d.parentObj = parent;
      d.kernelCh.channelId = ch;
      d.kernelCh.pTimer = at;
      void* kh = nullptr;
      t->startEvent(ctx, &kh, &d);
      abi::state_args a{};
      a.kernelCh.pTimer = at + 40'000 + ch;
      t->recordEventState(kh, abi::st_kernel_ch_stop, &a);
      t->stopEvent(kh);
    }
  }
};
}  // namespace

TEST_CASE("finalize racing NCCL's threads: events during and after finalize, kernels completing before their Coll stop",
          "[reliability][threads][teardown]") {
  // finalize frees a communicator's state while NCCL's proxy thread (or, since 2.31, the
  // communicator's profiler thread) may still deliver KernelCh/ProxyOp events for its ops. Every op
  // must end up completed or abandoned, exactly once, and nothing may touch freed state (this test
  // runs under ThreadSanitizer in the test command, where such an access is reported).
  const std::string dir = fresh_dir("rel");
  constexpr int rounds = 24, per_round = 64, in_order = 600;
  REQUIRE(in_child(base_env(dir), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            const auto* t = lib.table<abi::newest>();
            int mask = 0;
            raw_comm keeper{t};
            if (t->init(&keeper.ctx, 1, &mask, "keeper", 1, 2, 0, capture_logger) != abi::success) return 1;
            // Kernels that complete before their Coll stop, more of them than the pool holds: each
            // releases its slot exactly once, at whichever of the two comes last.
            raw_comm early{t};
            if (t->init(&early.ctx, 2, &mask, "kernel_first", 1, 2, 0, capture_logger) != abi::success) return 2;
            for (int i = 0; i < in_order; ++i) {
              void* h = early.start_coll(i + 1);
              if (!h) return 3;
              std::thread proxy([&] { early.kernel(h, t0 + i * 100'000ull); });
              proxy.join();
              t->stopEvent(h);
              t->stopEvent(h);  // and a second stop after completion: ignored
            }
            t->finalize(early.ctx);
            for (int r = 0; r < rounds; ++r) {
              raw_comm c{t};
              const std::string name = "race" + std::to_string(r);
              if (t->init(&c.ctx, 100u + r, &mask, name.c_str(), 2, 4, 0, capture_logger) != abi::success) return 4;
              std::vector<void*> ops;
              for (int i = 0; i < per_round; ++i) {
                ops.push_back(c.start_coll(i + 1));
                if (!ops.back()) return 5;
                if (i % 2 == 0) t->stopEvent(ops.back());  // odd ops: Coll stop only after the kernel (or never)
              }
              std::atomic<int> progressed{0};
              std::atomic<bool> finalized{false};
              std::thread proxy([&] {  // completes the ops, then keeps delivering events on their handles
                int after = 0;
                for (int pass = 0; after < 3; ++pass) {
                  for (int i = 0; i < per_round; ++i) {
                    c.kernel(ops[i], t0 + (pass * per_round + i) * 100'000ull);
                    if (pass == 0) progressed.store(i + 1, std::memory_order_release);
                  }
                  if (finalized.load(std::memory_order_acquire)) ++after;
                }
              });
              while (progressed.load(std::memory_order_acquire) < per_round / 2) std::this_thread::yield();
              for (int i = 1; i < per_round / 2; i += 2) t->stopEvent(ops[i]);  // Coll stops racing the kernels
              t->finalize(c.ctx);                                               // half the ops may still be in flight
              finalized.store(true, std::memory_order_release);
              for (int i = per_round / 2 + 1; i < per_round; i += 2) t->stopEvent(ops[i]);  // late Coll stops: ignored
              proxy.join();
            }
            t->finalize(keeper.ctx);
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  const std::string text = slurp(proms[0]);
  INFO(text.substr(0, 3000));
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"kernel_first\""}) == in_order);
  CHECK(sample(text, "ncclinsp_inflight_ops", {"comm_name=\"kernel_first\""}) == 0);
  const double pool_full = sample(text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""});
  CHECK((std::isnan(pool_full) || pool_full == 0));  // every slot came back
  for (int r = 0; r < rounds; ++r) {
    const std::string name = "comm_name=\"race" + std::to_string(r) + "\"";
    const double done = sample(text, "ncclinsp_ops_total", {name});
    const double abandoned = sample(text, "ncclinsp_abandoned_ops_total", {name});
    INFO(name << ": completed " << done << ", abandoned " << abandoned);
    CHECK(done >= per_round / 2);
    CHECK(done + abandoned == per_round);  // exactly once each: not both, not neither
    CHECK(sample(text, "ncclinsp_inflight_ops", {name}) == 0);
  }
}

// ---- fork, re-init, two processes ---------------------------------------------------------------------

TEST_CASE("fork() after init: the child runs without ncclinsp, exits at once and leaves the parent's files alone",
          "[reliability][fork]") {
  // A data-loader worker or a launcher forks a process that has NCCL communicators. The child has
  // only the forking thread: the exporter thread is gone and the plugin's locks may be copied
  // held. It must not wait for that exporter (at finalize or at exit) nor write the parent's files.
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  env["NCCLINSP_PROM_KEEP_FILES"] = "0";  // a child that shut the sink down would delete the file
  REQUIRE(in_child(env, [&dir] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            sim::comm_driver c(lib, {.comm_hash = 31, .name = "parent", .n_ranks = 2});
            one_op(c);
            const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");
            if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"parent\""}) == 1; }))
              return 1;
            const std::uint64_t before = mono_ns();
            std::fflush(nullptr);
            const pid_t pid = ::fork();
            if (pid == 0) {
              // The child: a new communicator runs without ncclinsp; the inherited one's finalize
              // returns at once; exit() does not wait for the parent's exporter.
              sim::comm_driver other(lib, {.comm_hash = 32, .name = "child", .n_ranks = 2});
              if (other.init_result() != abi::success || other.context()) ::_exit(2);
              one_op(other);
              lib.table<abi::newest>()->finalize(c.context());
              std::exit(0);
            }
            int st = 0;
            ::waitpid(pid, &st, 0);
            const double child_ms = static_cast<double>(mono_ns() - before) * 1e-6;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
            if (child_ms > 500) {
              std::fprintf(stderr, "the forked child took %.0f ms to finish\n", child_ms);
              return 4;
            }
            // The parent goes on: its file is still there and gets the next op.
            one_op(c, t0 + 1'000'000);
            if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"parent\""}) == 2; }))
              return 5;
            if (slurp(prom).find("comm_name=\"child\"") != std::string::npos) return 6;
            return 0;
          }) == 0);
  CHECK(files_in(dir, ".prom").empty());  // KEEP_FILES=0: the parent removed it at its own teardown
}

TEST_CASE("state dumps: the last finalize removes them (NCCLINSP_PROM_KEEP_FILES=1 keeps them), a kill leaves them",
          "[reliability][statefiles]") {
  // The dumps share node_exporter's textfile directory with every job of the node: a process that
  // ends normally takes its own away, as its .prom files; a killed one leaves them as evidence.
  for (const std::string end : {"normal", "keep", "kill"}) {
    INFO(end);
    const std::string dir = fresh_dir("rel");
    auto env = base_env(dir);
    env["NCCLINSP_PROM_KEEP_FILES"] = end == "keep" ? "1" : "0";
    const int rc = in_child(env, [&dir, &end] {
      sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
      set_device(0);
      sim::comm_driver a(lib, {.comm_hash = 41, .name = "a", .n_ranks = 2});
      sim::comm_driver b(lib, {.comm_hash = 42, .name = "b", .n_ranks = 2});
      one_op(a);
      if (!wait_for([&] { return files_in(dir, ".state.json").size() == 1; })) return 1;  // the first heartbeat
      if (end == "kill") ::raise(SIGKILL);
      b.finalize();
      if (files_in(dir, ".state.json").size() != 1) return 2;  // a communicator is left on the GPU
      a.finalize();  // the last: finalize returns once the dumper's thread removed the file
      return files_in(dir, ".state.json").size() == (end == "keep" ? 1u : 0u) ? 0 : 3;
    });
    CHECK(rc == (end == "kill" ? -SIGKILL : 0));
    CHECK(files_in(dir, ".state.json").size() == (end == "normal" ? 0u : 1u));
  }
}

TEST_CASE("two processes on one GPU: each keeps a .prom file of its own, neither hides the other",
          "[reliability][twoproc]") {
  // Two processes on the same GPU (MPS, two jobs on one node) name their file after the same
  // UUID. Sharing it, each export would replace the other process's series. The first keeps the
  // name, the second writes `..._<uuid>.job-<key>.pid<pid>.prom` (node_exporter reads every *.prom).
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  const auto spawn = [&](const std::string& me, const std::string& other) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int rc = 0;
    {
      sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
      set_device(0);
      sim::comm_driver c(lib, {.comm_hash = std::hash<std::string>{}(me), .name = me, .n_ranks = 2});
      one_op(c);
      std::ofstream(dir + "/" + me + ".ready") << "1\n";
      if (!wait_for([&] { return ::access((dir + "/" + other + ".ready").c_str(), F_OK) == 0; }, 10s)) rc = 1;
      for (int i = 0; i < 5; ++i) {  // both alive, both exporting every 100 ms
        one_op(c, t0 + (i + 1) * 1'000'000ull);
        ::usleep(60'000);
      }
      std::ofstream(dir + "/" + me + ".done") << "1\n";
      if (!wait_for([&] { return ::access((dir + "/" + other + ".done").c_str(), F_OK) == 0; }, 10s)) rc = 2;
    }
    std::fflush(nullptr);
    std::exit(rc);
  };
  const pid_t a = spawn("procA", "procB"), b = spawn("procB", "procA");
  int sa = 0, sb = 0;
  ::waitpid(a, &sa, 0);
  ::waitpid(b, &sb, 0);
  REQUIRE(WIFEXITED(sa));
  REQUIRE(WIFEXITED(sb));
  CHECK(WEXITSTATUS(sa) == 0);
  CHECK(WEXITSTATUS(sb) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 2);
  const std::string shared_name = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");  // one job: SLURM_JOB_ID 5
  CHECK(std::count(proms.begin(), proms.end(), shared_name) == 1);
  int seen_a = 0, seen_b = 0;
  for (const auto& f : proms) {
    const std::string text = slurp(f);
    INFO(f << "\n" << text.substr(0, 1500));
    CHECK(prom_well_formed(text));
    const double na = sample(text, "ncclinsp_ops_total", {"comm_name=\"procA\""});
    const double nb = sample(text, "ncclinsp_ops_total", {"comm_name=\"procB\""});
    CHECK(std::isnan(na) != std::isnan(nb));  // each file holds exactly one process's series
    seen_a += na == 6;
    seen_b += nb == 6;
  }
  CHECK(seen_a == 1);
  CHECK(seen_b == 1);
}

TEST_CASE("re-init while the old exporter is still writing, after dlclose and dlopen: both exports land, no torn file",
          "[reliability][reinit]") {
  // The last communicator is destroyed while the final export is stuck (the JSON file is a FIFO
  // nobody reads yet), NCCL unloads the plugin (dlclose) and loads it again for a new
  // communicator. The new exporter must run beside the old one; readers of the .prom file see
  // complete files throughout; once the FIFO is read both exports complete; counters continue.
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir, "prom,json");
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  REQUIRE(in_child(env, [&dir] {
            const std::string fifo = dir + "/" + hostname() + "-pid" + std::to_string(::getpid()) + ".log";
            if (::mkfifo(fifo.c_str(), 0644) != 0) return 1;
            const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");
            std::atomic<bool> stop{false};
            std::atomic<int> reads{0}, torn{0};
            std::thread reader([&] {  // node_exporter
              while (!stop.load()) {
                const std::string text = slurp(prom);
                if (!text.empty()) {
                  ++reads;
                  if (!prom_well_formed(text)) ++torn;
                }
              }
            });
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            {
              sim::comm_driver a(lib, {.comm_hash = 41, .name = "before", .n_ranks = 2});
              for (int i = 0; i < 20; ++i) one_op(a, t0 + i * 1'000'000ull);
              const auto begin = std::chrono::steady_clock::now();
              a.finalize();  // the final export blocks on the FIFO: left running
              if (std::chrono::steady_clock::now() - begin > 250ms) return 2;
            }
            lib.close();  // dlclose, dlopen, a new communicator: a new exporter beside the stuck one
            if (!lib.open(NCCLINSP_PLUGIN_SO, abi::newest)) return 3;
            sim::comm_driver b(lib, {.comm_hash = 42, .name = "after", .n_ranks = 2});
            if (b.init_result() != abi::success || !b.context()) return 4;
            for (int i = 0; i < 7; ++i) one_op(b, t0 + i * 1'000'000ull);
            std::mutex json_mu;
            std::string json;
            std::atomic<bool> drained{false};
            std::thread drain([&] {  // the stuck filesystem recovers: every writer's open succeeds from now on
              while (!drained.load()) {
                const int fd = ::open(fifo.c_str(), O_RDONLY);
                char buf[4096];
                for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
                  std::lock_guard lk(json_mu);
                  json.append(buf, static_cast<std::size_t>(n));
                }
                ::close(fd);
              }
            });
            const auto records_of = [&](const char* name) {
              std::lock_guard lk(json_mu);
              std::size_t n = 0;
              for (std::size_t p = 0;
                   (p = json.find(std::string("\"comm_name\":\"") + name + "\"", p)) != std::string::npos; ++p)
                ++n;
              return n;
            };
            const bool both = wait_for([&] {
              const std::string text = slurp(prom);
              return sample(text, "ncclinsp_ops_total", {"comm_name=\"before\""}) == 20 &&
                     sample(text, "ncclinsp_ops_total", {"comm_name=\"after\""}) == 7;
            });
            b.finalize();
            // The old exporter's final export (before) and the new one's (after) reach the file.
            const bool landed = wait_for([&] { return records_of("before") >= 20 && records_of("after") >= 7; }, 10s);
            wait_for([&] { return reads.load() >= 10; });  // a slow reader (ASan, busy machine) still gets its 10 reads
            stop = true;
            reader.join();
            drained = true;
            for (int i = 0; i < 100; ++i) {  // unblock the drain's open(): be its writer once
              const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
              if (w >= 0) ::close(w);
              ::usleep(10'000);
              if (w >= 0) break;
            }
            drain.join();
            if (!landed) {
              std::fprintf(stderr, "JSON: %zu records of before, %zu of after\n", records_of("before"),
                           records_of("after"));
              return 7;
            }
            if (!both) return 5;
            if (torn.load() != 0 || reads.load() < 10) {
              std::fprintf(stderr, "%d torn of %d reads\n", torn.load(), reads.load());
              return 6;
            }
            return 0;
          }) == 0);
}
