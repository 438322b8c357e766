// Bounded state: resident memory after 1e6 and after 1e8 ops recorded must be the same.
// Prints one JSON object per line: {"path", "ops", "rss_bytes", "seconds"}.
//   collector: collector<>::record from one thread over a fixed key set (8 comms x 20-op mix x
//              3 algo/proto), a snapshot every 1e7 ops (the exporter's work, incl. its diff map).
//   plugin:    the ncclinsp plugin through its newest table (Coll start/stop + 4 KernelCh), 1e6 then 1e7.
// Usage: bench_memory [collector_ops=1e8] [plugin_ops=1e7]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench_common.hpp"
#include "ncclinsp/collector.hpp"
#include "plugin_env.hpp"

namespace {
using namespace ncclinsp;
using namespace ncclinsp::bench;
namespace abi = ncclinsp::abi;

void report(const char* path, std::uint64_t ops, double secs) {
  std::printf("{\"path\":\"%s\",\"ops\":%llu,\"rss_bytes\":%llu,\"seconds\":%.3f,\"allocs_total\":%llu}\n", path,
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(rss_bytes()), secs,
              static_cast<unsigned long long>(total_allocs()));
  std::fflush(stdout);
}

void run_collector(std::uint64_t total) {
  collector<> col;
  comm_handle h[8];
  for (int c = 0; c < 8; ++c)
    h[c] = col.add_comm({.name = std::string("m").append(std::to_string(c)),
                         .hash = 0x5000u + static_cast<unsigned>(c),
                         .rank = 0,
                         .nranks = 8,
                         .nnodes = 1,
                         .device = 0,
                         .uuid = "GPU-mem"});
  constexpr algo algos[3] = {algo::ring, algo::tree, algo::ring};
  constexpr proto protos[3] = {proto::simple, proto::ll, proto::ll128};
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t next = 1'000'000;
  for (std::uint64_t i = 0; i < total;) {
    const std::uint64_t stop = std::min(next, total);
    for (; i < stop; ++i) {
      op_record r = mix_op(i % mix_size, i);
      r.alg = algos[(i / mix_size) % 3];
      r.pro = protos[(i / mix_size) % 3];
      col.record(h[(i / 60) % 8], r);
    }
    (void)col.take_snapshot();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 1'000'000 || i == total) report("collector", i, secs);
    next = i < 10'000'000 ? 10'000'000 : i + 10'000'000;
  }
}

void run_plugin(std::uint64_t total) {
  set_plugin_env();
  sim::plugin_library lib(plugin_path(), abi::newest);
  if (!lib.ok()) {
    std::fprintf(stderr, "bench_memory: %s\n", lib.error().c_str());
    return;
  }
  sim::comm_config cfg;
  cfg.comm_hash = 0x6000;
  cfg.name = "mem";
  cfg.n_ranks = 8;
  sim::comm_driver d(lib, cfg);
  const auto* t = lib.table<abi::newest>();
  void* ctx = d.context();
  abi::version<abi::newest>::descr coll, kch;
  std::memset(static_cast<void*>(&coll), 0, sizeof coll);
  std::memset(static_cast<void*>(&kch), 0, sizeof kch);
  coll.type = abi::ev_coll;
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.nChannels = 4;
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  kch.type = abi::ev_kernel_ch;
  static const char* fns[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < total; ++i) {
    coll.coll.func = fns[i % 4];
    coll.coll.count = mix_counts[(i / 4) % mix_counts.size()];
    coll.coll.seqNumber = i;
    void* h = nullptr;
    t->startEvent(ctx, &h, &coll);
    if (h) t->stopEvent(h);
    for (int c = 0; c < 4; ++c) {
      kch.parentObj = h;
      kch.kernelCh.channelId = static_cast<std::uint8_t>(c);
      kch.kernelCh.pTimer = 1000 + i;
      void* kh = nullptr;
      t->startEvent(ctx, &kh, &kch);
      if (!kh) continue;
      abi::state_args a{};
      a.kernelCh.pTimer = 50'000 + i;
      t->recordEventState(kh, abi::st_kernel_ch_stop, &a);
      t->stopEvent(kh);
    }
    if (i + 1 == 1'000'000 || i + 1 == total)
      report("plugin", i + 1, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
}

std::uint64_t arg(int argc, char** argv, int i, double def) {
  return static_cast<std::uint64_t>(argc > i ? std::strtod(argv[i], nullptr) : def);
}

}  // namespace

int main(int argc, char** argv) {
  report("start", 0, 0);
  run_collector(arg(argc, argv, 1, 1e8));
  run_plugin(arg(argc, argv, 2, 1e7));
  return 0;
}
