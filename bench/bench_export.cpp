// Export path (exporter thread, cold): snapshot + Prometheus text for ~1k and ~10k series, the
// file size per GPU for a typical job, and the plugin's finalize of the last communicator (which
// takes the final snapshot and writes the file). Targets: 10k series <= 20 ms, finalize <= 100 ms.
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench_common.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "plugin_env.hpp"

namespace {
using namespace ncclinsp;
using namespace ncclinsp::bench;

constexpr const char* uuid = "GPU-00000000-bench";

/// Sample lines of an exposition text (one per series).
std::size_t count_series(std::string_view text) {
  std::size_t n = 0, pos = 0;
  while (pos < text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::size_t end = eol == std::string_view::npos ? text.size() : eol;
    if (end > pos && text[pos] != '#') ++n;
    pos = end + 1;
  }
  return n;
}

/// A collector with `ncomms` communicators on one GPU, each with the 4 x 5 op mix and 3 algo/proto
/// combinations (60 cells per communicator), every cell recorded.
std::unique_ptr<collector<>> build_collector(int ncomms) {
  auto col = std::make_unique<collector<>>(collector_options{.identity = {.node = "bench", .hostname = "bench", .abi = "v7", .pid = 1}});
  constexpr std::array<std::pair<algo, proto>, 3> ap = {{{algo::ring, proto::simple}, {algo::tree, proto::ll}, {algo::ring, proto::ll128}}};
  for (int c = 0; c < ncomms; ++c) {
    const comm_handle h = col->add_comm({.name = "comm" + std::to_string(c), .hash = 0xabc000u + static_cast<unsigned>(c), .rank = c % 8,
                                         .nranks = 8, .nnodes = 1, .device = 0, .uuid = uuid});
    for (std::size_t i = 0; i < mix_size; ++i)
      for (const auto& [a, p] : ap) {
        op_record r = mix_op(i, i);
        r.alg = a;
        r.pro = p;
        col->record(h, r);
      }
  }
  return col;
}

/// Smallest communicator count whose export has at least `target` series.
int comms_for(std::size_t target) {
  for (int n = 1;; n = n < 4 ? n + 1 : n + n / 4) {
    auto col = build_collector(n);
    std::string text;
    format::write_prometheus(text, col->take_snapshot(), uuid);
    if (count_series(text) >= target || n > 4000) return n;
  }
}

void BM_export_prometheus(benchmark::State& st) {
  const int ncomms = comms_for(static_cast<std::size_t>(st.range(0)));
  auto col = build_collector(ncomms);
  std::string text;
  std::size_t series = 0, bytes = 0;
  for (auto _ : st) {
    const snapshot snap = col->take_snapshot();
    text.clear();
    format::write_prometheus(text, snap, uuid);
    series = count_series(text);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  st.counters["series"] = static_cast<double>(series);
  st.counters["comms"] = ncomms;
  st.counters["text_bytes"] = static_cast<double>(bytes);
  st.SetItemsProcessed(st.iterations() * static_cast<std::int64_t>(series));
}
BENCHMARK(BM_export_prometheus)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void BM_snapshot_only(benchmark::State& st) {
  const int ncomms = comms_for(static_cast<std::size_t>(st.range(0)));
  auto col = build_collector(ncomms);
  for (auto _ : st) {
    snapshot snap = col->take_snapshot();
    benchmark::DoNotOptimize(snap.cells.data());
  }
  st.counters["comms"] = ncomms;
}
BENCHMARK(BM_snapshot_only)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// ---- through the plugin: a typical job's file and the last finalize ---------------------------

sim::plugin_library* g_lib = nullptr;

std::uint64_t file_size(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<std::uint64_t>(sb.st_size) : 0;
}

/// A typical rank: 3 communicators (tensor-parallel 8 ranks, data-parallel 16 ranks over 2 nodes,
/// pipeline 2 ranks with Send/Recv), 4 collectives x 5 sizes, 10 steps. Finalizes the first two,
/// then times the last finalize (final snapshot + Prometheus file written, exporter joined).
void BM_plugin_finalize_typical_job(benchmark::State& st) {
  std::uint64_t hash = 0xf1a10000;
  std::uint64_t bytes = 0;
  for (auto _ : st) {
    st.PauseTiming();
    std::vector<std::unique_ptr<sim::comm_driver>> comms;
    const int nranks[] = {8, 16, 2}, nnodes[] = {1, 2, 1};
    for (int c = 0; c < 3; ++c) {
      sim::comm_config cfg;
      cfg.comm_hash = ++hash;
      cfg.name = c == 0 ? "tp" : c == 1 ? "dp" : "pp";
      cfg.n_ranks = nranks[c];
      cfg.n_nodes = nnodes[c];
      cfg.rank = 1;
      comms.push_back(std::make_unique<sim::comm_driver>(*g_lib, cfg));
    }
    const sim::kernel_time kt[8] = {{1000, 90000}, {1010, 90010}, {1020, 90020}, {1030, 90030},
                                    {1040, 90040}, {1050, 90050}, {1060, 90060}, {1070, 90070}};
    for (int step = 0; step < 10; ++step) {
      for (auto& d : comms) {
        for (std::size_t i = 0; i < mix_size; ++i) {
          sim::op_desc op;
          constexpr sim::nccl_func f[] = {sim::nccl_func::all_reduce, sim::nccl_func::all_gather, sim::nccl_func::reduce_scatter,
                                          sim::nccl_func::reduce};
          op.func = f[i % 4];
          op.count = mix_counts[(i / 4) % mix_counts.size()];
          op.n_channels = 8;
          d->complete(d->enqueue(op), kt);
        }
      }
      for (sim::nccl_func f : {sim::nccl_func::send, sim::nccl_func::recv}) {
        sim::op_desc op;
        op.kind = sim::op_kind::p2p;
        op.func = f;
        op.count = 1 << 22;
        op.peer = 0;
        op.n_channels = 2;
        comms[2]->complete(comms[2]->enqueue(op), kt);
      }
    }
    comms[0]->finalize();
    comms[1]->finalize();
    st.ResumeTiming();
    comms[2]->finalize();  // the last communicator: final export
    st.PauseTiming();
    const std::string path = bench_dump_dir() + "/" + prom_file_name("host-bench-pid" + std::to_string(::getpid()));
    bytes = file_size(path);
    comms.clear();
    st.ResumeTiming();
  }
  st.counters["file_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_plugin_finalize_typical_job)->Iterations(10)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  set_plugin_env();
  g_lib = new sim::plugin_library(plugin_path(), 7);
  if (!g_lib->ok()) {
    std::fprintf(stderr, "bench_export: %s\n", g_lib->error().c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
