// The metric catalogue (format/catalogue.hpp) against every format: each family the catalogue
// lists is in the Prometheus text and in the OTLP request, with the same series (label names,
// order and values), the same values, the same help text; neither format has a family or a
// series the catalogue walk does not give; docs/metrics.md documents exactly these families.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../unit/format_fixture.hpp"
#include "mini_json.hpp"
#include "ncclinsp/format/catalogue.hpp"
#include "ncclinsp/format/otlp_json.hpp"
#include "ncclinsp/format/prometheus_text.hpp"

using namespace ncclinsp;
using format::label_list;

namespace {

/// (family or metric name, labels in order) -> value.
using series_values = std::map<std::pair<std::string, label_list>, double>;

/// Prometheus text: samples (histograms: only `_count`, under the family name) and HELP lines.
void parse_prometheus(const std::string& text, series_values& out, std::map<std::string, std::string>& help) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      const auto sp = line.find(' ', 7);
      help[line.substr(7, sp - 7)] = line.substr(sp + 1);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    if (name.size() > 7 && name.substr(name.size() - 7) == "_bucket") continue;
    if (name.size() > 4 && name.substr(name.size() - 4) == "_sum") continue;
    if (name.size() > 6 && name.substr(name.size() - 6) == "_count") name.resize(name.size() - 6);
    label_list labels;
    std::size_t i = line.find('{');
    if (i != std::string::npos) {
      ++i;
      while (line[i] != '}') {
        const auto eq = line.find('=', i);
        std::string k = line.substr(i, eq - i), v;
        for (i = eq + 2; line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            v += line[i] == 'n' ? '\n' : line[i];
          } else {
            v += line[i];
          }
        }
        labels.emplace_back(std::move(k), std::move(v));
        ++i;
        if (line[i] == ',') ++i;
      }
    }
    const bool inserted = out.emplace(std::make_pair(name, labels), std::stod(line.substr(line.rfind(' ') + 1))).second;
    INFO(line);
    CHECK(inserted);  // one sample per label set
  }
}

/// OTLP request: data points by metric name (histograms: their count), descriptions and units.
void parse_otlp(const std::string& body, series_values& out,
                std::map<std::string, std::pair<std::string, std::string>>& meta) {
  const mini_json::value req = mini_json::parse(body);
  const mini_json::value& metrics = req["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
  for (const auto& m : metrics.items) {
    const std::string name = m["name"].text;
    meta[name] = {m["description"].text, m["unit"].text};
    const char* kind = m.has("sum") ? "sum" : m.has("gauge") ? "gauge" : "histogram";
    for (const auto& p : m[kind]["dataPoints"].items) {
      label_list labels;
      for (const auto& a : p["attributes"].items) labels.emplace_back(a["key"].text, a["value"]["stringValue"].text);
      const double v = p.has("asInt")      ? std::stod(p["asInt"].text)
                       : p.has("asDouble") ? std::stod(p["asDouble"].text)
                                           : std::stod(p["count"].text);
      const bool inserted = out.emplace(std::make_pair(name, labels), v).second;
      INFO(name);
      CHECK(inserted);
    }
  }
}

bool same(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(a)); }

std::string show(const label_list& l) {
  std::string s;
  for (const auto& [k, v] : l) s += k + "=" + v + ",";
  return s;
}

}  // namespace

