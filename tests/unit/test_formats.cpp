#include <catch2/catch.hpp>

#include <clocale>
#include <cmath>
#include <locale>

#include "format_fixture.hpp"
#include "ncclinsp/format/inspector_json.hpp"
#include "ncclinsp/format/json_writer.hpp"
#include "ncclinsp/format/prometheus_text.hpp"

using namespace ncclinsp;

TEST_CASE("Prometheus text matches the golden file for each GPU", "[format][prom]") {
  const auto snap = fixture::make_snapshot();
  const auto uuids = format::gpu_uuids(snap);
  REQUIRE(uuids.size() == 2);
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    std::string text;
    format::write_prometheus(text, snap, uuids[i]);
    INFO(text);
    CHECK(fixture::matches_golden("gpu" + std::to_string(i) + ".prom", text));
  }
}

TEST_CASE("promtool check metrics reports nothing on real output", "[format][prom][promtool]") {
  INFO("promtool not found at configure time (the test command installs prometheus)");
  REQUIRE_FALSE(std::string(NCCLINSP_PROMTOOL).empty());
  const auto snap = fixture::make_snapshot();
  for (const auto& uuid : format::gpu_uuids(snap)) {
    std::string text, out;
    format::write_prometheus(text, snap, uuid, /*compat_gauges=*/false);
    const int rc = fixture::promtool_check(text, out);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.empty());
    // With Inspector's families the only findings are the unit lints on NVIDIA's own names.
    text.clear();
    out.clear();
    format::write_prometheus(text, snap, uuid, true);
    fixture::promtool_check(text, out);
    INFO(out);
    CHECK(out.find("error") == std::string::npos);
    std::size_t pos = 0, findings = 0;
    while ((pos = out.find('\n', pos)) != std::string::npos) ++findings, ++pos;
    for (const char* known :
         {"nccl_collective_exec_time_microseconds use base unit \"seconds\" instead of \"microseconds\"",
          "nccl_p2p_exec_time_microseconds use base unit \"seconds\" instead of \"microseconds\""})
      if (out.find(known) != std::string::npos) --findings;
    CHECK(findings == 0);
  }
}

TEST_CASE("Inspector's four families keep its names and label order", "[format][prom][compat]") {
  const auto snap = fixture::make_snapshot();
  std::string text;
  format::write_prometheus(text, snap, "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(
      text.find(
          "nccl_bus_bandwidth_gbs{version=\"v7.1\",slurm_job_id=\"4242\",node=\"node0\",gpu=\"GPU3\",comm_name=\"tp\",n_nodes=\"1\","
          "nranks=\"4\",collective=\"AllReduce\",message_size=\"4-5MB\",algo_proto=\"RING_SIMPLE\",job_id=\"4242\",uuid=") !=
      std::string::npos);
  CHECK(
      text.find(
          "nccl_p2p_exec_time_microseconds{version=\"v7.1\",slurm_job_id=\"4242\",node=\"node0\",gpu=\"GPU3\",comm_name=") !=
      std::string::npos);
  CHECK(text.find("p2p_operation=\"Send\",message_size=\"1000-1001B\"") != std::string::npos);
  // Hostile names are escaped, not passed through.
  CHECK(text.find("comm_name=\"dp \\\"x\\\"\\\\y\\nz\"") != std::string::npos);
  // Every sample value is a finite number.
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::string value = line.substr(line.rfind(' ') + 1);
    INFO(line);
    CHECK(std::isfinite(std::stod(value)));
  }
}

TEST_CASE("numbers do not depend on the C or C++ locale", "[format][prom]") {
  const auto snap = fixture::make_snapshot();
  std::string before, after;
  format::write_prometheus(before, snap, "GPU-11111111-2222-3333-4444-555555555555");
  struct comma : std::numpunct<char> {
    char do_decimal_point() const override { return ','; }
  };
  const auto old = std::locale::global(std::locale(std::locale::classic(), new comma));
  std::setlocale(LC_ALL, "de_DE.UTF-8");  // may not exist; the C++ locale above always does
  format::write_prometheus(after, snap, "GPU-11111111-2222-3333-4444-555555555555");
  std::locale::global(old);
  std::setlocale(LC_ALL, "C");
  CHECK(before == after);
}

