// Built against the installed package by ctest: records ops and checks the Prometheus text.
#include <ncclinsp/ncclinsp.hpp>
#include <ncclinsp/format/prometheus_text.hpp>

#include <cstdio>

int main() {
  ncclinsp::collector<> col;
  const auto h =
      col.add_comm({.name = "consumer", .hash = 1, .rank = 0, .nranks = 2, .nnodes = 1, .device = 0, .uuid = "GPU-0"});
  ncclinsp::op_record op{};
  op.fn = ncclinsp::func::all_reduce;
  ncclinsp::set_size(op, 1 << 20, ncclinsp::dtype::float32);
  op.end_ns = 100000;
  col.record(h, op);
  const auto snap = col.take_snapshot();
  std::string text;
  ncclinsp::format::write_prometheus(text, snap, "GPU-0");
  const bool ok = text.find("ncclinsp_ops_total{") != std::string::npos &&
                  text.find("nccl_bus_bandwidth_gbs{") != std::string::npos;
  std::puts(ok ? "consumer ok" : "consumer FAILED");
  return ok ? 0 : 1;
}
