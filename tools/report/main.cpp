// ncclinsp-report: see docs/report.md.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>

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
}  // namespace

int main(int argc, char** argv) {
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
