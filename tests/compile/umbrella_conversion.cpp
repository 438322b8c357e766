// The umbrella header compiled as an ordinary -I include (not -isystem) with -Wconversion
// -Wsign-conversion -Werror (ctest `umbrella_wconversion`): what a user's strict build sees. The
// templates a framework instantiates are instantiated here.
#include <ncclinsp/ncclinsp.hpp>

#include <chrono>
#include <cstdint>
#include <utility>

int main() {
  using namespace std::chrono_literals;
  ncclinsp::inspector insp(
      {.sinks = ncclinsp::make_sinks(ncclinsp::prom_textfile_sink({.dir = "/nonexistent/ncclinsp"}),
                                     ncclinsp::json_sink({.dir = "/nonexistent/ncclinsp"}),
                                     ncclinsp::callback_sink([](const ncclinsp::snapshot&) {})),
       .interval = 0ms});
  const std::uint8_t id[128] = {1, 2, 3};
  const auto comm = insp.add_comm({.name = "tp", .hash = ncclinsp::comm_hash_of_unique_id(id, sizeof id), .nranks = 2});
  auto t = insp.begin(comm, ncclinsp::func::all_reduce, 1 << 20);
  auto op = ncclinsp::make_op(ncclinsp::func::all_reduce, 1 << 18, ncclinsp::dtype::float32, 0, 1000);
  insp.end(t, op);
  insp.record(comm, op);
  auto snap = insp.get_collector().take_snapshot(false);
  double bw = 0;
  for (const auto& c : snap.cells) bw += c.total.busbw_gbs() + c.window.geomean_busbw_gbs();
  ncclinsp::collector<> col;
  ncclinsp::exporter ex(col, ncclinsp::make_sinks(ncclinsp::callback_sink([](const ncclinsp::snapshot&) {})), {});
  ex.start();
  ex.flush();
  return bw < 0 ? 1 : 0;
}
