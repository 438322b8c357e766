// Schema parity: the same ops through the plugin .so (dlopen'ed and driven by the simulator as
// NCCL drives it, in a forked child) and through the embedded inspector produce the same metric
// families with the same label names, the same identity/communicator/op label values, and the
// same counter values. Only `version` (profiler ABI, "v7.1" vs "v5.1") and `abi` ("v7" vs
// "embedded") differ by design.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/inspector.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp;
using namespace ncclinsp_test;

namespace {

constexpr std::uint64_t comm_hash = 0xabcdef0123456789ull;

/// The ops of the scenario: what NCCL would report, and their GPU spans.
struct scenario_op {
  sim::op_desc desc;
  std::uint64_t dur_ns;
  func fn;
  dtype dt;
  algo alg;
  proto pro;
};
std::vector<scenario_op> scenario() {
  using sim::nccl_dtype;
  using sim::nccl_func;
  std::vector<scenario_op> v;
  v.push_back({{.func = nccl_func::all_reduce, .dtype = nccl_dtype::float32, .count = 1u << 20, .n_channels = 2},
               500'000,
               func::all_reduce,
               dtype::float32,
               algo::ring,
               proto::simple});
  v.push_back({{.func = nccl_func::all_reduce,
                .dtype = nccl_dtype::bfloat16,
                .count = 3u << 20,
                .algo = "TREE",
                .proto = "LL128",
                .n_channels = 2},
               900'000,
               func::all_reduce,
               dtype::bfloat16,
               algo::tree,
               proto::ll128});
  v.push_back({{.func = nccl_func::reduce_scatter, .dtype = nccl_dtype::float32, .count = 1u << 18, .n_channels = 1},
               120'000,
               func::reduce_scatter,
               dtype::float32,
               algo::ring,
               proto::simple});
  // AllGather: NCCL reports the count in bytes with datatype ncclInt8 (the driver rewrites it).
  v.push_back({{.func = nccl_func::all_gather,
                .dtype = nccl_dtype::int8,
                .count = 1u << 20,
                .algo = "NVLS",
                .proto = "LL128",
                .n_channels = 2},
               200'000,
               func::all_gather,
               dtype::int8,
               algo::nvls,
               proto::ll128});
  v.push_back({{.kind = sim::op_kind::p2p,
                .func = nccl_func::send,
                .dtype = nccl_dtype::int8,
                .count = 8u << 20,
                .peer = 2,
                .n_channels = 1,
                .channel_lo = 5},
               100'000,
               func::send,
               dtype::int8,
               algo::none,
               proto::none});
  v.push_back({{.kind = sim::op_kind::p2p,
                .func = nccl_func::recv,
                .dtype = nccl_dtype::float16,
                .count = 1u << 20,
                .peer = 0,
                .n_channels = 1,
                .channel_lo = 6},
               80'000,
               func::recv,
               dtype::float16,
               algo::none,
               proto::none});
  return v;
}

int run_plugin() {
  sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
  if (!lib.ok()) return 10;
  static void* cuda = ::dlopen(NCCLINSP_SIMCUDA_LIB, RTLD_NOW | RTLD_GLOBAL);
  using fn_t = void (*)(int, const unsigned char*);
  auto set_device = reinterpret_cast<fn_t>(::dlsym(cuda, "ncclinsp_simcuda_set_device"));
  unsigned char uuid[16];
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(0x10 * 4 + i);
  set_device(3, uuid);
  sim::comm_driver comm(lib, {.comm_hash = comm_hash, .name = "tp", .n_nodes = 2, .n_ranks = 4, .rank = 1});
  if (comm.init_result() != abi::success || !comm.context()) return 11;
  std::uint64_t t = t0;
  for (const auto& op : scenario()) {
    const auto p = comm.enqueue(op.desc);
    comm.complete(p, t, t + op.dur_ns);
    t += op.dur_ns + 1000;
  }
  comm.finalize();
  return 0;
}

void run_embedded(const std::string& dir) {
  process_identity id;
  id.node = "nodeT";
  id.slurm_job_id = "77";
  // The plugin's defaults (NCCLINSP_MAX_SERIES=20000 writes ncclinsp_series_overflow); the embedded sink has no cap unless given one.
  inspector insp(
      {.sinks = make_sinks(prom_textfile_sink({.dir = dir, .card = cardinality_from_options(env_options{})})),
       .interval = std::chrono::milliseconds(0),
       .collector = {.identity = id}});
  const comm_handle h = insp.add_comm(
      {.name = "tp", .hash = comm_hash, .rank = 1, .nranks = 4, .nnodes = 2, .device = 3, .uuid = uuid_of(3)});
  std::uint64_t t = t0;
  std::uint64_t seq = 0;
  for (const auto& op : scenario()) {
    op_record r = make_op(op.fn, op.desc.count, op.dt, t, t + op.dur_ns);
    r.alg = op.alg;
    r.pro = op.pro;
    r.seq = seq++;
    r.peer = op.desc.peer;
    auto tok = insp.begin(h, op.fn, r.bytes);
    insp.end(tok, r);
    t += op.dur_ns + 1000;
  }
}

struct sample_line {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;
};
std::vector<sample_line> parse(const std::string& text) {
  std::vector<sample_line> out;
  static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\]|\\.)*)\")");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    sample_line s;
    const auto brace = line.find('{');
    const auto close = line.rfind('}');
    s.name = line.substr(0, brace == std::string::npos ? line.find(' ') : brace);
    if (brace != std::string::npos) {
      const std::string body = line.substr(brace + 1, close - brace - 1);
      for (std::sregex_iterator it(body.begin(), body.end(), label), end; it != end; ++it)
        s.labels[(*it)[1]] = (*it)[2];
    }
    s.value = line.substr(line.rfind(' ') + 1);
    out.push_back(std::move(s));
  }
  return out;
}