TEST_CASE("catalogue: Prometheus and OTLP render every family with the catalogue's series, values and help",
          "[catalogue][parity]") {
  snapshot snap = fixture::make_snapshot();
  // The diagnosis signals, as the proxy accounting and the change detector fill them.
  snap.proxy.push_back({.comm = 0, .peer = 2, .send = true, .wait_ns = {1000, 2000, 3000}, .bytes = 4096, .steps = 2});
  snap.proxy.push_back({.comm = 0, .peer = 0, .send = false, .wait_ns = {4000, 0, 6000}, .bytes = 8192, .steps = 3});
  snap.busbw.push_back({.comm = 1,
                        .fn = func::all_reduce,
                        .size_bucket = 22,
                        .baseline_gbs = 100,
                        .recent_gbs = 50,
                        .ratio = 0.5,
                        .degraded = true,
                        .degradations = 1});
  series_values prom, otlp;
  std::map<std::string, std::string> prom_help;
  std::map<std::string, std::pair<std::string, std::string>> otlp_meta;
  for (const auto& uuid : format::gpu_uuids(snap)) {
    std::string text;
    format::write_prometheus(text, snap, uuid);
    parse_prometheus(text, prom, prom_help);
  }
  parse_otlp(format::write_otlp_json(snap), otlp, otlp_meta);

  std::map<std::string, std::size_t> per_family;
  std::set<std::pair<std::string, label_list>> walked;
  format::for_each_sample(
      snap, [&](const format::metric_family& f, const label_list& labels, double value, const format::series_row&) {
        ++per_family[std::string(f.name)];
        INFO(f.name << "{" << show(labels) << "} = " << value);
        CHECK(walked.emplace(std::string(f.name), labels).second);  // one value per family and label set
        const auto p = prom.find({std::string(f.name), labels});
        REQUIRE(p != prom.end());
        CHECK(same(p->second, value));
        const auto o = otlp.find({std::string(f.otlp_name()), labels});
        REQUIRE(o != otlp.end());
        CHECK(same(o->second, value));
      });
  // Every family has series in this snapshot (so every family was compared), and both formats
  // carry exactly the walked series: nothing missing above, nothing extra here.
  // ncclinsp_series_overflow is the Prometheus files' own (their per-file cap): no series unless a
  // cap is set (test_cardinality), never in OTLP.
  for (const auto& f : format::catalogue) {
    INFO(f.name);
    if (f.source == format::series_source::gpu_overflow) {
      CHECK(per_family[std::string(f.name)] == 0);
      CHECK(!prom_help.count(std::string(f.name)));
      CHECK(!otlp_meta.count(std::string(f.otlp_name())));
      continue;
    }
    CHECK(per_family[std::string(f.name)] > 0);
    CHECK(prom_help[std::string(f.name)] == f.help);
    REQUIRE(otlp_meta.count(std::string(f.otlp_name())));
    CHECK(otlp_meta[std::string(f.otlp_name())].first == f.help);
    CHECK(otlp_meta[std::string(f.otlp_name())].second == f.unit);
  }
  CHECK(prom.size() == walked.size());
  CHECK(otlp.size() == walked.size());
  CHECK(otlp_meta.size() == format::catalogue.size() - 1);
  // Families that OTLP lacked before the catalogue.
  for (const char* n :
       {"ncclinsp_invalid_ops", "ncclinsp_last_completed_seq", "ncclinsp_info", "ncclinsp_export_timestamp_seconds",
        "nccl_p2p_bus_bandwidth_gbs", "nccl_p2p_exec_time_microseconds"})
    CHECK(otlp_meta.count(n));
}

TEST_CASE("catalogue: docs/metrics.md documents every family with its type, and no other", "[catalogue][docs]") {
  const std::string docs = ncclinsp_test::slurp(std::string(NCCLINSP_DOCS_DIR) + "/metrics.md");
  REQUIRE(!docs.empty());
  std::map<std::string, std::string> documented;  // family -> type column
  std::istringstream in(docs);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `nccl", 0) != 0) continue;  // table rows naming a family
    const auto name_end = line.find('`', 3);
    const auto type_begin = line.find("| ", name_end) + 2;
    documented[line.substr(3, name_end - 3)] = line.substr(type_begin, line.find(' ', type_begin) - type_begin);
  }
  std::map<std::string, std::string> catalogued;
  for (const auto& f : format::catalogue) catalogued[std::string(f.name)] = std::string(format::to_string(f.type));
  CHECK(documented == catalogued);
}

