#include <catch2/catch.hpp>

#include <clocale>
#include <cmath>
#include <locale>

#include "format_fixture.hpp"
#include "ncclinsp/format/inspector_json.hpp"
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
    for (const char* known : {"nccl_collective_exec_time_microseconds use base unit \"seconds\" instead of \"microseconds\"",
                              "nccl_p2p_exec_time_microseconds use base unit \"seconds\" instead of \"microseconds\""})
      if (out.find(known) != std::string::npos) --findings;
    CHECK(findings == 0);
  }
}

TEST_CASE("Inspector's four families keep its names and label order", "[format][prom][compat]") {
  const auto snap = fixture::make_snapshot();
  std::string text;
  format::write_prometheus(text, snap, "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(text.find("nccl_bus_bandwidth_gbs{version=\"v7.1\",slurm_job_id=\"4242\",node=\"node0\",gpu=\"GPU3\",comm_name=\"tp\",n_nodes=\"1\","
                  "nranks=\"4\",collective=\"AllReduce\",message_size=\"4-5MB\",algo_proto=\"RING_SIMPLE\",uuid=") != std::string::npos);
  CHECK(text.find("nccl_p2p_exec_time_microseconds{version=\"v7.1\",slurm_job_id=\"4242\",node=\"node0\",gpu=\"GPU3\",comm_name=") !=
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
  CHECK(text.rfind("{\"header\":{\"id\":\"0xfedcba9876543210\",\"comm_name\":\"tp\",\"rank\":1,\"n_ranks\":4,\"nnodes\":1},\"metadata\":{", 0) == 0);
  CHECK(text.find("\"coll_perf\":{\"coll\":\"AllReduce\",\"coll_sn\":10,\"coll_msg_size_bytes\":4194304,\"coll_exec_time_us\":500.000,"
                  "\"coll_timing_source\":\"kernel_gpu\",\"coll_algobw_gbs\":8.388608,\"coll_busbw_gbs\":12.582912") != std::string::npos);
  CHECK(text.find("\"p2p_perf\":{\"p2p\":\"Send\",\"p2p_sn\":1,\"p2p_peer\":3,\"p2p_msg_size_bytes\":1000") != std::string::npos);
  CHECK(text.find("\"comm_name\":\"dp \\\"x\\\"\\\\y\\nz\"") != std::string::npos);
}