TEST_CASE("invalid UTF-8 and very long names become valid, bounded label values", "[format]") {
  const std::string bad = std::string("a\xff\xfe") + "\xc3\x28" + std::string(10000, 'x');
  const auto s = format::sanitize_utf8(bad);
  CHECK(s.size() <= 256);
  CHECK(s.substr(0, 1) == "a");
  CHECK(s.find("\xEF\xBF\xBD") == 1);
  CHECK(format::sanitize_utf8("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(format::sanitize_utf8("\xed\xa0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate rejected
}

TEST_CASE("JSON lines match the golden file and Inspector's layout", "[format][json]") {
  const auto snap = fixture::make_snapshot();
  std::string text;
  for (const auto& r : snap.records) format::write_inspector_record(text, snap, r);
  for (const auto& c : snap.comms) format::write_dump_stats(text, snap, c, 0, 0);
  INFO(text);
  CHECK(fixture::matches_golden("records.jsonl", text));
  CHECK(
      text.rfind(
          "{\"header\":{\"id\":\"0xfedcba9876543210\",\"comm_name\":\"tp\",\"rank\":1,\"n_ranks\":4,\"nnodes\":1},\"metadata\":{",
          0) == 0);
  CHECK(
      text.find(
          "\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":10,\"coll_msg_size_bytes\":4194304,\"coll_exec_time_us\":500.000,"
          "\"coll_timing_source\":\"kernel_gpu\",\"coll_algobw_gbs\":8.388608,\"coll_busbw_gbs\":12.582912") !=
      std::string::npos);
  CHECK(text.find("\"p2p_perf\":{\"p2p\":\"Send\",\"p2p_sn\":1,\"p2p_peer\":3,\"p2p_msg_size_bytes\":1000") !=
        std::string::npos);
  CHECK(text.find("\"comm_name\":\"dp \\\"x\\\"\\\\y\\nz\"") != std::string::npos);
}

TEST_CASE("json_writer escapes quotes, backslash and every control character", "[format][json][writer]") {
  std::string out;
  format::json_writer w(out);
  w.value(std::string_view("q\"b\\n\nr\rt\tx\x01\x1f\x7f\0end", 18));
  CHECK(out == "\"q\\\"b\\\\n\\nr\\rt\\tx\\u0001\\u001f\\u007f\\u0000end\"");
  std::string keyed;
  format::json_writer k(keyed);
  k.begin_object().key("a\"\n").value(1).end_object();  // keys are escaped like values
  CHECK(keyed == "{\"a\\\"\\n\":1}");
}

TEST_CASE("json_writer passes valid UTF-8 through and repairs invalid bytes", "[format][json][writer]") {
  std::string out;
  format::json_writer w(out);
  w.begin_array()
      .value("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")
      .value(
          "a\xff"
          "b")
      .value("\xed\xa0\x80")
      .end_array();
  CHECK(out ==
        "[\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\",\"a\xEF\xBF\xBD"
        "b\",\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"]");
  std::string big;  // bounded: 4096 bytes of a hostile name at most
  format::json_writer b(big);
  b.value(std::string(5000, 'x'));
  CHECK(big.size() == 4096 + 2);
}

TEST_CASE("json_writer places commas in nested containers and resumes a prefix", "[format][json][writer]") {
  std::string out;
  format::json_writer w(out);
  w.begin_object()
      .key("a")
      .begin_array()
      .value(1)
      .begin_object()
      .end_object()
      .begin_array()
      .end_array()
      .value(true)
      .null()
      .end_array();
  w.key("b").begin_object().key("c").value(-2).key("d").value("e").end_object().key("f").value(false).end_object();
  CHECK(out == "{\"a\":[1,{},[],true,null],\"b\":{\"c\":-2,\"d\":\"e\"},\"f\":false}");
  CHECK(w.depth() == 0);

  std::string prefix;
  format::json_writer p(prefix);
  p.begin_object().key("header").value(1);
  std::string rec;
  format::json_writer r(rec);
  r.resume_object(prefix).key("x").raw("[1,2]").end_object();
  CHECK(rec == "{\"header\":1,\"x\":[1,2]}");
}

TEST_CASE("json_writer numbers: exact, fixed, %g, scaled, quoted, hex, non-finite", "[format][json][writer]") {
  std::string out;
  format::json_writer w(out);
  w.begin_array();
  w.value(std::uint64_t{18446744073709551615ull})
      .value(std::int64_t{-9223372036854775807ll - 1})
      .value(0.1)
      .value(1e300);
  w.value(std::nan(""))
      .value(-HUGE_VAL)
      .fixed(1.0 / 3, 6)
      .fixed(2.5, 0)
      .general(3.88656e13, 6)
      .general(0.125, 6)
      .general(30.0, 6);
  w.scaled(1700000000123456789ull, 3).scaled(7, 3).scaled(42, 0).quoted(std::uint64_t{12}).hex64(0xfedcba9876543210ull);
  w.end_array();
  CHECK(out ==
        "[18446744073709551615,-9223372036854775808,0.1,1e+300,0,0,0.333333,2,3.88656e+13,0.125,30,"
        "1700000000123456.789,0.007,42,\"12\",\"0xfedcba9876543210\"]");
}

TEST_CASE("json_writer layouts: separators and one item a line", "[format][json][writer]") {
  std::string out;
  format::json_writer w(out, {.comma = ", ", .colon = ": "});
  w.begin_object({"\n  ", "\n"}).key("a").begin_array().value(1).value(2).end_array();
  w.key("b")
      .begin_array({"\n    ", "\n  "})
      .begin_object()
      .key("x")
      .value(1)
      .key("y")
      .value(2)
      .end_object()
      .value(3)
      .end_array();
  w.end_object();
  CHECK(out == "{\n  \"a\": [1, 2],\n  \"b\": [\n    {\"x\": 1, \"y\": 2},\n    3\n  ]\n}");
  std::string empty;
  format::json_writer e(empty);
  e.begin_array({"\n", "\n"}).end_array();
  CHECK(empty == "[\n]");
}
