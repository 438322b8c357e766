// The release tables of docs/nccl-versions.md and sim/README.md, written from the behaviour table
// (include/ncclinsp/abi/nccl_behaviours.hpp) between their markers, and the checks that keep the
// table honest: every filter reason is one the plugin counts, every trace exists under
// tests/traces/, every conformance phrase names an nccl_conformance case.
//
//   nccl_table_docs --write ROOT   rewrite the generated blocks under the repository ROOT
//   nccl_table_docs --check ROOT   exit 1 if a block differs from the table or a row fails a check
//                                  (ctest nccl_table_docs)
#include <ncclinsp/abi/nccl_behaviours.hpp>
#include <ncclinsp/snapshot.hpp>

#include "nccl_release.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using ncclinsp::abi::nccl_behaviour_row;
using ncclinsp::abi::nccl_behaviours;
using ncclinsp::abi::nccl_holds;
using ncclinsp::abi::nccl_open;
using ncclinsp::abi::nccl_releases;

std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string release_of(int code) {
  if (code == 23100) return "2.31.0a0";  // the dev branch read
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  return buf;
}

std::string releases_text(const nccl_behaviour_row& r) {
  std::string s = r.from == 22703 && r.to == nccl_open ? "all" : release_of(r.from) + " ..";
  if (r.to != nccl_open) s += " " + release_of(r.to);
  if (r.shim) {
    s += " (through the shim of the v" + std::to_string(r.abi_lo) + " table";
    if (r.abi_hi != r.abi_lo) s += " or the v" + std::to_string(r.abi_hi) + " one";
    s += ")";
  } else if (r.abi_lo != 4 || r.abi_hi != 7) {
    s += " (v" + std::to_string(r.abi_lo) + (r.abi_hi != r.abi_lo ? "-v" + std::to_string(r.abi_hi) : "") + " table)";
  }
  return s;
}

/// docs/nccl-versions.md: behaviour x release, every release read (and the unread newest).
std::string glance() {
  std::ostringstream o;
  o << "| behaviour |";
  for (const auto& r : nccl_releases) o << ' ' << r.name << " |";
  o << "\n|---|";
  for (std::size_t i = 0; i < std::size(nccl_releases); ++i) o << "---|";
  o << "\n| profiler table NCCL loads |";
  for (const auto& r : nccl_releases) o << " v" << r.abi << (r.read ? "" : " (assumed)") << " |";
  o << '\n';
  for (const auto& b : nccl_behaviours) {
    if (b.shim) continue;
    o << "| " << cell(b.what) << " |";
    for (const auto& r : nccl_releases)
      o << ' ' << (!r.read ? "unknown" : nccl_holds(b.id, r.version_code, r.abi, r.abi) ? "yes" : "no") << " |";
    o << '\n';
  }
  o << "\nSource read per release:";
  for (const auto& r : nccl_releases) o << (&r == nccl_releases ? " " : "; ") << r.name << ": " << r.source;
  o << ".\n";
  return o.str();
}

std::string checked_by(const nccl_behaviour_row& b) {
  std::string s;
  if (*b.conformance) s = std::string("`nccl_conformance` \"") + b.conformance + "\"";
  if (*b.trace) s += (s.empty() ? "" : "; ") + std::string("trace `tests/traces/") + b.trace + "`";
  return s.empty() ? "-" : s;
}

/// docs/nccl-versions.md: per behaviour, where NCCL does it and what the plugin makes of it.
std::string rules() {
  std::ostringstream o;
  o << "| behaviour | releases | NCCL | ncclinsp | counted as | checked by |\n|---|---|---|---|---|---|\n";
  for (const auto& b : nccl_behaviours)
    o << "| " << cell(b.what) << " | " << cell(releases_text(b)) << " | " << cell(b.nccl) << " | " << cell(b.plugin)
      << " | " << (*b.reason ? "`" + std::string(b.reason) + "`" : std::string("-")) << " | " << cell(checked_by(b))
      << " |\n";
  return o.str();
}

/// sim/README.md: what each --nccl release reproduces, and the model without --nccl.
std::string sim_releases() {
  namespace sim = ncclinsp::sim;
  std::ostringstream o;
  o << "| behaviour |";
  for (const auto& r : sim::releases) o << ' ' << r.name << " |";
  o << " without `--nccl` | in the simulator |\n|---|";
  for (std::size_t i = 0; i < std::size(sim::releases); ++i) o << "---|";
  o << "---|---|\n| profiler table |";
  for (const auto& r : sim::releases) o << " v" << r.abi << " |";
  o << " the newest, or `--abi` | `plugin_library` |\n";
  for (const auto& b : nccl_behaviours) {
    o << "| " << cell(b.what) << " |";
    for (const auto& r : sim::releases) {
      std::string c;
      for (int t = b.abi_lo; t <= b.abi_hi; ++t)
        if ((!b.shim || t < r.abi) && (b.shim || t == r.abi) && nccl_holds(b.id, r.version_code, r.abi, t))
          c += (c.empty() ? "" : ", ") + std::string(b.shim ? "v" + std::to_string(t) + " table" : "yes");
      o << ' ' << (c.empty() ? "no" : c) << " |";
    }
    const char* model = !b.sim_reads ? "-" : b.shim ? "with `shim_quirks`" : b.model ? "as its table's release" : "no";
    o << ' ' << model << " | " << cell(b.sim) << (b.sim_reads ? " (`nccl_profile`)" : "") << " |\n";
  }
  return o.str();
}

