// A training loop instrumented with the embedded API, runnable on a CPU: the "NCCL calls" are
// synthetic, timed by a bandwidth model instead of CUDA events. It writes
// nccl_inspector_metrics_<uuid>.job-<job key>.prom (node_exporter's textfile format) and checks
// it: its own file, named by this job's key (SLURM_JOB_ID, NCCLINSP_JOB_ID, ... or this process).
//
//   training_loop [dir]     (default: a fresh directory under /tmp)
#include <ncclinsp/inspector.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

/// What a wrapper would do around ncclAllReduce & co: begin, call NCCL, measure, end.
template <class Inspector>
void collective(Inspector& insp, ncclinsp::comm_handle comm, ncclinsp::func f, std::uint64_t count, ncclinsp::dtype dt,
                double gbs, std::uint64_t& seq) {
  const std::uint64_t bytes = count * ncclinsp::size_of(dt);
  auto token = insp.begin(comm, f, bytes);
  const std::uint64_t start = ncclinsp::collector<>::steady_ns();
  const auto dur = static_cast<std::uint64_t>(static_cast<double>(bytes) / gbs);  // bytes / (GB/s) = ns
  ncclinsp::op_record op = ncclinsp::make_op(f, count, dt, start, start + dur);
  op.alg = ncclinsp::algo::ring;
  op.pro = ncclinsp::proto::simple;
  op.seq = seq++;
  insp.end(token, op);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  if (argc > 1) {
    dir = argv[1];
  } else {
    char tmpl[] = "/tmp/ncclinsp_training_XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  const std::string uuid = "GPU-00000000-0000-0000-0000-000000000000";
  std::string name;
  {
    ncclinsp::inspector_options o{.sinks = ncclinsp::make_sinks(ncclinsp::prom_textfile_sink({.dir = dir})),
                                  .interval = std::chrono::milliseconds(100)};
    o.collector.identity.labels = {{"job", "example"}};
    name = ncclinsp::prom_file_name(uuid, ncclinsp::format::job_key(o.collector.identity));
    ncclinsp::inspector insp(std::move(o));
    const auto tp = insp.add_comm(
        {.name = "tensor_parallel", .hash = 0x7701, .rank = 0, .nranks = 8, .nnodes = 1, .device = 0, .uuid = uuid});
    const auto dp = insp.add_comm(
        {.name = "data_parallel", .hash = 0x7702, .rank = 0, .nranks = 16, .nnodes = 2, .device = 0, .uuid = uuid});
    std::uint64_t tp_seq = 0, dp_seq = 0;
    for (int step = 0; step < 20; ++step) {
      for (int layer = 0; layer < 4; ++layer)  // forward: tensor-parallel AllReduce per layer
        collective(insp, tp, ncclinsp::func::all_reduce, 4u << 20, ncclinsp::dtype::bfloat16, 150.0, tp_seq);
      collective(insp, dp, ncclinsp::func::reduce_scatter, 32u << 20, ncclinsp::dtype::float32, 40.0,
                 dp_seq);  // gradients
      collective(insp, dp, ncclinsp::func::all_gather, 64u << 20, ncclinsp::dtype::bfloat16, 40.0,
                 dp_seq);  // parameters
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }  // final export

  std::ifstream f(dir + "/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  auto has = [&](const std::string& needle) { return text.find(needle) != std::string::npos; };
  const bool ok =
      has("collective=\"AllReduce\",message_size=\"8MiB-16MiB\",algo_proto=\"RING_SIMPLE\",job=\"example\"} 80\n") &&
      has("comm_name=\"data_parallel\"") && has("ncclinsp_op_duration_seconds_bucket{") && has("ncclinsp_info{");
  std::printf("%s: %s/%s (%zu bytes)\n", ok ? "ok" : "FAILED", dir.c_str(), name.c_str(), text.size());
  return ok ? 0 : 1;
}
