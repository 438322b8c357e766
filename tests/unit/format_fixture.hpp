#pragma once
// A deterministic snapshot shared by the format and sink tests.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "ncclinsp/collector.hpp"
#include "plugin_harness.hpp"

namespace fixture {

inline ncclinsp::op_record op(ncclinsp::func f, std::uint64_t count, ncclinsp::dtype dt, std::uint64_t dur_ns,
                              std::uint64_t seq, ncclinsp::algo a = ncclinsp::algo::ring,
                              ncclinsp::proto p = ncclinsp::proto::simple) {
  ncclinsp::op_record o;
  o.fn = f;
  ncclinsp::set_size(o, count, dt);
  o.start_ns = 1'700'000'000'000'000'000ull;
  o.end_ns = o.start_ns + dur_ns;
  o.seq = seq;
  o.alg = a;
  o.pro = p;
  o.channels = 4;
  return o;
}

/// Two GPUs, three communicators (one with a hostile name), collectives, P2P and invalid ops.
inline ncclinsp::snapshot make_snapshot() {
  using namespace ncclinsp;
  collector_options co;
  co.record_ring_capacity = 64;
  co.identity = {.node = "node0",
                 .hostname = "host0",
                 .slurm_job_id = "4242",
                 .abi = "v7",
                 .labels = {{"cluster", "a"}},
                 .pid = 77};
  static collector<>* col = nullptr;  // kept alive: snapshots reference nothing, but keep it simple
  delete col;
  col = new collector<>(co);
  const auto tp = col->add_comm({.name = "tp",
                                 .hash = 0xfedcba9876543210ull,
                                 .rank = 1,
                                 .nranks = 4,
                                 .nnodes = 1,
                                 .device = 3,
                                 .uuid = "GPU-11111111-2222-3333-4444-555555555555"});
  const auto dp = col->add_comm({.name = "dp \"x\"\\y\nz",
                                 .hash = 0x0123456789abcdefull,
                                 .rank = 5,
                                 .nranks = 16,
                                 .nnodes = 4,
                                 .device = 3,
                                 .uuid = "GPU-11111111-2222-3333-4444-555555555555"});
  const auto other = col->add_comm({.name = "",
                                    .hash = 7,
                                    .rank = 0,
                                    .nranks = 2,
                                    .nnodes = 2,
                                    .device = 0,
                                    .uuid = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"});
  col->record(tp, op(func::all_reduce, 1u << 20, dtype::float32, 500'000, 10));
  col->record(tp, op(func::all_reduce, 1u << 20, dtype::float32, 250'000, 11));
  col->record(tp, op(func::all_gather, 1u << 20, dtype::int8, 200'000, 3, algo::nvls, proto::ll128));
  col->record(dp, op(func::reduce_scatter, 2u << 20, dtype::bfloat16, 300'000, 1));
  auto s = op(func::send, 1000, dtype::int8, 10'000, 1, algo::none, proto::none);
  s.peer = 3;
  col->record(dp, s);
  col->record(dp, op(func::all_reduce, 0, dtype::float32, 1000, 2));  // invalid: zero bytes
  col->record(other, op(func::broadcast, 8192, dtype::int8, 0, 1));   // invalid: zero duration
  col->note_started(dp);
  col->note_filtered(tp, filter_reason::min_size);
  col->note_dropped(dp, drop_reason::op_pool_full);
  auto snap = col->take_snapshot();
  snap.time_unix_ns = 1'700'000'123'456'000'000ull;
  for (auto& c : snap.comms) c.since_last_completion_s = 0;
  return snap;
}

using ncclinsp_test::slurp;  // whole file as a string

/// Compares with tests/golden/<name>; NCCLINSP_UPDATE_GOLDEN=1 rewrites the golden file instead.
inline bool matches_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(NCCLINSP_GOLDEN_DIR) + "/" + name;
  if (const char* u = std::getenv("NCCLINSP_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << text;
    return true;
  }
  return slurp(path) == text;
}

/// Runs `promtool check metrics` on `text`; returns its exit status and output.
inline int promtool_check(const std::string& text, std::string& output) {
  const std::string tmp = "/tmp/ncclinsp_promtool_" + std::to_string(::getpid()) + ".prom";
  std::ofstream(tmp, std::ios::binary) << text;
  const std::string cmd = std::string(NCCLINSP_PROMTOOL) + " check metrics < " + tmp + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  const int rc = ::pclose(p);
  std::remove(tmp.c_str());
  return rc;
}

}  // namespace fixture