TEST_CASE("catalogue: one series per label set even when cells differ in timing source, user tag and Inspector bucket",
          "[catalogue]") {
  // 512 KiB and 600 KiB are two Inspector buckets (512-513KB, 600-601KB) but one native one (512KiB-1MiB); GPU and CPU timing
  // are two cells: four cells, one native series, with the sums of all four.
  collector<> col({.identity = {.node = "n", .slurm_job_id = "1"}});
  const auto h =
      col.add_comm({.name = "tp", .hash = 1, .rank = 0, .nranks = 2, .nnodes = 1, .device = 0, .uuid = "GPU-x"});
  for (const std::uint64_t bytes : {512ull << 10, 600ull << 10})
    for (const auto ts : {timing_source::kernel_gpu, timing_source::kernel_cpu}) {
      op_record o = fixture::op(func::all_reduce, bytes, dtype::int8, 100'000, 1);
      o.timing = ts;
      col.record(h, o);
    }
  const snapshot snap = col.take_snapshot();
  REQUIRE(snap.cells.size() == 4);
  std::map<std::string, std::vector<double>> seen;
  format::for_each_sample(snap, [&](const format::metric_family& f, const label_list&, double v,
                                    const format::series_row&) { seen[std::string(f.name)].push_back(v); });
  CHECK(seen["ncclinsp_ops_total"] == std::vector<double>{4});
  CHECK(seen["ncclinsp_busy_seconds_total"].size() == 1);
  CHECK(seen["ncclinsp_op_duration_seconds"] == std::vector<double>{4});
  CHECK(seen["nccl_bus_bandwidth_gbs"].size() == 2);  // Inspector's buckets are its own series
  REQUIRE(seen["nccl_collective_exec_time_microseconds"].size() == 2);
  CHECK(seen["nccl_collective_exec_time_microseconds"][0] == Approx(100.0));
}

TEST_CASE("catalogue: OTLP honours the cardinality controls the Prometheus files honour",
          "[catalogue][parity][cardinality]") {
  const snapshot snap = fixture::make_snapshot();
  for (const auto mode : {format::histogram_mode::coarse, format::histogram_mode::off}) {
    INFO("histogram mode " << static_cast<int>(mode));
    const format::cardinality card{.rank = false,
                                   .comm_hash = false,
                                   .uuid = false,
                                   .algo_proto = false,
                                   .size_bucket_bits = 4,
                                   .histogram = mode};
    series_values prom, otlp;
    std::map<std::string, std::string> prom_help;
    std::map<std::string, std::pair<std::string, std::string>> otlp_meta;
    std::map<label_list, std::vector<std::uint64_t>> prom_buckets;  // op duration: cumulative counts per label set
    std::vector<std::string> prom_le;
    for (const auto& uuid : format::gpu_uuids(snap)) {
      std::string text;
      format::write_prometheus(text, snap, uuid, /*compat_gauges=*/false, card);
      parse_prometheus(text, prom, prom_help);
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("ncclinsp_op_duration_seconds_bucket{", 0) != 0) continue;
        const auto le = line.find(",le=\"");
        series_values one;
        std::map<std::string, std::string> h;
        parse_prometheus("x" + line.substr(line.find('{'), le - line.find('{')) + "} 0\n", one, h);
        const label_list labels = one.begin()->first.second;
        const std::string bound = line.substr(le + 5, line.find('"', le + 5) - le - 5);
        auto& counts = prom_buckets[labels];
        if (prom_buckets.size() == 1) prom_le.push_back(bound);  // the bounds, from the first label set
        counts.push_back(std::stoull(line.substr(line.rfind(' ') + 1)));
      }
    }
    format::otlp_json_options oo;
    oo.compat_gauges = false;
    oo.card = card;
    const std::string body = format::write_otlp_json(snap, oo);
    parse_otlp(body, otlp, otlp_meta);

    // The same series with the same values: no rank/comm_hash/uuid/algo_proto on op and
    // communicator series, coarser message_size, no Inspector gauges.
    REQUIRE(!prom.empty());
    std::map<std::pair<std::string, label_list>, double> prom_by_otlp_name;
    for (const auto& f : format::catalogue)
      for (const auto& [key, v] : prom)
        if (key.first == f.name) prom_by_otlp_name[{std::string(f.otlp_name()), key.second}] = v;
    CHECK(prom_by_otlp_name.size() == prom.size());
    CHECK(otlp.size() == prom.size());
    for (const auto& [key, v] : prom_by_otlp_name) {
      INFO(key.first << "{" << show(key.second) << "}");
      const auto o = otlp.find(key);
      REQUIRE(o != otlp.end());
      CHECK(same(o->second, v));
    }
    std::set<std::string> op_sizes;
    for (const auto& [key, v] : otlp) {
      for (const auto& [k, val] : key.second) {
        if (key.first.rfind("ncclinsp_op", 0) == 0 || key.first.rfind("ncclinsp_comm", 0) == 0) {
          INFO(key.first << "{" << show(key.second) << "}");
          CHECK(k != "rank");
          CHECK(k != "comm_hash");
          CHECK(k != "algo_proto");
          CHECK(k != "uuid");
        }
        if (k == "message_size" && key.first.rfind("ncclinsp_op", 0) == 0) op_sizes.insert(val);
      }
      CHECK(key.first.rfind("nccl_", 0) != 0);  // compat gauges off
    }
    CHECK(!op_sizes.empty());
    for (const auto& s : op_sizes)
      CHECK((s == "invalid" || s == "0B" || s.find("KiB-") != std::string::npos || s.find("B-") != std::string::npos));

    // The histogram: off in both, or the same 7 buckets (bounds and cumulative counts).
    const mini_json::value req = mini_json::parse(body);
    const mini_json::value* hist = nullptr;
    for (const auto& m : req["resourceMetrics"][0]["scopeMetrics"][0]["metrics"].items)
      if (m["name"].text == "ncclinsp_op_duration_seconds") hist = &m;
    if (card.histogram == format::histogram_mode::off) {
      CHECK(hist == nullptr);
      CHECK(prom_buckets.empty());
      CHECK(!prom_help.count("ncclinsp_op_duration_seconds"));
      continue;
    }
    REQUIRE(hist != nullptr);
    REQUIRE(prom_le.size() == 7);
    std::size_t points = 0;
    for (const auto& p : (*hist)["histogram"]["dataPoints"].items) {
      ++points;
      label_list labels;
      for (const auto& a : p["attributes"].items) labels.emplace_back(a["key"].text, a["value"]["stringValue"].text);
      INFO(show(labels));
      const auto& bounds = p["explicitBounds"].items;
      const auto& counts = p["bucketCounts"].items;
      REQUIRE(bounds.size() == 6);
      REQUIRE(counts.size() == 7);
      for (std::size_t i = 0; i < 6; ++i) CHECK(same(std::stod(bounds[i].text), std::stod(prom_le[i])));
      const auto pb = prom_buckets.find(labels);
      REQUIRE(pb != prom_buckets.end());
      std::uint64_t cum = 0;
      for (std::size_t i = 0; i < 7; ++i) {
        cum += std::stoull(counts[i].text);
        CHECK(cum == pb->second[i]);
      }
      CHECK(cum == std::stoull(p["count"].text));
    }
    CHECK(points == prom_buckets.size());
  }
}
