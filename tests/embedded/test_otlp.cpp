// OTLP/JSON encoding (format/otlp_json.hpp) checked against the protobuf-JSON rules of OTLP, and
// the OTLP/HTTP sink checked against a loopback HTTP server: request shape, headers, retry after a
// 500, bounded failure, https rejection, environment configuration.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "http_listener.hpp"
#include "mini_json.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/format/otlp_json.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/inspector.hpp"
#include "ncclinsp/sinks/otlp_http_sink.hpp"

using namespace ncclinsp;
using mini_json::value;

namespace {

snapshot sample_snapshot(std::uint64_t& start_ns) {
  start_ns = detail::unix_ns();
  collector<> col({.identity = {.node = "n1", .slurm_job_id = "42", .abi = "embedded", .labels = {{"cluster", "a"}}}});
  const auto h = col.add_comm(
      {.name = "tp \"x\"", .hash = 0xabc, .rank = 1, .nranks = 4, .nnodes = 2, .device = 3, .uuid = "GPU-3"});
  for (int i = 0; i < 3; ++i) {
    op_record op =
        make_op(func::all_reduce, 1 << 20, dtype::float32, 1000, 1000 + 250'000ull * static_cast<unsigned>(i + 1));
    op.alg = algo::ring;
    op.pro = proto::simple;
    op.seq = static_cast<std::uint64_t>(i);
    col.record(h, op);
  }
  col.record(h, make_op(func::send, 8 << 20, dtype::int8, 0, 100'000));
  col.note_started(h);
  return col.take_snapshot();
}

std::map<std::string, std::string> getenv_map;
const char* fake_getenv(const char* k) {
  auto it = getenv_map.find(k);
  return it == getenv_map.end() ? nullptr : it->second.c_str();
}

bool is_decimal_string(const value& v) {
  return v.kind == value::string && !v.text.empty() && std::regex_match(v.text, std::regex("[0-9]+"));
}

void check_camel_keys(const value& v) {
  static const std::regex camel("[a-z][a-zA-Z]*");
  if (v.kind == value::object)
    for (const auto& [k, m] : v.members) {
      INFO("key " << k);
      CHECK(std::regex_match(k, camel));
      check_camel_keys(m);
    }
  if (v.kind == value::array)
    for (const auto& i : v.items) check_camel_keys(i);
}

std::vector<std::string> attr_keys(const value& point) {
  std::vector<std::string> keys;
  for (const auto& a : point["attributes"].items) {
    REQUIRE(a.size() == 2);
    REQUIRE(a["key"].kind == value::string);
    REQUIRE(a["value"].size() == 1);
    REQUIRE(a["value"]["stringValue"].kind == value::string);
    keys.push_back(a["key"].text);
  }
  return keys;
}

/// Validates one ExportMetricsServiceRequest; returns metric name -> metric object.
std::map<std::string, value> validate_request(const std::string& body, std::uint64_t start_ns) {
  const value req = mini_json::parse(body);
  check_camel_keys(req);
  REQUIRE(req.size() == 1);
  REQUIRE(req["resourceMetrics"].size() == 1);
  const value& rm = req["resourceMetrics"][0];
  for (const auto& a : rm["resource"]["attributes"].items) REQUIRE(a["value"]["stringValue"].kind == value::string);
  REQUIRE(rm["scopeMetrics"].size() == 1);
  const value& sm = rm["scopeMetrics"][0];
  CHECK(sm["scope"]["name"].text == "ncclinsp");
  std::map<std::string, value> by_name;
  for (const auto& m : sm["metrics"].items) {
    INFO("metric " << m["name"].text);
    REQUIRE(m.has("description"));
    REQUIRE(m.has("unit"));
    const int kinds = m.has("sum") + m.has("gauge") + m.has("histogram");
    REQUIRE(kinds == 1);
    if (m.has("sum")) {
      CHECK(m["sum"]["aggregationTemporality"].text == "2");
      CHECK(m["sum"]["isMonotonic"].b);
    }
    if (m.has("histogram")) CHECK(m["histogram"]["aggregationTemporality"].text == "2");
    const value& data = m.has("sum") ? m["sum"] : m.has("gauge") ? m["gauge"] : m["histogram"];
    REQUIRE(data["dataPoints"].size() > 0);
    for (const auto& p : data["dataPoints"].items) {
      CHECK(is_decimal_string(p["timeUnixNano"]));
      if (!m.has("gauge")) {
        REQUIRE(is_decimal_string(p["startTimeUnixNano"]));
        CHECK(std::stoull(p["startTimeUnixNano"].text) == start_ns);
        CHECK(std::stoull(p["startTimeUnixNano"].text) <= std::stoull(p["timeUnixNano"].text));
      }
      attr_keys(p);
      if (m.has("histogram")) {
        REQUIRE(p["bucketCounts"].size() == p["explicitBounds"].size() + 1);
        std::uint64_t n = 0;
        for (const auto& c : p["bucketCounts"].items) {
          REQUIRE(is_decimal_string(c));
          n += std::stoull(c.text);
        }
        CHECK(is_decimal_string(p["count"]));
        CHECK(std::stoull(p["count"].text) == n);
        CHECK(p["sum"].kind == value::number);
      } else {
        CHECK(p.has("asInt") + p.has("asDouble") == 1);
        if (p.has("asInt")) CHECK(is_decimal_string(p["asInt"]));
        if (p.has("asDouble")) CHECK(p["asDouble"].kind == value::number);
      }
    }
    by_name.emplace(m["name"].text, m);
  }
  return by_name;
}

/// Label names of the first `family` sample in Prometheus text.
std::vector<std::string> prom_label_names(const std::string& text, const std::string& family) {
  const auto p = text.find("\n" + family + "{");
  REQUIRE(p != std::string::npos);
  const std::string line = text.substr(p + 1, text.find('\n', p + 1) - p - 1);
  std::vector<std::string> names;
  static const std::regex label(R"(([a-zA-Z_][a-zA-Z0-9_]*)=\"(?:[^\"\\]|\\.)*\")");
  for (std::sregex_iterator it(line.begin(), line.end(), label), end; it != end; ++it) names.push_back((*it)[1]);
  return names;
}

}  // namespace

TEST_CASE("OTLP JSON: protobuf-JSON rules, cumulative sums, histograms, Prometheus label names", "[otlp]") {
  std::uint64_t start = 0;
  const snapshot snap = sample_snapshot(start);
  const std::string body =
      format::write_otlp_json(snap, {.resource = {{"service.name", "svc"}}, .start_time_unix_ns = start});
  INFO(body.substr(0, 3000));
  const auto metrics = validate_request(body, start);
  for (const char* n :
       {"ncclinsp_ops", "ncclinsp_bytes", "ncclinsp_bus_bytes", "ncclinsp_busy_seconds", "ncclinsp_op_duration_seconds",
        "ncclinsp_inflight_ops", "ncclinsp_dropped_events", "ncclinsp_filtered_ops", "nccl_bus_bandwidth_gbs",
        "nccl_collective_exec_time_microseconds", "nccl_p2p_bus_bandwidth_gbs"})
    CHECK(metrics.count(n) == 1);
  CHECK(metrics.at("ncclinsp_ops").has("sum"));
  CHECK(metrics.at("ncclinsp_op_duration_seconds").has("histogram"));
  CHECK(metrics.at("ncclinsp_inflight_ops").has("gauge"));
  CHECK(metrics.at("ncclinsp_busy_seconds")["unit"].text == "s");
  CHECK(metrics.at("ncclinsp_bytes")["unit"].text == "By");

  // Values: 3 AllReduce of 4 MiB; durations 250/500/750 us.
  const value& ops = metrics.at("ncclinsp_ops")["sum"]["dataPoints"];
  std::uint64_t ar_ops = 0;
  for (const auto& p : ops.items)
    for (const auto& a : p["attributes"].items)
      if (a["key"].text == "collective" && a["value"]["stringValue"].text == "AllReduce")
        ar_ops += std::stoull(p["asInt"].text);
  CHECK(ar_ops == 3);
  const value& hp = metrics.at("ncclinsp_op_duration_seconds")["histogram"]["dataPoints"][0];
  CHECK(std::stod(hp["explicitBounds"][0].text) == Approx(1e-5));

  // Attribute names are exactly the Prometheus label names of the same family, in the same order.
  std::string prom;
  format::write_prometheus(prom, snap, "GPU-3");
  CHECK(attr_keys(ops[0]) == prom_label_names(prom, "ncclinsp_ops_total"));
  CHECK(attr_keys(metrics.at("ncclinsp_inflight_ops")["gauge"]["dataPoints"][0]) ==
        prom_label_names(prom, "ncclinsp_inflight_ops"));
  CHECK(attr_keys(metrics.at("nccl_bus_bandwidth_gbs")["gauge"]["dataPoints"][0]) ==
        prom_label_names(prom, "nccl_bus_bandwidth_gbs"));
  CHECK(attr_keys(metrics.at("ncclinsp_dropped_events")["sum"]["dataPoints"][0]) ==
        prom_label_names(prom, "ncclinsp_dropped_events_total"));

  // Escaping: the quote in the communicator name survives as a JSON string.
  CHECK(body.find(R"("tp \"x\"")") != std::string::npos);
  // Nothing to send without communicators.
  CHECK(format::write_otlp_json(snapshot{}).empty());
}

TEST_CASE("OTLP URL parsing: http only, IPv6, default port and path", "[otlp]") {
  auto u = detail::parse_http_url("http://collector.example:4318/v1/metrics");
  CHECK(u.error.empty());
  CHECK(u.host == "collector.example");
  CHECK(u.port == "4318");
  CHECK(u.path == "/v1/metrics");
  u = detail::parse_http_url("http://[::1]:9000/x");
  CHECK((u.error.empty() && u.host == "::1" && u.port == "9000" && u.path == "/x"));
  u = detail::parse_http_url("HTTP://h");
  CHECK((u.error.empty() && u.port == "80" && u.path == "/"));
  CHECK(detail::parse_http_url("https://h:4318/v1/metrics").error.find("https:// is not supported") !=
        std::string::npos);
  CHECK(!detail::parse_http_url("grpc://h").error.empty());
  CHECK(!detail::parse_http_url("http://h:99999/").error.empty());
  CHECK(!detail::parse_http_url("localhost:4318").error.empty());
}

TEST_CASE("OTLP environment: endpoints, timeout, percent-decoded headers, resource", "[otlp]") {
  std::vector<std::string> warnings;
  auto log = [&](log_level, std::string_view m) { warnings.emplace_back(m); };
  getenv_map = {};
  auto o = otlp_http_options::from_env(log, fake_getenv);
  CHECK(o.endpoint == "http://localhost:4318/v1/metrics");
  CHECK(o.timeout == std::chrono::milliseconds(2000));
  CHECK(o.resource == format::attribute_list{{"service.name", "nccl-inspector"}});

  getenv_map = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/"}};
  CHECK(otlp_http_options::from_env(log, fake_getenv).endpoint == "http://otel:4318/v1/metrics");
  getenv_map = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"},
                {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:1/custom"}};
  CHECK(otlp_http_options::from_env(log, fake_getenv).endpoint == "http://m:1/custom");  // signal-specific: verbatim

  getenv_map = {
      {"OTEL_EXPORTER_OTLP_TIMEOUT", "750"},
      {"OTEL_EXPORTER_OTLP_HEADERS", " api-key = secret%20value%2C1 ,x-tenant=t%3D1, Host=evil,bad\r\n=1, novalue"},
      {"OTEL_SERVICE_NAME", "trainer"},
      {"OTEL_RESOURCE_ATTRIBUTES", "service.name=ignored,deployment.environment=prod%20eu,k8s.pod.name=p-1"},
      {"SLURM_JOB_ID", "1234"}};
  warnings.clear();
  o = otlp_http_options::from_env(log, fake_getenv);
  CHECK(o.timeout == std::chrono::milliseconds(750));
  REQUIRE(o.headers.size() == 2);
  CHECK(o.headers[0] == std::pair<std::string, std::string>{"api-key", "secret value,1"});
  CHECK(o.headers[1] == std::pair<std::string, std::string>{"x-tenant", "t=1"});
  CHECK(!warnings.empty());  // Host, the CR/LF one and the malformed item are reported
  CHECK(o.resource == format::attribute_list{{"service.name", "trainer"},
                                             {"deployment.environment", "prod eu"},
                                             {"k8s.pod.name", "p-1"},
                                             {"slurm.job.id", "1234"}});

  getenv_map = {{"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "-5"}, {"OTEL_EXPORTER_OTLP_TIMEOUT", "100"}};
  warnings.clear();
  CHECK(otlp_http_options::from_env(log, fake_getenv).timeout ==
        std::chrono::milliseconds(2000));  // metrics-specific wins, invalid -> default
  CHECK(warnings.size() == 1);
}

TEST_CASE("OTLP sink: POST to the loopback listener, 500 then a successful retry", "[otlp][http]") {
  test_http::listener srv({500});
  std::uint64_t start = 0;
  const snapshot snap = sample_snapshot(start);
  otlp_http_sink sink({.endpoint = srv.url(),
                       .timeout = std::chrono::milliseconds(3000),
                       .headers = {{"x-api-key", "k1"}},
                       .start_time_unix_ns = start});
  const auto stats = sink.stats();
  REQUIRE(sink.write(snap) == export_result::success);
  const auto reqs = srv.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].answered == 500);
  CHECK(reqs[1].answered == 200);
  CHECK(reqs[0].body == reqs[1].body);
  for (const auto& r : reqs) {
    CHECK(r.method == "POST");
    CHECK(r.path == "/v1/metrics");
    CHECK(r.headers.at("content-type") == "application/json");
    CHECK(r.headers.at("x-api-key") == "k1");
    CHECK(r.headers.at("host") == "127.0.0.1:" + std::to_string(srv.port()));
    CHECK(std::stoull(r.headers.at("content-length")) == r.body.size());
  }
  validate_request(reqs[1].body, start);
  CHECK(stats->attempts == 2);
  CHECK(stats->retries == 1);
  CHECK(stats->exports_ok == 1);
  CHECK(stats->exports_failed == 0);
}

TEST_CASE("OTLP sink: bounded retries, no retry on 4xx, refused connection, https rejected", "[otlp][http]") {
  std::uint64_t start = 0;
  const snapshot snap = sample_snapshot(start);
  std::vector<std::string> warnings;
  auto log = [&](log_level, std::string_view m) { warnings.emplace_back(m); };
  {
    test_http::listener srv({503, 503, 503, 503});
    otlp_http_sink sink({.endpoint = srv.url(), .timeout = std::chrono::milliseconds(2000), .log = log});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(sink.write(snap) == export_result::failure);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(2000));
    CHECK(srv.requests().size() == 3);  // 1 + 2 retries
    CHECK(sink.stats()->exports_failed == 1);
    CHECK(sink.stats()->last_status == 503);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("HTTP status 503") != std::string::npos);
    CHECK(sink.write(snap) == export_result::success);  // the script is used up: 200
    CHECK(sink.write(snap) == export_result::success);
  }
  {
    test_http::listener srv({400});
    otlp_http_sink sink({.endpoint = srv.url(), .log = log});
    CHECK(sink.write(snap) == export_result::failure);
    CHECK(srv.requests().size() == 1);
  }
  {
    // Retries stop at the timeout: a server that answers 500 slowly.
    test_http::listener srv({500, 500, 500}, 300);
    otlp_http_sink sink({.endpoint = srv.url(), .timeout = std::chrono::milliseconds(500), .log = log});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(sink.write(snap) == export_result::failure);
    CHECK(std::chrono::steady_clock::now() - t0 <
          std::chrono::milliseconds(1500));  // 500 ms budget, slack for a loaded machine
  }
  {
    int port = 0;
    {
      test_http::listener gone;
      port = gone.port();
    }  // closed again: connection refused
    otlp_http_sink sink({.endpoint = "http://127.0.0.1:" + std::to_string(port) + "/v1/metrics",
                         .timeout = std::chrono::milliseconds(500),
                         .log = log});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(sink.write(snap) == export_result::failure);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
    CHECK(sink.stats()->last_status == 0);
  }
  warnings.clear();
  otlp_http_sink tls({.endpoint = "https://otel.example:4318/v1/metrics", .log = log});
  CHECK(!tls.usable());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("https:// is not supported") != std::string::npos);
  CHECK(tls.write(snap) == export_result::failure);
  CHECK(tls.stats()->attempts == 0);
}

TEST_CASE("OTLP through the inspector configured from the plugin's environment", "[otlp][http]") {
  test_http::listener srv;
  getenv_map = {{"NCCL_INSPECTOR_ENABLE", "1"},
                {"NCCL_INSPECTOR_OTEL_EXPORT", "1"},
                {"NCCL_INSPECTOR_PROM_DUMP", "1"},
                {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(srv.port())},
                {"NCCLINSP_NODE_NAME", "nodeE"},
                {"SLURM_JOB_ID", "9"}};
  std::vector<std::string> warnings;
  auto o = inspector_options::from_env([&](log_level, std::string_view m) { warnings.emplace_back(m); }, fake_getenv,
                                       make_otlp_http_sink);
  REQUIRE(o.sinks.size() == 1);
  CHECK(o.sinks[0].name() == "otlp-http");
  CHECK(!warnings.empty());  // OTLP takes precedence over PROM_DUMP, said once
  {
    inspector insp(std::move(o));
    const auto h = insp.add_comm({.name = "dp", .hash = 7, .rank = 0, .nranks = 2, .device = 0, .uuid = "GPU-0"});
    insp.record(h, make_op(func::all_gather, 1 << 20, dtype::bfloat16, 0, 40'000));
  }  // destruction: final export
  REQUIRE(srv.wait_for(1));
  const auto reqs = srv.requests();
  const std::string& body = reqs.back().body;
  CHECK(body.find("\"slurm.job.id\"") != std::string::npos);
  CHECK(body.find("\"nodeE\"") != std::string::npos);
  CHECK(body.find("\"AllGather\"") != std::string::npos);
  CHECK_NOTHROW(mini_json::parse(body));
}

TEST_CASE("OTLP is opt-in: without the sink's factory NCCL_INSPECTOR_OTEL_EXPORT=1 exports nothing and says why",
          "[otlp]") {
  getenv_map = {{"NCCL_INSPECTOR_ENABLE", "1"}, {"NCCL_INSPECTOR_OTEL_EXPORT", "1"}};
  std::vector<std::string> warnings;
  auto o = inspector_options::from_env([&](log_level, std::string_view m) { warnings.emplace_back(m); }, fake_getenv);
  CHECK(o.sinks.empty());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("make_otlp_http_sink") != std::string::npos);
}

TEST_CASE("OTLP from the environment honours the cardinality variables of the .prom files",
          "[otlp][http][cardinality]") {
  test_http::listener srv;
  getenv_map = {{"NCCL_INSPECTOR_ENABLE", "1"},
                {"NCCL_INSPECTOR_OTEL_EXPORT", "1"},
                {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(srv.port())},
                {"NCCLINSP_DROP_LABELS", "rank,comm_hash"},
                {"NCCLINSP_HISTOGRAM", "off"},
                {"NCCLINSP_COMPAT_GAUGES", "0"}};
  {
    inspector insp(inspector_options::from_env({}, fake_getenv, make_otlp_http_sink));
    const auto h = insp.add_comm({.name = "dp", .hash = 7, .rank = 1, .nranks = 2, .device = 0, .uuid = "GPU-0"});
    insp.record(h, make_op(func::all_gather, 1 << 20, dtype::bfloat16, 0, 40'000));
  }
  REQUIRE(srv.wait_for(1));
  const std::string body = srv.requests().back().body;
  CHECK(body.find("\"ncclinsp_ops\"") != std::string::npos);  // the op counter is there,
  CHECK(body.find("{\"key\":\"comm_name\"") != std::string::npos);
  CHECK(body.find("{\"key\":\"rank\"") == std::string::npos);  // without the dropped labels,
  CHECK(body.find("{\"key\":\"comm_hash\"") == std::string::npos);
  CHECK(body.find("ncclinsp_op_duration_seconds") == std::string::npos);  // the histogram
  CHECK(body.find("nccl_bus_bandwidth_gbs") == std::string::npos);        // and Inspector's gauges
  CHECK_NOTHROW(mini_json::parse(body));
}
