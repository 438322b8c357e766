// Sampled ProxyOp/ProxyStep accounting (NCCLINSP_PROXY=1): a scripted event sequence straight
// through the plugin's exported tables of the newest and the oldest ABI version (the ProxyStep
// transitions timed by real sleeps), then the wait seconds per peer, direction and state, bytes and
// steps read back from the .prom file the plugin wrote.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"

namespace abi = ncclinsp::abi;
namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;

namespace {

std::map<std::string, std::string> proxy_env(const std::string& dir, const char* sample) {
  return {{"NCCL_INSPECTOR_ENABLE", "1"},    {"NCCL_INSPECTOR_PROM_DUMP", "1"},
          {"NCCL_INSPECTOR_DUMP_DIR", dir},  {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
          {"NCCLINSP_NODE_NAME", "nodeP"},   {"NCCLINSP_PROXY", "1"},
          {"NCCLINSP_PROXY_SAMPLE", sample}, {"SLURM_JOB_ID", "88"},
          {"NCCLINSP_PROM_KEEP_FILES", "1"}};
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

/// Scripted timings (ms): per send step GPU 4, peer credit 2, network 12; per recv step network
/// 15, flush 1, GPU 3. Two steps each way, on peers 2 (send) and 0 (recv).
template <class Descr, class Table>
int drive(const Table* t, int abi_version) {
  void* ctx = nullptr;
  int mask = 0;
  abi::result_t r;
  if constexpr (std::is_same_v<Descr, abi::descr_v4>)
    r = t->init(&ctx, &mask, "dp", 0xfeed, 2, 4, 1, nullptr);
  else
    r = t->init(&ctx, 0xfeed, &mask, "dp", 2, 4, 1, nullptr);
  if (r != abi::success || !ctx) return 10;
  if (!(mask & abi::ev_proxy_op) || !(mask & abi::ev_proxy_step) || !(mask & abi::ev_kernel_ch)) return 11;
  (void)abi_version;

  auto start = [&](Descr& d) {
    void* h = nullptr;
    t->startEvent(ctx, &h, &d);
    return h;
  };
  auto proxy_op = [&](void* parent, int peer, int is_send, pid_t pid) {
    Descr d{};
    d.type = abi::ev_proxy_op;
    d.parentObj = parent;
    d.rank = 1;
    d.proxyOp.pid = pid;
    d.proxyOp.channelId = 0;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 2;
    d.proxyOp.chunkSize = 1 << 19;
    d.proxyOp.isSend = is_send;
    return start(d);
  };
  auto step = [&](void* op, int i) {
    Descr d{};
    d.type = abi::ev_proxy_step;
    d.parentObj = op;
    d.rank = 1;
    d.proxyStep.step = i;
    return start(d);
  };
  auto rec = [&](void* h, int state, std::size_t bytes) {
    abi::state_args a{};
    a.proxyStep.transSize = bytes;
    t->recordEventState(h, static_cast<abi::event_state>(state), &a);
  };

  for (std::uint64_t seq : {0, 1}) {  // NCCLINSP_PROXY_SAMPLE=2: seq 0 sampled, 1 not
    Descr c{};
    c.type = abi::ev_coll;
    c.rank = 1;
    c.coll.seqNumber = seq;
    c.coll.func = "AllReduce";
    c.coll.count = 1u << 20;
    c.coll.datatype = "ncclFloat32";
    c.coll.nChannels = 1;
    c.coll.algo = "RING";
    c.coll.proto = "SIMPLE";
    void* coll = start(c);
    if (!coll) return 12;
    void* send = proxy_op(coll, 2, 1, ::getpid());
    void* recv = proxy_op(coll, 0, 0, ::getpid());
    if (proxy_op(coll, 3, 1, ::getpid() + 1)) return 13;  // PXN: another process's op
    if (seq == 1) {
      if (send || recv) return 14;  // unsampled: NULL, so NCCL emits no steps
    } else {
      if (!send || !recv) return 15;
      for (int i = 0; i < 2; ++i) {
        void* s = step(send, i);
        if (!s) return 16;
        rec(s, 8, 1000);
        sleep_ms(4);
        rec(s, 20, 1000);
        sleep_ms(2);
        rec(s, 9, 1000);
        sleep_ms(12);
        t->stopEvent(s);
      }
      // Two receive steps in flight at once (NCCL posts several): each keeps its own state.
      void* a = step(recv, 0);
      void* b = step(recv, 1);
      if (!a || !b || a == b) return 17;
      rec(a, 10, 3000);
      rec(b, 10, 5000);
      sleep_ms(15);
      rec(a, 11, 3000);
      sleep_ms(1);
      rec(a, 12, 3000);
      sleep_ms(3);
      t->stopEvent(a);
      rec(b, 11, 5000);
      sleep_ms(1);
      rec(b, 12, 5000);
      sleep_ms(3);
      t->stopEvent(b);
      t->stopEvent(b);                                                        // stopped twice: ignored
      rec(b, 10, 1 << 30);                                                    // a state after stop: ignored
      t->recordEventState(send, static_cast<abi::event_state>(19), nullptr);  // ProxyOpInProgress
    }
    t->stopEvent(send);
    t->stopEvent(recv);
    Descr k{};
    k.type = abi::ev_kernel_ch;
    k.parentObj = coll;
    k.kernelCh.channelId = 0;
    k.kernelCh.pTimer = t0 + seq * 1'000'000;
    void* ch = start(k);
    abi::state_args ka{};
    ka.kernelCh.pTimer = t0 + seq * 1'000'000 + 100'000;
    t->recordEventState(ch, abi::st_kernel_ch_stop, &ka);
    t->stopEvent(ch);
    t->stopEvent(coll);
  }
  // Garbage handles with proxy states are ignored.
  for (std::uintptr_t bogus : {std::uintptr_t{0x10}, ~std::uintptr_t{0}, std::uintptr_t{0xC000000000000002ull},
                               std::uintptr_t{0xC0000000000fff02ull}, std::uintptr_t{0xC000000000000001ull}}) {
    abi::state_args a{};
    for (int st : {8, 9, 10, 11, 12, 20})
      t->recordEventState(reinterpret_cast<void*>(bogus), static_cast<abi::event_state>(st), &a);
    t->stopEvent(reinterpret_cast<void*>(bogus));
    Descr d{};
    d.type = abi::ev_proxy_step;
    d.parentObj = reinterpret_cast<void*>(bogus);
    void* h = nullptr;
    t->startEvent(ctx, &h, &d);
    if (h) return 18;
  }
  t->finalize(ctx);
  return 0;
}

}  // namespace

TEST_CASE("proxy accounting: wait seconds by peer, direction and state, bytes and steps, sampled by sequence number",
          "[plugin][proxy]") {
  for (int v : {abi::newest, abi::oldest}) {
    INFO("ABI v" << v);
    const std::string dir = fresh_dir("proxy");
    REQUIRE(in_child(proxy_env(dir, "2"), [v] {
              sim::plugin_library lib(NCCLINSP_PLUGIN_SO, v);
              set_device(2);
              return v == abi::newest ? drive<abi::version<abi::newest>::descr>(lib.table<abi::newest>(), abi::newest)
                                      : drive<abi::version<abi::oldest>::descr>(lib.table<abi::oldest>(), abi::oldest);
            }) == 0);
    const auto files = files_in(dir, ".prom");
    REQUIRE(files.size() == 1);
    const std::string text = slurp(files[0]);
    INFO(text.substr(text.find("ncclinsp_proxy") == std::string::npos ? 0 : text.find("ncclinsp_proxy"))
             .substr(0, 4000));
    CHECK(text.find("# TYPE ncclinsp_proxy_wait_seconds_total counter") != std::string::npos);
    auto wait = [&](const char* peer, const char* dirn, const char* state) {
      return sample(text, "ncclinsp_proxy_wait_seconds_total",
                    {"comm_name=\"dp\"", std::string("peer=\"") + peer + "\"",
                     std::string("direction=\"") + dirn + "\"", std::string("state=\"") + state + "\""});
    };
    // Lower bounds are the scripted sleeps; the upper bounds allow a loaded machine's late wake-ups.
    auto within = [](double v, double ms, int n) {
      return v >= ms * 1e-3 && v < ms * 1e-3 + n * 0.15;
    };  // sleeps overshoot on a loaded machine
    CHECK(within(wait("2", "send", "gpu"), 2 * 4, 2));
    CHECK(within(wait("2", "send", "peer_credit"), 2 * 2, 2));
    CHECK(within(wait("2", "send", "network"), 2 * 12, 2));
    CHECK(within(wait("0", "recv", "network"), 15 + 15 + 1 + 3, 2));  // b waited while a finished
    CHECK(within(wait("0", "recv", "flush"), 2 * 1, 2));
    CHECK(within(wait("0", "recv", "gpu"), 2 * 3, 2));
    CHECK(sample(text, "ncclinsp_proxy_bytes_total", {"peer=\"2\"", "direction=\"send\""}) == 2000);
    CHECK(sample(text, "ncclinsp_proxy_bytes_total", {"peer=\"0\"", "direction=\"recv\""}) == 8000);
    CHECK(sample(text, "ncclinsp_proxy_steps_total", {"peer=\"2\"", "direction=\"send\""}) == 2);
    CHECK(sample(text, "ncclinsp_proxy_steps_total", {"peer=\"0\"", "direction=\"recv\""}) == 2);
    CHECK(std::isnan(sample(text, "ncclinsp_proxy_steps_total", {"peer=\"3\""})));  // the foreign-pid op
    CHECK(sample(text, "ncclinsp_ops_total", {"collective=\"AllReduce\""}) == 2);   // both ops measured
  }
}

TEST_CASE("proxy accounting off by default: no ProxyOp/ProxyStep bits, no handles even under a RAS mask override",
          "[plugin][proxy]") {
  const std::string dir = fresh_dir("proxy");
  auto env = proxy_env(dir, "1");
  env.erase("NCCLINSP_PROXY");
  REQUIRE(in_child(env, [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            sim::comm_driver::set_mask(0);
            sim::comm_driver plain(lib, {.comm_hash = 5, .name = "x", .n_nodes = 2, .n_ranks = 2});
            if (plain.mask() & (abi::ev_proxy_op | abi::ev_proxy_step)) return 1;
            sim::comm_driver comm(lib,
                                  {.comm_hash = 6, .name = "y", .n_nodes = 2, .n_ranks = 2, .mask_override = 0xFFFF});
            const auto p = comm.enqueue(
                sim::op_desc{.func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20});
            abi::version<abi::newest>::descr d{};
            d.type = abi::ev_proxy_op;
            d.parentObj = p.task_handle;
            d.proxyOp.pid = ::getpid();
            d.proxyOp.peer = 1;
            d.proxyOp.isSend = 1;
            void* h = reinterpret_cast<void*>(0x1);
            lib.table<abi::newest>()->startEvent(comm.context(), &h, &d);
            if (h) return 2;
            comm.complete(p, t0, t0 + 1000);
            return 0;
          }) == 0);
  const auto files = files_in(dir, ".prom");
  REQUIRE(files.size() == 1);
  CHECK(slurp(files[0]).find("ncclinsp_proxy_") == std::string::npos);
}

TEST_CASE("change detector through the plugin .so: a 13% drop is logged as a WARN and exported as gauges",
          "[plugin][detector]") {
  const std::string dir = fresh_dir("detect");
  auto env = proxy_env(dir, "1");
  env.erase("NCCLINSP_PROXY");
  env["NCCLINSP_INTERVAL"] = "100ms";
  env["NCCLINSP_DETECT_MIN_OPS"] = "4";
  env["NCCLINSP_DETECT_PERSIST_S"] = "1";  // 15 degraded windows of 100 ms: sustained after 1 s
  REQUIRE(in_child(env, [dir] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(1);
            sim::comm_driver comm(lib, {.comm_hash = 0xde7, .name = "dp", .n_nodes = 2, .n_ranks = 4, .rank = 0});
            const std::string prom = dir + "/nccl_inspector_metrics_" + uuid_of(1) + ".job-88.prom";
            // One export window per iteration: record ops, then wait for the exporter's next file.
            auto next_export = [&](double after) {
              for (int i = 0; i < 400; ++i) {
                const double ts = sample(slurp(prom), "ncclinsp_export_timestamp_seconds", {});
                if (ts > after) return ts;
                sleep_ms(10);
              }
              return after;
            };
            const int warns0 = sim::logger_warn_count().load();
            double ts = next_export(0);
            std::uint64_t t = t0;
            for (int w = 0; w < 40; ++w) {
              const double f = w < 25 ? 1.0 : 0.87;  // bus bandwidth factor
              for (int i = 0; i < 8; ++i) {
                const auto p = comm.enqueue(sim::op_desc{
                    .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 4u << 20});
                const auto dur = static_cast<std::uint64_t>(1'000'000 * (1.0 + 0.02 * ((i * 7 + w) % 5 - 2) / 2.0) / f);
                comm.complete(p, t, t + dur);
                t += dur + 10'000;
              }
              ts = next_export(ts);
              if (w == 24 && sim::logger_warn_count().load() != warns0) return 1;  // no event while healthy
            }
            if (sim::logger_warn_count().load() == warns0) return 2;  // the drop was logged
            const std::string text = slurp(prom);
            if (sample(text, "ncclinsp_busbw_degraded",
                       {"comm_name=\"dp\"", "collective=\"AllReduce\"", "message_size=\"16MiB-32MiB\""}) != 1)
              return 3;
            const double r =
                sample(text, "ncclinsp_busbw_ratio_to_baseline", {"comm_name=\"dp\"", "collective=\"AllReduce\""});
            if (!(r > 0.83 && r < 0.91)) return 4;
            comm.finalize();
            return 0;
          }) == 0);
}