struct block {
  const char* file;
  const char* name;
  std::string (*make)();
};
constexpr block blocks[] = {{"docs/nccl-versions.md", "releases", glance},
                            {"docs/nccl-versions.md", "rules", rules},
                            {"sim/README.md", "sim releases", sim_releases}};

std::string begin_marker(const block& b) {
  return std::string("<!-- generated by nccl_table_docs from include/ncclinsp/abi/nccl_behaviours.hpp: ") + b.name +
         " -->\n";
}
std::string end_marker(const block& b) { return std::string("<!-- end of generated ") + b.name + " -->"; }

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// The conformance sources with adjacent string literals joined (a case name spans lines).
std::string conformance_names(const std::filesystem::path& root) {
  std::string all;
  for (const auto& e : std::filesystem::directory_iterator(root / "tests" / "plugin")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("test_nccl_conformance", 0) == 0) all += read(e.path());
  }
  std::string out;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '"') {  // `"\n   "` inside a name: drop it
      std::size_t j = i + 1;
      while (j < all.size() && (all[j] == ' ' || all[j] == '\n')) ++j;
      if (j > i + 1 && j < all.size() && all[j] == '"' && all.find('\n', i + 1) < j) {
        i = j;
        continue;
      }
    }
    out += all[i];
  }
  return out;
}

int check_rows(const std::filesystem::path& root) {
  int bad = 0;
  const std::string names = conformance_names(root);
  for (const auto& b : nccl_behaviours) {
    auto fail = [&](const std::string& why) {
      std::fprintf(stderr, "nccl_table_docs: row \"%s\": %s\n", b.what, why.c_str());
      ++bad;
    };
    if (!*b.what || !*b.nccl || !*b.plugin || !*b.sim) fail("what, nccl, plugin and sim are required");
    if (b.from > b.to) fail("from is after to");
    if (*b.reason) {
      bool known = false;
      for (const char* n : ncclinsp::filter_reason_names) known |= std::string_view(n) == b.reason;
      if (!known) fail(std::string("no filter reason named ") + b.reason);
    }
    if (*b.trace && !std::filesystem::exists(root / "tests" / "traces" / b.trace))
      fail(std::string("no trace tests/traces/") + b.trace);
    if (*b.conformance && names.find(b.conformance) == std::string::npos)
      fail(std::string("no nccl_conformance case says \"") + b.conformance + "\"");
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::string_view(argv[1]) != "--check" && std::string_view(argv[1]) != "--write")) {
    std::fprintf(stderr, "usage: nccl_table_docs --check|--write REPOSITORY_ROOT\n");
    return 2;
  }
  const bool write = std::string_view(argv[1]) == "--write";
  const std::filesystem::path root = argv[2];
  int bad = check_rows(root);
  for (const block& b : blocks) {
    const std::filesystem::path path = root / b.file;
    std::string text = read(path);
    const std::string begin = begin_marker(b), end = end_marker(b);
    const std::size_t at = text.find(begin), stop = text.find(end);
    if (at == std::string::npos || stop == std::string::npos || stop < at) {
      std::fprintf(stderr, "nccl_table_docs: %s has no block \"%s\" (markers %s ... %s)\n", b.file, b.name,
                   begin.c_str(), end.c_str());
      ++bad;
      continue;
    }
    const std::string want = b.make();
    const std::size_t from = at + begin.size();
    if (text.compare(from, stop - from, want) == 0) continue;
    if (write) {
      text.replace(from, stop - from, want);
      std::ofstream(path, std::ios::binary) << text;
      std::printf("nccl_table_docs: rewrote \"%s\" in %s\n", b.name, b.file);
    } else {
      std::fprintf(stderr,
                   "nccl_table_docs: the \"%s\" table of %s differs from include/ncclinsp/abi/nccl_behaviours.hpp "
                   "(run nccl_table_docs --write <repository>)\n",
                   b.name, b.file);
      ++bad;
    }
  }
  if (bad) return 1;
  std::printf("nccl_table_docs: OK (%zu behaviours, %zu releases)\n", std::size(nccl_behaviours),
              std::size(nccl_releases));
  return 0;
}
