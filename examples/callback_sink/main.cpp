// callback_sink: a lambda receives each snapshot on the exporter thread and prints the window's bus
// bandwidth per collective and size bucket (what an in-house dashboard agent would forward).
#include <ncclinsp/inspector.hpp>
#include <ncclinsp/sinks/callback_sink.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>

int main() {
  auto lines = std::make_shared<std::atomic<int>>(0);
  ncclinsp::callback_sink printer([lines](const ncclinsp::snapshot& snap) {
    for (const auto& cell : snap.cells) {
      const auto& w = cell.window;
      if (!w.bw_count) continue;
      const auto& comm = snap.comms[cell.comm].desc;
      std::printf("%-10s %-14s %-10s %8.1f GB/s  (%llu ops, mean %.1f us)\n", comm.name.c_str(),
                  std::string(ncclinsp::to_string(cell.fn)).c_str(),
                  ncclinsp::inspector_bucketer::label(cell.size_index).c_str(), w.geomean_busbw_gbs(),
                  static_cast<unsigned long long>(w.ops),
                  static_cast<double>(w.busy_ns) / static_cast<double>(w.valid_ops()) / 1e3);
      ++*lines;
    }
  });
  {
    ncclinsp::inspector insp(
        {.sinks = ncclinsp::make_sinks(std::move(printer)), .interval = std::chrono::milliseconds(0)});
    const auto comm =
        insp.add_comm({.name = "world", .hash = 1, .rank = 0, .nranks = 8, .nnodes = 1, .device = 0, .uuid = "GPU-0"});
    for (std::uint64_t mib : {1, 16, 256}) {
      const std::uint64_t bytes = mib << 20;
      const auto dur = static_cast<std::uint64_t>(static_cast<double>(bytes) / 100.0);  // 100 GB/s algbw
      insp.record(comm, ncclinsp::make_op(ncclinsp::func::all_reduce, bytes / 4, ncclinsp::dtype::float32, 0, dur));
    }
  }  // final export -> the callback
  std::printf("%d line(s)\n", lines->load());
  return *lines == 3 ? 0 : 1;
}
