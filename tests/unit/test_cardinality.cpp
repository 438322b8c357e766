// Cardinality controls of the Prometheus serializer (format::cardinality, docs/scale.md):
// dropped labels, coarser size buckets, histogram modes, and the hard per-file line cap with its
// counted overflow.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "format_fixture.hpp"
#include "ncclinsp/env_options.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/sinks/from_options.hpp"

using namespace ncclinsp;

namespace {

const char* const gpu3 = "GPU-11111111-2222-3333-4444-555555555555";

std::vector<std::string> samples(const std::string& text, const std::string& prefix = "") {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] != '#' && l.rfind(prefix, 0) == 0) out.push_back(l);
  return out;
}

double value_of(const std::string& line) { return std::stod(line.substr(line.rfind(' ') + 1)); }

/// Sum of a family's sample values (lines starting with `name{`).
double sum_of(const std::string& text, const std::string& name) {
  double s = 0;
  for (const auto& l : samples(text, name + "{")) s += value_of(l);
  return s;
}

/// One GPU with `n` communicators, each running `sizes` message sizes of AllReduce.
snapshot churn_snapshot(int n, int sizes) {
  collector_options co;
  co.identity = {.node = "node0", .hostname = "host0", .slurm_job_id = "7", .abi = "v7", .labels = {}, .pid = 1};
  static collector<>* col = nullptr;
  delete col;
  col = new collector<>(co);
  for (int c = 0; c < n; ++c) {
    std::string name = "c";  // not "c" + std::to_string(c): GCC 12 -O3 reports a false -Wrestrict in operator+
    name += std::to_string(c);
    const auto h = col->add_comm({.name = name,
                                  .hash = 0x1000u + static_cast<std::uint64_t>(c),
                                  .rank = 0,
                                  .nranks = 8,
                                  .nnodes = 2,
                                  .device = 0,
                                  .uuid = "GPU-0"});
    for (int k = 0; k < sizes; ++k)
      col->record(h, fixture::op(func::all_reduce, std::uint64_t{1} << (12 + 2 * k), dtype::int8, 100'000,
                                 static_cast<std::uint64_t>(k + 1)));
  }
  return col->take_snapshot();
}

}  // namespace

