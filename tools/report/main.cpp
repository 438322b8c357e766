// ncclinsp-report: see docs/report.md. `ncclinsp-report hang DIR` reads state dumps instead (hang.hpp).
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string_view>

#include "hang.hpp"
#include "report.hpp"

namespace rep = ncclinsp::report;

namespace {
bool write_file(const std::string& path, auto&& fn) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    std::cerr << "ncclinsp-report: cannot write " << path << "\n";
    return false;
  }
  fn(f);
  f.flush();
  if (!f) {
    std::cerr << "ncclinsp-report: error writing " << path << "\n";
    return false;
  }
  return true;
}

/// `ncclinsp-report hang ...` (argv[0] is "hang"). Exit status: 0 no hang, 3 a hang, 1 no dumps.
int hang_main(int argc, char** argv) {
  namespace hang = rep::hang;
  CLI::App app{
      "ncclinsp-report hang: merges the state dumps (*.state.json) of every rank and names the rank(s) a hang "
      "waits for, per communicator"};
  app.name("ncclinsp-report hang");
  std::vector<std::string> inputs;
  hang::options o;
  bool json = false;
  app.add_option("inputs", inputs, "state dump files or directories (searched recursively for *.state.json)")
      ->required();
  app.add_option("--min-age", o.min_age_s,
                 "an op in flight this many seconds is stuck (default: each dump's NCCLINSP_STATE_WARN_S)");
  app.add_option("--stale-after", o.stale_after_s,
                 "a dump this many seconds older than the job's newest means its process is gone or stopped "
                 "writing (default: 3 x NCCLINSP_STATE_EVERY_S + 5)");
  app.add_option("--job", o.job, "only the dumps of this job key");
  app.add_flag("--json", json, "JSON instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  hang::dumps d = hang::read_dumps(inputs);
  if (d.files.empty()) {
    for (const auto& e : d.errors) std::cerr << "ncclinsp-report hang: skipped " << e << "\n";
    std::cerr << "ncclinsp-report hang: no state dumps (*.state.json) found in the inputs\n";
    return 1;
  }
  const std::vector<hang::job_verdict> v = hang::analyze(d, o);
  if (json)
    hang::write_json(std::cout, d, v);
  else
    hang::write_text(std::cout, d, v);
  for (const auto& jv : v)
    if (jv.hang) return 3;
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "hang") return hang_main(argc - 1, argv + 1);
  CLI::App app{
      "ncclinsp-report: per-collective bandwidth tables and straggler attribution from the JSON-lines files of all ranks "
      "(ncclinsp JSON mode or NVIDIA Inspector v4.x)"};
  std::vector<std::string> inputs;
  std::string out_dir, html, json;
  rep::analysis_options ao;
  int top = 10;
  bool quiet = false, fail_on_straggler = false;
  app.add_option("inputs", inputs,
                 "JSON-lines files or directories (searched recursively for *.log, *.jsonl and rotated *.log.N)")
      ->required();
  app.add_option("-o,--out-dir", out_dir, "write report.html, report.json, collectives.csv, ranks.csv, hosts.csv here");
  app.add_option("--html", html, "write the HTML report to this file");
  app.add_option("--json", json, "write the JSON report to this file");
  app.add_option("-t,--threshold", ao.threshold,
                 "straggler threshold: relative busbw deficit vs. the op median (default 0.10)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--min-bytes", ao.min_bytes, "ignore ops smaller than this many bytes");
  app.add_option("--top", top, "ranks listed in the text output (default 10)");
  app.add_flag("-q,--quiet", quiet, "no text report on stdout (warnings still go to stderr)");
  app.add_flag("--fail-on-straggler", fail_on_straggler, "exit with status 3 when a straggler host is found");
  app.footer(
      "Subcommand: ncclinsp-report hang DIR... merges the state dumps of every rank and names the rank a "
      "hang waits for (ncclinsp-report hang --help).");
  CLI11_PARSE(app, argc, argv);

  rep::job j = rep::read_job(inputs);
  if (j.ops.empty()) {
    rep::write_warnings(std::cerr, j);
    std::cerr << "ncclinsp-report: no op records found in the inputs\n";
    return 1;
  }
  rep::analysis a = rep::analyze(j, ao);
  if (!quiet) rep::write_text(std::cout, j, a, top);
  std::cout.flush();
  rep::write_warnings(std::cerr, j);

  bool ok = true;
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    ok &= write_file(out_dir + "/report.html", [&](std::ostream& o) { rep::write_html(o, j, a); });
    ok &= write_file(out_dir + "/report.json", [&](std::ostream& o) { rep::write_json(o, j, a); });
    ok &= write_file(out_dir + "/collectives.csv", [&](std::ostream& o) { rep::write_csv_sizes(o, j, a); });
    ok &= write_file(out_dir + "/ranks.csv", [&](std::ostream& o) { rep::write_csv_ranks(o, j, a); });
    ok &= write_file(out_dir + "/hosts.csv", [&](std::ostream& o) { rep::write_csv_hosts(o, j, a); });
  }
  if (!html.empty()) ok &= write_file(html, [&](std::ostream& o) { rep::write_html(o, j, a); });
  if (!json.empty()) ok &= write_file(json, [&](std::ostream& o) { rep::write_json(o, j, a); });
  if (!ok) return 1;
  if (fail_on_straggler)
    for (const auto& h : a.hosts)
      if (h.straggler) return 3;
  return 0;
}