/// `name{label names in file order}`.
std::set<std::string> signatures(const std::string& text) {
  std::set<std::string> out;
  static const std::regex names(R"(([a-zA-Z_][a-zA-Z0-9_]*)=\")");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto brace = line.find('{');
    std::string sig = line.substr(0, brace) + "{";
    const std::string body = line.substr(brace, line.rfind('}') - brace);
    for (std::sregex_iterator it(body.begin(), body.end(), names), end; it != end; ++it)
      sig += std::string((*it)[1]) + ",";
    out.insert(sig + "}");
  }
  return out;
}

/// Every sample as text with the by-design differences (version, abi) and time-dependent values removed.
std::set<std::string> comparable(const std::string& text) {
  static const std::set<std::string> time_dependent = {
      "ncclinsp_export_timestamp_seconds", "ncclinsp_seconds_since_last_completion",
      "ncclinsp_oldest_inflight_age_seconds", "ncclinsp_last_completed_seq"};
  std::set<std::string> out;
  for (auto s : parse(text)) {
    s.labels.erase("version");
    s.labels.erase("abi");
    std::string row = s.name + "{";
    for (const auto& [k, v] : s.labels) row += k + "=" + v + ",";
    row += "} ";
    if (!time_dependent.count(s.name)) {
      // Same numbers; compare at 12 significant digits (sums may be added in a different order).
      char b[64];
      std::snprintf(b, sizeof b, "%.12g", std::strtod(s.value.c_str(), nullptr));
      row += b;
    }
    out.insert(row);
  }
  return out;
}

}  // namespace

TEST_CASE("parity: plugin and embedded API produce the same metric names, label sets and values",
          "[embedded][parity]") {
  const std::string plugin_dir = fresh_dir("parity"), embedded_dir = fresh_dir("parity");
  REQUIRE(in_child({{"NCCL_INSPECTOR_ENABLE", "1"},
                    {"NCCL_INSPECTOR_PROM_DUMP", "1"},
                    {"NCCL_INSPECTOR_DUMP_DIR", plugin_dir},
                    {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
                    {"NCCLINSP_NODE_NAME", "nodeT"},
                    {"SLURM_JOB_ID", "77"},
                    {"NCCLINSP_PROM_KEEP_FILES", "1"}},
                   run_plugin) == 0);
  run_embedded(embedded_dir);

  const auto pf = files_in(plugin_dir, ".prom"), ef = files_in(embedded_dir, ".prom");
  REQUIRE(pf.size() == 1);
  REQUIRE(ef.size() == 1);
  CHECK(pf[0].substr(plugin_dir.size()) ==
        ef[0].substr(embedded_dir.size()));  // same name: nccl_inspector_metrics_<uuid>.job-77.prom
  const std::string plugin_text = slurp(pf[0]);
  const std::string embedded_text = slurp(ef[0]);
  INFO("plugin:\n" << plugin_text.substr(0, 4000) << "\nembedded:\n" << embedded_text.substr(0, 4000));

  const auto ps = signatures(plugin_text), es = signatures(embedded_text);
  CHECK(ps.size() > 20);
  CHECK(ps == es);

  const auto pc = comparable(plugin_text), ec = comparable(embedded_text);
  std::vector<std::string> only_plugin, only_embedded;
  std::set_difference(pc.begin(), pc.end(), ec.begin(), ec.end(), std::back_inserter(only_plugin));
  std::set_difference(ec.begin(), ec.end(), pc.begin(), pc.end(), std::back_inserter(only_embedded));
  for (const auto& r : only_plugin) UNSCOPED_INFO("only in plugin output:   " << r);
  for (const auto& r : only_embedded) UNSCOPED_INFO("only in embedded output: " << r);
  CHECK(only_plugin.empty());
  CHECK(only_embedded.empty());

  // The by-design differences are what we think they are.
  CHECK(plugin_text.find("version=\"v7.1\"") != std::string::npos);
  CHECK(embedded_text.find("abi=\"embedded\"") != std::string::npos);
  // And the HELP/TYPE lines are identical.
  auto meta = [](const std::string& t) {
    std::set<std::string> m;
    std::istringstream in(t);
    std::string l;
    while (std::getline(in, l))
      if (l.rfind("# HELP ", 0) == 0 || l.rfind("# TYPE ", 0) == 0) m.insert(l);
    return m;
  };
  CHECK(meta(plugin_text) == meta(embedded_text));
  // Both files open with their writer's owner line (a different process each), for the cleaner.
  CHECK(plugin_text.rfind("# ncclinsp-owner v1 ", 0) == 0);
  CHECK(embedded_text.rfind("# ncclinsp-owner v1 ", 0) == 0);
}
