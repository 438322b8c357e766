// Export path (exporter thread, cold): snapshot + Prometheus text for ~1k and ~10k series, the
// file size per GPU for a typical job, and the plugin's finalize of the last communicator (which
// takes the final snapshot and writes the file). Targets: 10k series <= 20 ms, finalize <= 100 ms.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

/// A collector on one GPU with `ncells` cells: communicators of 60 cells each (the 4 x 5 op mix x
/// 3 algo/proto combinations), every cell recorded once. `touch()` records each cell again, so
/// every export has non-empty windows (as during training).
struct populated {
  std::unique_ptr<collector<>> col;
  std::vector<std::pair<comm_handle, op_record>> cells;
  void touch() {
    for (const auto& [h, r] : cells) col->record(h, r);
  }
};

populated build_collector(int ncells) {
  populated p;
  p.col = std::make_unique<collector<>>(
      collector_options{.identity = {.node = "bench", .hostname = "bench", .abi = "v7", .pid = 1}});
  constexpr std::array<std::pair<algo, proto>, 3> ap = {
      {{algo::ring, proto::simple}, {algo::tree, proto::ll}, {algo::ring, proto::ll128}}};
  comm_handle h = no_index;
  for (int k = 0; k < ncells; ++k) {
    const int c = k / 60, j = k % 60;
    if (j == 0)
      h = p.col->add_comm({.name = std::string("comm").append(std::to_string(c)),
                           .hash = 0xabc000u + static_cast<unsigned>(c),
                           .rank = c % 8,
                           .nranks = 8,
                           .nnodes = 1,
                           .device = 0,
                           .uuid = uuid});
    op_record r = mix_op(static_cast<std::size_t>(j / 3), static_cast<std::uint64_t>(k));
    r.alg = ap[static_cast<std::size_t>(j % 3)].first;
    r.pro = ap[static_cast<std::size_t>(j % 3)].second;
    p.cells.emplace_back(h, r);
  }
  p.touch();
  return p;
}

/// Smallest cell count (to 5%) whose export has at least `target` series.
int cells_for(std::size_t target) {
  for (int n = 8;; n += n / 20 + 1) {
    populated p = build_collector(n);
    std::string text;
    format::write_prometheus(text, p.col->take_snapshot(), uuid);
    if (count_series(text) >= target || n > 4000) return n;
  }
}

/// One export as the exporter thread does it: take_snapshot() + the Prometheus text of the GPU.
void BM_export_prometheus(benchmark::State& st) {
  const int ncells = cells_for(static_cast<std::size_t>(st.range(0)));
  populated p = build_collector(ncells);
  std::string text;
  std::size_t series = 0, bytes = 0;
  for (auto _ : st) {
    st.PauseTiming();
    p.touch();
    st.ResumeTiming();
    const snapshot snap = p.col->take_snapshot();
    text.clear();
    format::write_prometheus(text, snap, uuid);
    benchmark::DoNotOptimize(text.data());
    st.PauseTiming();
    series = count_series(text);
    bytes = text.size();
    st.ResumeTiming();
  }
  st.counters["series"] = static_cast<double>(series);
  st.counters["cells"] = ncells;
  st.counters["text_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_export_prometheus)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void BM_snapshot_only(benchmark::State& st) {
  const int ncells = cells_for(static_cast<std::size_t>(st.range(0)));
  populated p = build_collector(ncells);
  for (auto _ : st) {
    st.PauseTiming();
    p.touch();
    st.ResumeTiming();
    snapshot snap = p.col->take_snapshot();
    benchmark::DoNotOptimize(snap.cells.data());
  }
  st.counters["cells"] = ncells;
}
BENCHMARK(BM_snapshot_only)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// ---- through the plugin: a typical job's file and the last finalize ---------------------------

sim::plugin_library* g_lib = nullptr;

std::uint64_t file_size(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0 ? static_cast<std::uint64_t>(sb.st_size) : 0;
}

/// Sum of ncclinsp_dropped_events_total{reason="table_full"} in a .prom file.
std::uint64_t table_full_drops(const std::string& path) {
  std::uint64_t n = 0;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "ncclinsp_dropped_events_total{", 30) != 0 || !std::strstr(line, "reason=\"table_full\""))
        continue;
      if (const char* sp = std::strrchr(line, ' ')) n += std::strtoull(sp + 1, nullptr, 10);
    }
    std::fclose(f);
  }
  return n;
}

/// A typical rank: 3 communicators (tensor-parallel 8 ranks, data-parallel 16 ranks over 2 nodes,
/// pipeline 2 ranks with Send/Recv), 4 collectives x 5 sizes, 10 steps. Finalizes the first two,
/// then times the last finalize (final snapshot + Prometheus file written, exporter joined).
void BM_plugin_finalize_typical_job(benchmark::State& st) {
  std::uint64_t hash = 0xf1a10000;
  std::uint64_t bytes = 0, dropped = 0;
  bool first = true;
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
          constexpr sim::nccl_func f[] = {sim::nccl_func::all_reduce, sim::nccl_func::all_gather,
                                          sim::nccl_func::reduce_scatter, sim::nccl_func::reduce};
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
    const std::string path = bench_dump_dir() + "/" +
                             prom_file_name(std::string("host-bench-pid").append(std::to_string(::getpid())), "bench");
    if (first) bytes = file_size(path), dropped = table_full_drops(path);
    first = false;
    comms.clear();
    st.ResumeTiming();
  }
  st.counters["file_bytes"] = static_cast<double>(bytes);
  st.counters["dropped_table_full"] = static_cast<double>(dropped);
}
// Few iterations, one repetition: every iteration registers 3 more communicators in the same
// process (a finalized communicator's cells are reclaimed by their shard's owner thread, later).
// file_bytes and dropped_table_full come from the first iteration (a fresh process's job).
BENCHMARK(BM_plugin_finalize_typical_job)->Iterations(5)->Repetitions(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  set_plugin_env();
  g_lib = new sim::plugin_library(plugin_path(), abi::newest);
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
