// ncclinsp-report's reader/analysis on handcrafted JSON lines (tests/report/data), and the trace sink.
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <algorithm>
#include <string>

#include "ncclinsp/format/chrome_trace.hpp"
#include "ncclinsp/sinks/trace_sink.hpp"
#include "report.hpp"

namespace fs = std::filesystem;
namespace rep = ncclinsp::report;

namespace {
std::string data_dir() { return NCCLINSP_REPORT_DATA; }

std::string scratch(const std::string& name) {
  auto p = fs::temp_directory_path() / ("ncclinsp-report-test-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

const rep::host_row* host(const rep::job& j, const rep::analysis& a, const std::string& name) {
  for (const auto& h : a.hosts)
    if (j.hosts[h.host] == name) return &h;
  return nullptr;
}
}  // namespace

TEST_CASE("reader: golden job directory (rotation, truncated line, unknown kind, v4.0 id, missing rank)") {
  rep::job j = rep::read_job({data_dir() + "/job"});
  CHECK(j.files == 4);  // .log, .log.1, hostB, old/hostC; README.txt ignored
  // world: ranks 0,1 x 4 (two of them from the rotated .1), rank 2 x 3 (4th line truncated), rank 3 x 1 (v4.0)
  // tp: rank 0 x 2
  CHECK(j.ops.size() == 14);
  CHECK(j.comms_used == 2);
  CHECK(j.warn.count("truncated last line (file still being written, or the writer was killed)") == 1);
  CHECK(j.warn.count("unknown record kind 'future_perf' (skipped)") == 1);
  CHECK(j.warn.count("truncated 14-digit communicator id mapped onto the full id") == 1);
  CHECK(j.warn.count("mixed format versions") == 1);
  CHECK(j.dropped_total == 2);
  CHECK(j.versions.at("v4.0") == 1);
  CHECK(j.warn.count("malformed JSON line") == 0);

  rep::analysis a = rep::analyze(j, {});
  CHECK(a.matched_ops == 6);     // world sn 0..3, tp sn 0..1
  CHECK(a.incomplete_ops == 5);  // world sn 1,2 (3/4), sn 3 (2/4), tp sn 0,1 (1/2)
  REQUIRE(a.missing_ranks.size() == 1);
  CHECK(a.missing_ranks[0].find("tp 0xaaaabbbbccccdddd: 1 of 2 ranks never seen (1)") != std::string::npos);
  CHECK(j.warn.count("op seen on fewer ranks than n_ranks (missing rank files, drops or a hang)") == 5);
  CHECK(a.skew_source == "start_ts_ns");

  // The v4.0 record (rank 3 on hostC) was matched with the others of world sn 0.
  const auto* hc = host(j, a, "hostC");
  REQUIRE(hc);
  CHECK(hc->records == 1);

  // hostB (rank 2) arrives 50 us late and ends with its peers (sim/README.md "Timing model"): the shortest exec time
  // (half the op median), so the highest kernel-time busbw; its peers' exec times are inflated by their wait.
  // The report names it from its lateness, never from bus bandwidth.
  REQUIRE(a.hosts.size() == 3);
  CHECK(j.hosts[a.hosts[0].host] == "hostB");
  CHECK(a.hosts[0].straggler);
  CHECK(a.hosts[0].rel_in_op == Approx(2.0));
  CHECK(a.hosts[0].deviation == Approx(-0.5));
  CHECK(a.hosts[0].late_us == Approx(50.0));
  CHECK_FALSE(host(j, a, "hostA")->straggler);
  CHECK_FALSE(host(j, a, "hostC")->straggler);
  CHECK(host(j, a, "hostA")->late_us == Approx(0.0));
  REQUIRE(!a.ranks.empty());
  CHECK(a.ranks[0].rank == 2);
  CHECK(a.ranks[0].straggler);
  CHECK(a.ranks[0].rel_exec_in_op == Approx(0.5));
  CHECK(a.ranks[0].slow_ops == 3);
  for (std::size_t i = 1; i < a.ranks.size(); ++i) CHECK_FALSE(a.ranks[i].straggler);

  // Size table: world AllReduce 1 MiB dominates the time.
  REQUIRE(a.sizes.size() == 2);
  CHECK(a.sizes[0].bytes == 1048576);
  CHECK(a.sizes[0].records == 12);
  CHECK(a.sizes[0].ops == 4);
  CHECK(a.sizes[0].busbw.min == Approx(15.72864));
  CHECK(a.sizes[0].busbw.p50 == Approx(15.72864));
  CHECK(a.sizes[0].time_share == Approx(1050.0 / 1090.0));
}

TEST_CASE("reader: outputs name the straggler, JSON output parses") {
  rep::job j = rep::read_job({data_dir() + "/job"});
  rep::analysis a = rep::analyze(j, {});
  std::ostringstream text, html, json, csv;
  rep::write_text(text, j, a, 5);
  rep::write_html(html, j, a);
  rep::write_json(json, j, a);
  rep::write_csv_hosts(csv, j, a);
  CHECK(text.str().find("Verdict: straggler host: hostB") != std::string::npos);
  CHECK(html.str().find("<svg class=\"chart hosts\"") != std::string::npos);
  CHECK(html.str().find("<svg class=\"chart sizes\"") != std::string::npos);
  CHECK(html.str().find("<svg class=\"chart ranks\"") != std::string::npos);
  CHECK(html.str().find("<script") == std::string::npos);
  CHECK(html.str().find("http://") == html.str().find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  CHECK(csv.str().find("hostB,1,3,2,") != std::string::npos);
  simdjson::dom::parser p;
  simdjson::padded_string ps(json.str());
  simdjson::dom::element doc;
  REQUIRE(!p.parse(ps).get(doc));
  std::string_view first_straggler;
  REQUIRE(!doc["stragglers"].at(0).get_string().get(first_straggler));
  CHECK(first_straggler == "hostB");
  std::uint64_t incomplete = 0;
  REQUIRE(!doc["summary"]["incomplete_ops"].get_uint64().get(incomplete));
  CHECK(incomplete == 5);
}

TEST_CASE("reader: no straggler when all hosts agree, threshold") {
  const std::string d = scratch("even");
  std::ofstream f(d + "/a.jsonl");
  for (int sn = 0; sn < 3; ++sn)
    for (int r = 0; r < 2; ++r)
      f << R"({"header":{"id":"0x00000000000000ab","comm_name":"x","rank":)" << r
        << R"(,"n_ranks":2,"nnodes":2},"metadata":{"inspector_output_format_version":"v4.3","git_rev":"ncclinsp-0.1.0","hostname":"h)"
        << r << R"(","pid":1},"coll_perf":{"coll":"AllGather","coll_sn":)" << sn
        << R"(,"coll_msg_size_bytes":65536,"coll_exec_time_us":)" << (r ? "9.5" : "10.0") << R"(,"coll_busbw_gbs":)"
        << (r ? "10.5" : "10.0") << "}}\n";  // h1 arrives 0.5 us late
  f.close();
  rep::job j = rep::read_job({d});
  CHECK(j.ops.size() == 6);
  rep::analysis a = rep::analyze(j, {.threshold = 0.10});
  for (const auto& h : a.hosts) CHECK_FALSE(h.straggler);
  rep::job j2 = rep::read_job({d});
  rep::analysis a2 = rep::analyze(j2, {.threshold = 0.01});
  CHECK(j2.hosts[a2.hosts[0].host] == "h1");
  CHECK(a2.hosts[0].straggler);
  CHECK(a2.skew_source == "none");
  fs::remove_all(d);
}

TEST_CASE("reader: malformed middle line, NaN busbw, empty input") {
  const std::string d = scratch("bad");
  {
    std::ofstream f(d + "/b.log");
    f << "{not json\n\n";
    f << R"({"header":{"id":"0x1","rank":0,"n_ranks":1,"nnodes":1},"metadata":{"inspector_output_format_version":"v4.1","hostname":"h"},"coll_perf":{"coll":"AllReduce","coll_sn":1,"coll_msg_size_bytes":8,"coll_exec_time_us":0,"coll_busbw_gbs":"nan"}})"
      << "\n";
    f << R"({"header":{"id":"0x1","rank":0,"n_ranks":1,"nnodes":1},"metadata":{"inspector_output_format_version":"v9.9","hostname":"h"},"coll_perf":{"coll":"AllReduce","coll_sn":2,"coll_msg_size_bytes":8,"coll_exec_time_us":1,"coll_busbw_gbs":1.0}})"
      << "\n";
  }
  rep::job j = rep::read_job({d});
  CHECK(j.warn.count("malformed JSON line") == 1);
  CHECK(j.warn.count("unknown format version 'v9.9' (read as v4.x)") == 1);
  REQUIRE(j.ops.size() == 2);
  CHECK_FALSE(j.ops[0].valid);
  CHECK(j.ops[1].valid);
  rep::analysis a = rep::analyze(j, {});
  REQUIRE(a.sizes.size() == 1);
  CHECK(a.sizes[0].invalid == 1);
  rep::job e = rep::read_job({d + "/does-not-exist"});
  CHECK(e.ops.empty());
  CHECK(e.warn.count("input not found") == 1);
  fs::remove_all(d);
}

// ---------------------------------------------------------------------------------------------
// Trace sink

namespace {
ncclinsp::snapshot make_snap(std::uint64_t first_seq, int n) {
  ncclinsp::snapshot s;
  s.time_unix_ns = 1700000000000000000ull;
  s.identity = {.node = "node7", .hostname = "host7", .pid = 4242};
  ncclinsp::comm_snapshot c;
  c.desc = {
      .name = "tp", .hash = 0xfedcba9876543210ull, .rank = 1, .nranks = 4, .nnodes = 1, .device = 3, .uuid = "GPU-abc"};
  s.comms.push_back(c);
  c.desc = {.name = "dp", .hash = 0x42, .rank = 0, .nranks = 2, .nnodes = 2, .device = 3, .uuid = "GPU-abc"};
  s.comms.push_back(c);
  for (int i = 0; i < n; ++i) {
    ncclinsp::record_entry r;
    r.comm = static_cast<std::uint32_t>(i % 2);
    r.op.seq = first_seq + static_cast<std::uint64_t>(i);
    r.op.fn = i % 2 ? ncclinsp::func::all_gather : ncclinsp::func::all_reduce;
    ncclinsp::set_size(r.op, 1 << 20, ncclinsp::dtype::bfloat16);
    r.op.start_ns = 1000000000ull + static_cast<std::uint64_t>(i) * 1000000ull + 123;
    r.op.end_ns = r.op.start_ns + 250500;
    r.op.alg = ncclinsp::algo::ring;
    r.op.pro = ncclinsp::proto::simple;
    r.op.channels = 4;
    s.records.push_back(r);
  }
  return s;
}

struct parsed_trace {
  std::size_t x = 0, meta = 0;
  std::vector<std::uint64_t> seqs;
  std::vector<std::string> names;
  double first_ts = -1, first_dur = -1;
};

parsed_trace parse_trace(const std::string& path) {
  parsed_trace t;
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  auto err = p.load(path).get(doc);
  REQUIRE(!err);
  simdjson::dom::array evs;
  REQUIRE(!doc["traceEvents"].get_array().get(evs));
  for (auto e : evs) {
    std::string_view ph;
    REQUIRE(!e["ph"].get_string().get(ph));
    if (ph == "X") {
      ++t.x;
      std::uint64_t seq = 0;
      REQUIRE(!e["args"]["seq"].get_uint64().get(seq));
      t.seqs.push_back(seq);
      if (t.first_ts < 0) {
        REQUIRE(!e["ts"].get_double().get(t.first_ts));
        REQUIRE(!e["dur"].get_double().get(t.first_dur));
      }
    } else if (ph == "M") {
      ++t.meta;
      std::string_view n;
      if (!e["args"]["name"].get_string().get(n)) t.names.emplace_back(n);
    }
  }
  return t;
}
}  // namespace

TEST_CASE("chrome trace: serializer writes exact microseconds and escapes names") {
  ncclinsp::format::trace_event e;
  e.comm_hash = 0x1;
  e.nranks = 4;
  e.op.fn = ncclinsp::func::all_reduce;
  ncclinsp::set_size(e.op, 1 << 20, ncclinsp::dtype::float32);
  e.op.start_ns = 1700000000123456789ull;
  e.op.end_ns = e.op.start_ns + 1000001;
  std::string out;
  ncclinsp::format::write_trace_event(out, e);
  CHECK(out.find("\"ts\":1700000000123456.789,\"dur\":1000.001") != std::string::npos);
  CHECK(out.find("\"busbw_gbs\":6.291") != std::string::npos);  // 4 MiB * 1.5 / 1.000001 ms
  std::vector<ncclinsp::format::trace_process> procs = {{0, "a\"b"}};
  std::string doc;
  ncclinsp::format::write_chrome_trace(doc, procs, {}, std::span(&e, 1));
  CHECK(doc.find("\"name\":\"a\\\"b\"") != std::string::npos);
  simdjson::dom::parser p;
  simdjson::padded_string ps(doc);
  simdjson::dom::element d;
  CHECK(!p.parse(ps).get(d));
}

TEST_CASE("trace sink: trigger file, request_dump, ring bound, shutdown") {
  const std::string d = scratch("trace");
  ncclinsp::trace_sink s({.dir = d, .capacity = 8});
  REQUIRE(s.write(make_snap(0, 6)) == ncclinsp::export_result::success);
  CHECK(s.dumps() == 0);
  CHECK(!fs::exists(s.path()));
  CHECK(s.path() == d + "/node7-pid4242.trace.json");

  // Trigger file: consumed, trace written with the 6 + 4 records seen, the last 8 kept.
  std::ofstream(d + "/ncclinsp.trace.trigger").close();
  REQUIRE(s.write(make_snap(6, 4)) == ncclinsp::export_result::success);
  CHECK(s.dumps() == 1);
  CHECK(!fs::exists(d + "/ncclinsp.trace.trigger"));
  REQUIRE(fs::exists(s.path()));
  parsed_trace t = parse_trace(s.path());
  CHECK(t.x == 8);
  REQUIRE(t.seqs.size() == 8);
  CHECK(t.seqs.front() == 2);  // oldest kept, in arrival order
  CHECK(t.seqs.back() == 9);
  CHECK(t.first_ts == Approx(1002000.123));
  CHECK(t.first_dur == Approx(250.5));
  CHECK(std::find(t.names.begin(), t.names.end(), "node7 GPU 3 (GPU-abc)") != t.names.end());
  CHECK(std::find(t.names.begin(), t.names.end(), "tp 0xfedcba9876543210 rank 1/4") != t.names.end());
  CHECK(std::find(t.names.begin(), t.names.end(), "dp 0x0000000000000042 rank 0/2") != t.names.end());
  CHECK(s.total() == 10);
  CHECK(s.size() == 8);

  // No trigger: no new dump.
  REQUIRE(s.write(make_snap(10, 1)) == ncclinsp::export_result::success);
  CHECK(s.dumps() == 1);

  // request_dump() (what the SIGUSR2 handler calls): one dump at the next export.
  ncclinsp::trace_sink::request_dump();
  REQUIRE(s.write(make_snap(11, 1)) == ncclinsp::export_result::success);
  CHECK(s.dumps() == 2);
  REQUIRE(s.write(make_snap(12, 1)) == ncclinsp::export_result::success);
  CHECK(s.dumps() == 2);

  // shutdown(): written at exit.
  s.shutdown();
  CHECK(s.dumps() == 3);
  t = parse_trace(s.path());
  CHECK(t.seqs.back() == 12);
  fs::remove_all(d);
}

TEST_CASE("trace sink: records with an op_trace get one track per channel, right after their communicator's") {
  const std::string d = scratch("chan");
  ncclinsp::trace_sink s({.dir = d});
  auto snap = make_snap(0, 1);  // one AllReduce of tp on channels 6 and 2 (in start order)
  ncclinsp::op_trace t;
  t.n_channels = 2;
  t.channels[0] = {
      .gpu_start_ns = snap.records[0].op.start_ns + 1000, .gpu_stop_ns = snap.records[0].op.end_ns, .channel = 6};
  t.channels[1] = {
      .gpu_start_ns = snap.records[0].op.start_ns, .gpu_stop_ns = snap.records[0].op.end_ns - 500, .channel = 2};
  snap.traces.push_back(t);
  snap.records[0].trace = 0;
  REQUIRE(s.write(snap) == ncclinsp::export_result::success);
  s.shutdown();
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  REQUIRE(!p.load(s.path()).get(doc));
  std::map<std::string, std::uint64_t> sort_of;               // track name -> sort index
  std::map<std::uint64_t, std::string> name_of;               // tid -> track name
  std::map<std::int64_t, std::pair<double, double>> span_of;  // channel -> (ts, dur)
  std::uint64_t op_events = 0;
  for (auto e : doc["traceEvents"].get_array()) {
    const std::string_view ph = e["ph"].get_string().value();
    if (ph == "M" && e["name"].get_string().value() == "thread_name")
      name_of[e["tid"].get_uint64().value()] = std::string(e["args"]["name"].get_string().value());
    if (ph == "M" && e["name"].get_string().value() == "thread_sort_index")
      sort_of[name_of[e["tid"].get_uint64().value()]] = e["args"]["sort_index"].get_uint64().value();
    if (ph != "X") continue;
    if (e["cat"].get_string().value() != "channel") {
      ++op_events;
      continue;
    }
    CHECK(e["args"]["busbw_gbs"].error());  // a channel's byte share is unknown: no bandwidth
    CHECK(name_of[e["tid"].get_uint64().value()] ==
          "tp 0xfedcba9876543210 rank 1/4 ch " + std::to_string(e["args"]["channel"].get_int64().value()));
    span_of[e["args"]["channel"].get_int64().value()] = {e["ts"].get_double().value(), e["dur"].get_double().value()};
  }
  CHECK(op_events == 1);
  REQUIRE(span_of.size() == 2);
  CHECK(span_of[6].first == Approx(1000001.123));
  CHECK(span_of[6].second == Approx(249.5));
  CHECK(span_of[2].first == Approx(1000000.123));
  CHECK(span_of[2].second == Approx(250.0));
  const auto comm = sort_of.at("tp 0xfedcba9876543210 rank 1/4");
  CHECK(sort_of.at("tp 0xfedcba9876543210 rank 1/4 ch 6") == comm + 7);
  CHECK(sort_of.at("tp 0xfedcba9876543210 rank 1/4 ch 2") == comm + 3);
  fs::remove_all(d);
}

TEST_CASE("trace sink: SIGUSR2 requests a dump, node grouping, any_sink") {
  const std::string d = scratch("sig");
  struct sigaction old {};
  ::sigaction(SIGUSR2, nullptr, &old);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  ::sigaction(SIGUSR2, &dfl, nullptr);
  {
    ncclinsp::trace_sink s(
        {.dir = d, .grouping = ncclinsp::trace_grouping::node, .install_sigusr2 = true, .write_at_exit = false});
    REQUIRE(s.write(make_snap(0, 3)) == ncclinsp::export_result::success);
    CHECK(s.dumps() == 0);
    REQUIRE(::raise(SIGUSR2) == 0);
    REQUIRE(s.write(make_snap(3, 1)) == ncclinsp::export_result::success);
    CHECK(s.dumps() == 1);
    parsed_trace t = parse_trace(s.path());
    CHECK(t.x == 4);
    CHECK(std::find(t.names.begin(), t.names.end(), "node7") != t.names.end());
    s.shutdown();  // write_at_exit = false
    CHECK(s.dumps() == 1);
  }
  ::sigaction(SIGUSR2, &old, nullptr);
  ncclinsp::any_sink a(ncclinsp::trace_sink({.dir = d, .file_name = "t.json"}));
  CHECK(a.name() == "trace");
  REQUIRE(a.write(make_snap(0, 2)) == ncclinsp::export_result::success);
  a.shutdown();
  CHECK(fs::exists(d + "/t.json"));
  fs::remove_all(d);
}

TEST_CASE("trace sink: unwritable directory fails cleanly") {
  // A path below a regular file (ENOTDIR even as root).
  const std::string d = scratch("ro");
  std::ofstream(d + "/file").close();
  ncclinsp::trace_sink s({.dir = d + "/file/sub"});
  REQUIRE(s.write(make_snap(0, 1)) == ncclinsp::export_result::success);
  CHECK(s.dump() == ncclinsp::export_result::failure);
  CHECK(s.dumps() == 0);
  fs::remove_all(d);
}