TEST_CASE("cardinality: dropped labels leave op and communicator families, not GPU ones",
          "[format][prom][cardinality]") {
  const auto snap = fixture::make_snapshot();
  format::cardinality card;
  card.rank = card.comm_hash = card.uuid = card.algo_proto = false;
  std::string full, lean;
  format::write_prometheus(full, snap, gpu3);
  format::write_prometheus(lean, snap, gpu3, true, card);
  for (const char* fam : {"ncclinsp_ops_total{", "ncclinsp_inflight_ops{", "nccl_bus_bandwidth_gbs{",
                          "ncclinsp_op_duration_seconds_bucket{"})
    for (const auto& l : samples(lean, fam)) {
      INFO(l);
      CHECK(l.find("rank=") == std::string::npos);
      CHECK(l.find("comm_hash=") == std::string::npos);
      CHECK(l.find("uuid=") == std::string::npos);
      CHECK(l.find("algo_proto=") == std::string::npos);
      CHECK(l.find("gpu=\"GPU3\"") != std::string::npos);
    }
  for (const auto& l : samples(lean, "ncclinsp_info{"))
    CHECK(l.find(std::string("uuid=\"") + gpu3 + "\"") != std::string::npos);
  // Merging algo_proto variants keeps the totals.
  CHECK(sum_of(lean, "ncclinsp_ops_total") == sum_of(full, "ncclinsp_ops_total"));
  CHECK(sum_of(lean, "ncclinsp_bus_bytes_total") == Approx(sum_of(full, "ncclinsp_bus_bytes_total")));
  CHECK(lean.size() < full.size());
  // Two algorithms of one collective and size: two op sets, one without algo_proto.
  collector<> col(collector_options{
      .identity = {.node = "n", .hostname = "h", .slurm_job_id = "1", .abi = "v7", .labels = {}, .pid = 1}});
  const auto h =
      col.add_comm({.name = "dp", .hash = 1, .rank = 0, .nranks = 8, .nnodes = 2, .device = 0, .uuid = "GPU-0"});
  col.record(h, fixture::op(func::all_reduce, 1u << 20, dtype::int8, 100'000, 1, algo::ring, proto::simple));
  col.record(h, fixture::op(func::all_reduce, 1u << 20, dtype::int8, 100'000, 2, algo::tree, proto::ll));
  const auto s2 = col.take_snapshot();
  std::string a, b;
  format::write_prometheus(a, s2, "GPU-0");
  format::write_prometheus(b, s2, "GPU-0", true, {.algo_proto = false});
  CHECK(samples(a, "ncclinsp_ops_total{").size() == 2);
  CHECK(samples(b, "ncclinsp_ops_total{").size() == 1);
  CHECK(sum_of(b, "ncclinsp_ops_total") == 2);
}

TEST_CASE("cardinality: communicators that coincide without comm_hash share rows, never duplicate a series",
          "[format][prom][cardinality]") {
  collector<> col(collector_options{
      .identity = {.node = "n", .hostname = "h", .slurm_job_id = "1", .abi = "v7", .labels = {}, .pid = 1}});
  // Two unnamed communicators (comm_name "unknown") on one GPU.
  const auto a =
      col.add_comm({.name = "", .hash = 1, .rank = 0, .nranks = 8, .nnodes = 2, .device = 0, .uuid = "GPU-0"});
  const auto b =
      col.add_comm({.name = "", .hash = 2, .rank = 3, .nranks = 8, .nnodes = 2, .device = 0, .uuid = "GPU-0"});
  col.record(a, fixture::op(func::all_reduce, 1u << 20, dtype::int8, 100'000, 1));
  col.record(b, fixture::op(func::all_reduce, 1u << 20, dtype::int8, 300'000, 1));
  col.note_started(b);
  const auto snap = col.take_snapshot();
  format::cardinality card;
  card.comm_hash = card.rank = false;
  std::string text;
  format::write_prometheus(text, snap, "GPU-0", true, card);
  std::map<std::string, int> seen;
  for (const auto& l : samples(text)) ++seen[l.substr(0, l.rfind(' '))];
  for (const auto& [k, n] : seen) {
    INFO(k);
    CHECK(n == 1);
  }
  CHECK(sum_of(text, "ncclinsp_ops_total") == 2);
  CHECK(samples(text, "ncclinsp_ops_total{").size() == 1);
  CHECK(samples(text, "ncclinsp_inflight_ops{").size() == 1);
}

TEST_CASE("cardinality: coarser message_size buckets have power-of-two edges", "[format][prom][cardinality]") {
  CHECK(format::size_label<pow2_bucketer>(pow2_bucketer::index(20u << 20), 1) == "16MiB-32MiB");
  CHECK(format::size_label<pow2_bucketer>(pow2_bucketer::index(20u << 20), 2) == "16MiB-64MiB");
  CHECK(format::size_label<pow2_bucketer>(pow2_bucketer::index(40u << 20), 2) == "16MiB-64MiB");
  CHECK(format::size_label<pow2_bucketer>(pow2_bucketer::index(20u << 20), 4) == "16MiB-256MiB");
  CHECK(format::size_label<pow2_bucketer>(pow2_bucketer::index(1), 2) == "1B-4B");
  CHECK(format::size_label<pow2_bucketer>(0, 4) == "0B");
  CHECK(format::size_label<pow2_bucketer>(64, 4) == "1EiB-16EiB");
  // Ten sizes from 4KiB to 1GiB: 10 op sets per comm at 1 bit, 5 at 2 bits (powers of 4 apart).
  const auto snap = churn_snapshot(1, 10);
  std::string a, b;
  format::write_prometheus(a, snap, "GPU-0", false);
  format::write_prometheus(b, snap, "GPU-0", false, {.size_bucket_bits = 4});
  CHECK(samples(a, "ncclinsp_ops_total{").size() == 10);
  CHECK(samples(b, "ncclinsp_ops_total{").size() == 5);
  CHECK(sum_of(a, "ncclinsp_ops_total") == sum_of(b, "ncclinsp_ops_total"));
}

TEST_CASE("cardinality: histogram full, coarse (exact at its bounds) and off", "[format][prom][cardinality]") {
  const auto snap = fixture::make_snapshot();
  std::string full, coarse, off;
  format::write_prometheus(full, snap, gpu3, false);
  format::write_prometheus(coarse, snap, gpu3, false, {.histogram = format::histogram_mode::coarse});
  format::write_prometheus(off, snap, gpu3, false, {.histogram = format::histogram_mode::off});
  const auto sets = samples(full, "ncclinsp_ops_total{").size();
  CHECK(samples(full, "ncclinsp_op_duration_seconds_bucket{").size() == sets * 20);
  const auto cb = samples(coarse, "ncclinsp_op_duration_seconds_bucket{");
  CHECK(cb.size() == sets * 7);
  std::map<std::string, double> full_at;
  for (const auto& l : samples(full, "ncclinsp_op_duration_seconds_bucket{"))
    full_at[l.substr(0, l.rfind(' '))] = value_of(l);
  for (const auto& l : cb) {
    INFO(l);
    const auto key = l.substr(0, l.rfind(' '));
    REQUIRE(full_at.count(key));
    CHECK(full_at[key] == value_of(l));
  }
  CHECK(coarse.find("le=\"1e-04\"") != std::string::npos);
  CHECK(coarse.find("le=\"2.5e-05\"") == std::string::npos);
  CHECK(off.find("ncclinsp_op_duration_seconds") == std::string::npos);
  CHECK(sum_of(off, "ncclinsp_busy_seconds_total") == sum_of(full, "ncclinsp_busy_seconds_total"));
}

TEST_CASE("cardinality: a hard per-file cap folds the rest into a counted overflow set",
          "[format][prom][cardinality]") {
  const auto snap = churn_snapshot(200, 3);  // a communicator churn: 200 comms x 3 sizes
  std::string uncapped, capped;
  format::write_prometheus(uncapped, snap, "GPU-0", false);
  format::cardinality card;
  card.max_series = 1000;
  format::write_prometheus(capped, snap, "GPU-0", false, card);
  const auto all = samples(capped);
  INFO(capped.substr(capped.size() - 2000));
  CHECK(samples(uncapped).size() > 10000);
  CHECK(all.size() <= 1000);
  CHECK(all.size() > 900);
  // Totals over all sets, overflow included, are unchanged: rates stay right.
  CHECK(sum_of(capped, "ncclinsp_ops_total") == sum_of(uncapped, "ncclinsp_ops_total"));
  CHECK(sum_of(capped, "ncclinsp_bus_bytes_total") == Approx(sum_of(uncapped, "ncclinsp_bus_bytes_total")));
  const auto ovf = samples(capped, "ncclinsp_ops_total{");
  CHECK(std::count_if(ovf.begin(), ovf.end(), [](const std::string& l) {
          return l.find("comm_name=\"_overflow\"") != std::string::npos;
        }) == 1);
  std::map<std::string, double> overflow;
  for (const auto& l : samples(capped, "ncclinsp_series_overflow{")) {
    const auto k = l.find("kind=\"");
    overflow[l.substr(k + 6, l.find('"', k + 6) - k - 6)] = value_of(l);
  }
  const double kept = static_cast<double>(ovf.size() - 1);
  CHECK(overflow["op_sets"] == 600 - kept);
  CHECK(overflow["comms"] > 0);
  CHECK(overflow.count("compat") == 1);
  // Under the cap nothing changes but the (zero) overflow gauges.
  std::string small;
  format::write_prometheus(small, churn_snapshot(2, 2), "GPU-0", false, card);
  for (const auto& l : samples(small, "ncclinsp_series_overflow{")) CHECK(value_of(l) == 0);
  for (const auto& l : samples(small)) CHECK(l.find("comm_name=\"_overflow\"") == std::string::npos);
}

TEST_CASE("cardinality: NCCLINSP_* variables reach the sink's options", "[options][cardinality]") {
  std::map<std::string, std::string> env = {{"NCCLINSP_DROP_LABELS", "rank,algo_proto"},
                                            {"NCCLINSP_SIZE_BUCKET_BITS", "2"},
                                            {"NCCLINSP_HISTOGRAM", "coarse"},
                                            {"NCCLINSP_COMPAT_GAUGES", "0"},
                                            {"NCCLINSP_MAX_SERIES", "5000"}};
  std::vector<std::string> warnings;
  auto get = [&](const char* k) -> const char* { return env.count(k) ? env[k].c_str() : nullptr; };
  auto o = env_options::from_env([&](log_level, std::string_view m) { warnings.emplace_back(m); }, get);
  CHECK(warnings.empty());
  const auto c = cardinality_from_options(o);
  CHECK_FALSE(c.rank);
  CHECK_FALSE(c.algo_proto);
  CHECK(c.comm_hash);
  CHECK(c.uuid);
  CHECK(c.size_bucket_bits == 2);
  CHECK(c.histogram == format::histogram_mode::coarse);
  CHECK(c.max_series == 5000);
  CHECK_FALSE(o.compat_gauges);
  // Defaults: the full schema and a 20000-line safety cap; bad values are reported and ignored.
  env = {{"NCCLINSP_DROP_LABELS", "node"}, {"NCCLINSP_HISTOGRAM", "some"}};
  o = env_options::from_env([&](log_level, std::string_view m) { warnings.emplace_back(m); }, get);
  CHECK(warnings.size() == 2);
  const auto d = cardinality_from_options(o);
  CHECK((d.rank && d.comm_hash && d.uuid && d.algo_proto));
  CHECK(d.histogram == format::histogram_mode::full);
  CHECK(d.max_series == 20000);
}
