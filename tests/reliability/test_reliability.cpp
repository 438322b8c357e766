// Reliability: hostile input through the loaded plugin (names, environment, dump directory, disk
// full, bad handles, teardown), no torn files under concurrent readers, and no silent loss in JSON
// mode. The plugin keeps process-wide state configured from the environment at its first init, so
// every plugin scenario runs in a forked child (which dlopens the plugin); the parent checks the
// files. Under ASan each child runs LeakSanitizer itself before it exits.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <grp.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdarg>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl_driver.hpp"
#include "plugin_harness.hpp"
#include "ncclinsp/collector.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"

namespace sim = ncclinsp::sim;
using namespace ncclinsp_test;
namespace abi = ncclinsp::abi;
using namespace std::chrono_literals;

namespace {

/// promtool's findings, less the two known unit lints on Inspector's `*_microseconds` names.
/// Not installed is a finding too (the test command installs it; nothing passes by skipping).
std::string promtool_findings(const std::string& file) {
  if (std::string(NCCLINSP_PROMTOOL).empty()) return "promtool not found at configure time";
  return run_cmd(std::string(NCCLINSP_PROMTOOL) + " check metrics < '" + file + "' 2>&1 | grep -v microseconds");
}

std::map<std::string, std::string> base_env(const std::string& dir, const char* sinks = "prom") {
  return {{"NCCL_INSPECTOR_ENABLE", "1"},   {"NCCLINSP_SINKS", sinks},
          {"NCCL_INSPECTOR_DUMP_DIR", dir}, {"NCCLINSP_CUDA_DRIVER", NCCLINSP_SIMCUDA_LIB},
          {"NCCLINSP_NODE_NAME", "nodeR"},  {"SLURM_JOB_ID", "5"},
          {"NCCLINSP_PROM_KEEP_FILES", "1"}};  // the tests read the final files after teardown
}

// Log lines the plugin sent through NCCL's logger (child process only).
std::mutex g_log_mu;
std::vector<std::pair<int, std::string>> g_log;
void capture_logger(abi::log_level level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard lk(g_log_mu);
  g_log.emplace_back(int(level), buf);
}
int warnings_containing(const std::string& needle) {
  std::lock_guard lk(g_log_mu);
  return static_cast<int>(std::count_if(g_log.begin(), g_log.end(), [&](const auto& l) {
    return l.first == abi::log_warn && l.second.find(needle) != std::string::npos;
  }));
}
int warnings() { return warnings_containing(""); }

/// One AllReduce of 4 MiB completed on 2 channels.
void one_op(sim::comm_driver& c, std::uint64_t at = t0) {
  const auto p = c.enqueue(sim::op_desc{
      .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 2});
  c.complete(p, at, at + 100'000);
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

/// A .prom file: complete (ends with newline), the owner line first, then every line HELP, TYPE or
/// `name{labels} value`.
bool prom_well_formed(const std::string& text, std::set<std::string>* families = nullptr) {
  if (text.empty() || text.back() != '\n') return false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) return false;
    if (line[0] == '#') {
      const bool owner = line.data() == text.data() && line.rfind("# ncclinsp-owner v1 ", 0) == 0;  // first line
      if (line.rfind("# HELP ", 0) != 0 && line.rfind("# TYPE ", 0) != 0 && !owner) return false;
      if (families && line.rfind("# TYPE ", 0) == 0)
        families->insert(std::string(line.substr(7, line.find(' ', 7) - 7)));
      continue;
    }
    const std::size_t sp = line.rfind(' ');
    if (sp == std::string_view::npos || sp + 1 >= line.size()) return false;
    const std::string value(line.substr(sp + 1));
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (*end && value != "+Inf" && value != "-Inf" && value != "NaN") return false;
    const std::string_view series = line.substr(0, sp);
    if (series.find('{') != std::string_view::npos && series.back() != '}') return false;
  }
  return true;
}

}  // namespace

// ---- 3. hostile input --------------------------------------------------------------------------------

TEST_CASE("hostile communicator names and strings: valid exposition and valid JSON", "[reliability][hostile]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(in_child(base_env(dir, "prom,json"), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            const std::string names[] = {"q\"uote",
                                         "back\\slash\\",
                                         "new\nline\r\n",
                                         "bad\xff\xfe utf8 \xc3\x28 \xe2\x82 \xed\xa0\x80",
                                         std::string(10240, 'n'),
                                         std::string("mix\"\\\n\xff") + std::string(10000, '\xc3'),
                                         "{}=,# \t\x01\x7f",
                                         "%s%n%x"};
            std::uint64_t h = 1;
            std::vector<std::unique_ptr<sim::comm_driver>> comms;  // all live at the final export
            for (const auto& n : names) {
              auto& c = *comms.emplace_back(
                  std::make_unique<sim::comm_driver>(lib, sim::comm_config{.comm_hash = h++, .name = n, .n_ranks = 2}));
              if (c.init_result() != abi::success) return 1;
              one_op(c);
              // Strings NCCL would never pass (it passes static names), through the same plugin.
              auto p = c.enqueue(sim::op_desc{.func = sim::nccl_func::all_gather,
                                              .dtype = sim::nccl_dtype::int8,
                                              .count = 1 << 20,
                                              .algo = "\"\\\n\xff",
                                              .proto = "x\xc3",
                                              .n_channels = 1});
              c.complete(p, t0, t0 + 5000);
            }
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  const std::string text = slurp(proms[0]);
  CHECK(prom_well_formed(text));
  CHECK(text.find("comm_name=\"q\\\"uote\"") != std::string::npos);
  CHECK(text.find("comm_name=\"new\\nline\r\\n\"") != std::string::npos);  // exposition escapes \\, \", \n only
  CHECK(promtool_findings(proms[0]).empty());
  const auto logs = files_in(dir, ".log");
  REQUIRE(logs.size() == 1);
  CHECK(json_lines_check(logs[0]) == "ok");
}

TEST_CASE("garbage in every NCCL_INSPECTOR_* / NCCLINSP_* variable: one warning each, defaults used",
          "[reliability][hostile][env]") {
  const std::string dir = fresh_dir("rel");
  // Every variable whose value is parsed (free-form strings such as the dump dir or node name
  // accept anything; the dump dir has its own tests below).
  const std::vector<std::pair<std::string, std::string>> garbage = {
      {"NCCLINSP_ENABLE", "perhaps"},
      {"NCCL_INSPECTOR_ENABLE_P2P", "\xff\xfe"},
      {"NCCL_INSPECTOR_DUMP_THREAD_ENABLE", "yes please"},
      {"NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1e9999"},
      {"NCCLINSP_INTERVAL", "5 parsecs"},
      {"NCCL_INSPECTOR_DUMP_VERBOSE", "2x"},
      {"NCCL_INSPECTOR_PROM_DUMP", "\"1\""},
      {"NCCL_INSPECTOR_PROM_DUMP_STATS", "-"},
      {"NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "-1"},
      {"NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", "99999999999999999999999"},
      {"NCCL_INSPECTOR_DUMP_P2P_RING_SIZE", "0x"},
      {"NCCL_INSPECTOR_COLL_POOL_SIZE", "3"},
      {"NCCL_INSPECTOR_P2P_POOL_SIZE", "ten"},
      {"NCCL_INSPECTOR_COMM_POOL_SIZE", " 256"},
      {"NCCL_INSPECTOR_POOL_GROW", "maybe"},
      {"NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", "1\n"},
      {"NCCL_INSPECTOR_OTEL_EXPORT", "on?"},
      {"NCCL_INSPECTOR_OTEL_VERBOSE", "\\"},
      {"NCCLINSP_SINKS", "prom,statsd"},
      {"NCCLINSP_LABELS", "rank=7,bad label"},
      {"NCCLINSP_USER_TAG_LABEL", "\t"},
      {"NCCLINSP_PROM_KEEP_FILES", "keep"},
      {"NCCLINSP_JSON_MAX_BYTES", std::string(5000, '9')},
      {"NCCLINSP_EXIT_FLUSH_MS", "2 seconds"},
      {"NCCLINSP_RETAIN_FINALIZED_S", "-5"},
      // Identity values: control characters or more than 256 bytes (detail/job_identity.hpp).
      {"NCCLINSP_NODE_NAME", "node\"\\\n\xff"},
      {"NCCLINSP_K8S_NAMESPACE", std::string(3000, '\xc3')},
      {"NCCLINSP_K8S_POD", "pod\"},{\n"},
      {"SLURM_JOB_ID", "\"\n"},
  };
  auto env = base_env(dir);
  env.erase("NCCLINSP_SINKS");
  for (const auto& [k, v] : garbage) env[k] = v;
  // Printable free-form values are taken as given (no warning) and must come out escaped.
  env["NODE_NAME"] = "node\"\\\xff";
  env["POD_NAMESPACE"] = std::string(200, '\xc3');
  env["POD_NAME"] = "pod\"},{";
  env["NCCLINSP_JOB_ID"] = "\"{job}\\";
  REQUIRE(in_child(env, [&garbage] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            void* ctx = nullptr;
            int mask = 0;
            if (lib.table<abi::newest>()->init(&ctx, 42, &mask, "env", 1, 2, 0, capture_logger) != abi::success || !ctx)
              return 1;
            for (const auto& [k, v] : garbage)
              if (warnings_containing(k + "=") != 1) {
                std::fprintf(stderr, "%s: %d warnings\n", k.c_str(), warnings_containing(k + "="));
                return 2;
              }
            if (warnings() != static_cast<int>(garbage.size())) return 3;
            // Defaults: JSON sink, 8192-byte minimum, pools of 256, teardown-only export, enabled.
            std::string banner;
            for (const auto& [l, m] : g_log)
              if (m.find("configuration") != std::string::npos) banner = m;
            for (const char* want : {"sinks=json\n", "min_size_bytes=8192\n", "pools=coll=256,p2p=256\n",
                                     "interval=teardown only\n", "require_kernel_timing=1\n"})
              if (banner.find(want) == std::string::npos) {
                std::fprintf(stderr, "banner lacks %s:\n%s\n", want, banner.c_str());
                return 4;
              }
            if (banner.find("rank=7") != std::string::npos) return 5;  // the rejected NCCLINSP_LABELS are not used
            sim::comm_driver c(lib, {.comm_hash = 43, .name = "env2", .n_ranks = 2});
            one_op(c);
            c.finalize();
            lib.table<abi::newest>()->finalize(ctx);
            return 0;
          }) == 0);
  const auto logs = files_in(dir, ".log");
  REQUIRE(logs.size() == 1);
  CHECK(json_lines_check(logs[0]) == "ok");
}

TEST_CASE("garbage NCCL_INSPECTOR_ENABLE: one warning, disabled (the default), NCCL unaffected",
          "[reliability][hostile][env]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_ENABLE"] = "\xff";
  REQUIRE(in_child(env, [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, 5);
            void* ctx = reinterpret_cast<void*>(1);
            int mask = 0;
            if (lib.table<5>()->init(&ctx, 1, &mask, "x", 1, 2, 0, capture_logger) != abi::success || ctx) return 1;
            return warnings_containing("NCCL_INSPECTOR_ENABLE=") == 1 && warnings() == 1 ? 0 : 2;
          }) == 0);
  CHECK(files_in(dir).empty());
}

namespace {
/// Drives a communicator while the dump directory is unusable, then makes it usable: the plugin
/// warns (once), never crashes, keeps the metrics, and writes them once it can.
int unusable_then_usable(const std::string& dir, const std::function<void()>& fix) {
  sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
  set_device(1);
  void* ctx = nullptr;
  int mask = 0;
  if (lib.table<abi::newest>()->init(&ctx, 7, &mask, "keep", 1, 2, 0, capture_logger) != abi::success) return 1;
  sim::comm_driver c(lib, {.comm_hash = 8, .name = "dirtest", .n_ranks = 2});
  for (int i = 0; i < 5; ++i) one_op(c, t0 + i * 1'000'000ull);
  if (!wait_for([] { return sim::logger_warn_count().load() + warnings() >= 1; })) return 2;  // "cannot write ..."
  ::usleep(350'000);  // a few more failing exports: still one warning per distinct error
  if (sim::logger_warn_count().load() + warnings() != 1) return 3;
  fix();
  for (int i = 0; i < 2; ++i) one_op(c, t0 + 10'000'000ull);
  const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(1), "5");
  if (!wait_for([&] {
        return ::access(prom.c_str(), R_OK) == 0 &&
               sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"dirtest\""}) == 7;
      })) {
    std::fprintf(stderr, "%s: %s\n", prom.c_str(), slurp(prom).substr(0, 1500).c_str());
    return 4;
  }
  c.finalize();
  lib.table<abi::newest>()->finalize(ctx);
  return 0;
}
}  // namespace

TEST_CASE("dump directory missing: created (with parents)", "[reliability][dumpdir]") {
  const std::string dir = fresh_dir("rel") + "/a/b/c";
  auto env = base_env(dir);
  REQUIRE(in_child(env, [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            sim::comm_driver c(lib, {.comm_hash = 1, .name = "mk", .n_ranks = 2});
            one_op(c);
            return 0;
          }) == 0);
  REQUIRE(files_in(dir, ".prom").size() == 1);
  CHECK(sample(slurp(files_in(dir, ".prom")[0]), "ncclinsp_ops_total", {"comm_name=\"mk\""}) == 1);
}

/// Exit code of a child that drops to `uid`/`gid` (as node_exporter runs as its own user) and
/// reads `file`: 0 read and holds `needle`, 1 cannot open, 2 read but no needle, 3 cannot drop.
int read_as_user(const std::string& file, const std::string& needle, uid_t uid = 65534, gid_t gid = 65534) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0 || ::geteuid() != uid) ::_exit(3);
    const int fd = ::open(file.c_str(), O_RDONLY);
    if (fd < 0) ::_exit(1);
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::_exit(text.find(needle) != std::string::npos ? 0 : 2);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

TEST_CASE("umask 077: node_exporter running as another user still reads the .prom file",
          "[reliability][dumpdir][umask]") {
  // A job under umask 077 (common on shared clusters) would publish 0600 files in 0700 folders;
  // node_exporter's textfile collector runs as its own user and could not read them. The .prom
  // file is 0644 and the folders we create for it 0755 whatever the umask. The test command runs
  // as root: the reader is a child that drops to nobody (65534).
  const std::string base = fresh_dir("rel");
  REQUIRE(::chmod(base.c_str(), 0755) == 0);  // the admin's textfile folder: readable by node_exporter
  const std::string dir = base + "/textfile/job";
  auto env = base_env(dir);
  env["NCCLINSP_PROM_KEEP_FILES"] = "1";
  REQUIRE(in_child(env, [] {
            ::umask(077);
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            sim::comm_driver c(lib, {.comm_hash = 1, .name = "um", .n_ranks = 2});
            one_op(c);
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  for (const std::string& d : {base + "/textfile", dir}) {
    struct stat st {};
    REQUIRE(::stat(d.c_str(), &st) == 0);
    INFO(d);
    CHECK((st.st_mode & 07777) == 0755);
  }
  struct stat st {};
  REQUIRE(::stat(proms[0].c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(read_as_user(proms[0], "ncclinsp_ops_total{") == 0);
  // The reader really is another user: a 0600 file of ours is refused to it.
  const std::string priv = base + "/private";
  std::ofstream(priv) << "secret\n";
  REQUIRE(::chmod(priv.c_str(), 0600) == 0);
  CHECK(read_as_user(priv, "secret") == 1);
}

TEST_CASE("dump directory is a regular file, or under one: a warning, metrics kept, written once possible",
          "[reliability][dumpdir]") {
  for (const bool under : {false, true}) {
    const std::string base = fresh_dir("rel");
    const std::string file = base + "/blocker";
    std::ofstream(file) << "not a directory\n";
    const std::string dir = under ? file + "/sub" : file;
    auto env = base_env(dir);
    env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
    INFO("dir " << dir);
    CHECK(in_child(env, [&] {
            return unusable_then_usable(dir, [&] {
              ::unlink(file.c_str());
              ::mkdir(file.c_str(), 0755);
            });
          }) == 0);
    CHECK(files_in(under ? file : dir).size() >= 1);
    for (const auto& f : files_in(dir)) CHECK(f.find(".tmp.") == std::string::npos);
  }
}

namespace {
/// Mounts a tmpfs on `dir`. The test command runs as root: a failure here fails the test (a test
/// that cannot set up its disk must not pass); the reason is printed.
bool mount_tmpfs(const std::string& dir, const char* opts) {
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts) == 0) return true;
  std::fprintf(stderr, "mount tmpfs on %s failed: %s (the test command runs as root)\n", dir.c_str(),
               std::strerror(errno));
  return false;
}
}  // namespace

TEST_CASE("dump directory read-only (tmpfs remount): a warning, no crash, written after", "[reliability][dumpdir]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(mount_tmpfs(dir, "size=256k,mode=0755"));
  REQUIRE(::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256k") == 0);
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  CHECK(in_child(env, [&] {
          return unusable_then_usable(dir, [&] { ::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT, "size=256k"); });
        }) == 0);
  for (const auto& f : files_in(dir)) CHECK(f.find(".tmp.") == std::string::npos);
  ::umount2(dir.c_str(), MNT_DETACH);
}

namespace {
/// Disk full while a good file exists: the old file stays complete, no temp file is visible, one
/// warning; once space is back the next export writes the current values.
// Run with NCCLINSP_RETAIN_FINALIZED_S=0: the 200 short-lived communicators must leave the file
// once written, or it never fits the small disk again.
int disk_full_scenario(const std::string& dir, const std::function<void()>& fill, const std::function<void()>& unfill) {
  sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
  set_device(2);
  void* ctx = nullptr;
  int mask = 0;
  if (lib.table<abi::newest>()->init(&ctx, 7, &mask, "keep", 1, 2, 0, capture_logger) != abi::success) return 1;
  sim::comm_driver c(lib, {.comm_hash = 9, .name = "full", .n_ranks = 2});
  one_op(c);
  const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(2), "5");
  if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"full\""}) == 1; })) return 2;
  fill();
  for (int i = 0; i < 200; ++i) {  // many new series: the next file is larger than what is left
    sim::comm_driver more(lib, {.comm_hash = 1000u + i, .name = "more" + std::to_string(i), .n_ranks = 2});
    one_op(more);
    more.finalize();
  }
  if (!wait_for([] { return warnings_containing("cannot write") >= 1 || sim::logger_warn_count().load() >= 1; }))
    return 3;
  // A temporary file is left behind if it is still there 50 ms later (each attempt has its own
  // random name); one seen once is an export in flight, which a loaded machine can catch.
  std::vector<std::string> tmp_before;
  for (int i = 0; i < 10; ++i) {
    const std::string text = slurp(prom);
    if (!prom_well_formed(text) || sample(text, "ncclinsp_ops_total", {"comm_name=\"full\""}) != 1) return 4;
    std::vector<std::string> tmp_now;
    for (const auto& f : files_in(dir))
      if (f.find(".tmp.") != std::string::npos) {
        if (std::find(tmp_before.begin(), tmp_before.end(), f) != tmp_before.end()) return 5;
        tmp_now.push_back(f);
      }
    tmp_before = std::move(tmp_now);
    ::usleep(50'000);
  }
  unfill();
  one_op(c, t0 + 50'000'000ull);
  if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"full\""}) == 2; })) return 6;
  if (!prom_well_formed(slurp(prom))) return 7;
  c.finalize();
  lib.table<abi::newest>()->finalize(ctx);
  return 0;
}
}  // namespace

TEST_CASE("disk full (RLIMIT_FSIZE): no partial file visible, a warning, retried later", "[reliability][diskfull]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  env["NCCLINSP_RETAIN_FINALIZED_S"] = "0";
  CHECK(in_child(env, [&] {
          rlimit old{};
          ::getrlimit(RLIMIT_FSIZE, &old);
          return disk_full_scenario(
              dir,
              [&] {
                rlimit r = old;
                r.rlim_cur = 4096;
                ::setrlimit(RLIMIT_FSIZE, &r);
              },
              [&] { ::setrlimit(RLIMIT_FSIZE, &old); });
        }) == 0);
  for (const auto& f : files_in(dir)) CHECK(f.find(".tmp.") == std::string::npos);
}

TEST_CASE("disk full (small tmpfs): no partial file visible, a warning, retried later", "[reliability][diskfull]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(mount_tmpfs(dir, "size=64k"));
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  env["NCCLINSP_RETAIN_FINALIZED_S"] = "0";
  const std::string filler = dir + "/filler";
  CHECK(in_child(env, [&] {
          return disk_full_scenario(
              dir,
              [&] {
                const int fd = ::open(filler.c_str(), O_WRONLY | O_CREAT, 0644);
                const std::string chunk(512, 'f');
                while (::write(fd, chunk.data(), chunk.size()) > 0) {}
                ::close(fd);
              },
              [&] { ::unlink(filler.c_str()); });
        }) == 0);
  for (const auto& f : files_in(dir)) CHECK(f.find(".tmp.") == std::string::npos);
  ::umount2(dir.c_str(), MNT_DETACH);
}

TEST_CASE(
    "bad handles: NULL, unknown, already stopped, stopped twice before completion, events after finalize, finalize twice",
    "[reliability][hostile][handles]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(
      in_child(base_env(dir), [] {
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
        set_device(0);
        auto t = lib.table<abi::newest>();
        abi::state_args a{};
        for (void* h :
             {static_cast<void*>(nullptr), reinterpret_cast<void*>(0x1), reinterpret_cast<void*>(~std::uintptr_t{0}),
              reinterpret_cast<void*>(std::uintptr_t{0x40000123456789abull}),
              reinterpret_cast<void*>(std::uintptr_t{0x80000000000001ffull})}) {
          t->stopEvent(h);
          t->recordEventState(h, abi::st_kernel_ch_stop, &a);
          t->recordEventState(h, abi::st_kernel_ch_stop, nullptr);
          t->recordEventState(h, static_cast<abi::event_state>(-1), nullptr);
        }
        sim::comm_driver keeper(lib, {.comm_hash = 10, .name = "keeper", .n_ranks = 2});  // one exporter throughout
        sim::comm_driver c(lib, {.comm_hash = 11, .name = "h", .n_ranks = 2});
        // Already stopped (NCCL stops a Coll at enqueue), stopped again before its kernel completes:
        // the op must still complete once, not vanish.
        const auto p = c.enqueue(sim::op_desc{
            .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 2});
        t->stopEvent(p.task_handle);
        t->stopEvent(p.task_handle);
        c.complete(p, t0, t0 + 1000);
        t->stopEvent(p.task_handle);  // after completion
        // A channel handle stopped twice.
        const auto q = c.enqueue(sim::op_desc{
            .func = sim::nccl_func::all_reduce, .dtype = sim::nccl_dtype::float32, .count = 1 << 20, .n_channels = 1});
        c.complete(q, t0, t0 + 1000);
        void* ctx = c.context();
        c.finalize();
        // Events after finalize, with the dead context and the dead handles.
        abi::version<abi::newest>::descr d{};
        d.type = abi::ev_coll;
        d.coll.func = "AllReduce";
        d.coll.datatype = "ncclFloat32";
        d.coll.count = 1 << 20;
        d.coll.nChannels = 1;
        void* h = reinterpret_cast<void*>(0x77);
        t->startEvent(ctx, &h, &d);
        if (h) return 1;
        d.type = abi::ev_kernel_ch;
        d.parentObj = p.task_handle;
        t->startEvent(ctx, &h, &d);
        if (h) return 2;
        t->stopEvent(p.task_handle);
        t->recordEventState(p.task_handle, abi::st_kernel_ch_stop, &a);
        t->finalize(ctx);  // finalize twice
        t->finalize(ctx);
        t->finalize(nullptr);
        // A new communicator after all that still works.
        sim::comm_driver c2(lib, {.comm_hash = 12, .name = "h2", .n_ranks = 2});
        one_op(c2);
        return 0;
      }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  INFO(text.substr(0, 2000));
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"h\""}) == 2);
  CHECK(sample(text, "ncclinsp_inflight_ops", {"comm_name=\"h\""}) == 0);
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"h2\""}) == 1);
}

// Each cycle finalizes the last communicator, so the exporter's final export runs and is joined (a
// 100 ms bound). Under ASan that join alone took ~50 of the test's ~90 s (half the cycles reach the
// bound), close to ctest's 120 s when the suite runs two at a time: 300 cycles there prove the same.
#if defined(__SANITIZE_ADDRESS__)
constexpr int leak_cycles = 300;
#else
constexpr int leak_cycles = 1000;
#endif

TEST_CASE("1000 communicators created and destroyed: no leak (LeakSanitizer in the ASan build)",
          "[reliability][leak]") {
  const std::string dir = fresh_dir("rel");
  REQUIRE(in_child(base_env(dir, "prom,json"), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            for (int i = 0; i < leak_cycles; ++i) {
              sim::comm_driver c(lib, {.comm_hash = 100u + i, .name = "c" + std::to_string(i), .n_ranks = 2});
              if (c.init_result() != abi::success) return 1;
              one_op(c);
              if (i % 3 == 0) {  // and some with an op still in flight at finalize
                const auto p = c.enqueue(
                    sim::op_desc{.func = sim::nccl_func::all_gather, .dtype = sim::nccl_dtype::int8, .count = 1 << 20});
                c.start_only(p, t0);
              }
            }
            return 0;  // in_child runs LSan here under ASan (97 = leaks)
          }) == 0);
  CHECK(files_in(dir, ".prom").size() == 1);
}

// ---- 4. atomic files under readers -------------------------------------------------------------------

TEST_CASE("node_exporter-style readers never see a torn .prom file while it is rewritten", "[reliability][atomic]") {
  const std::string dir = fresh_dir("rel");
  ncclinsp::collector<> col;
  std::vector<ncclinsp::comm_handle> hs;
  for (int i = 0; i < 3; ++i)
    hs.push_back(col.add_comm({.name = "r" + std::to_string(i), .hash = 77u + i, .nranks = 4, .uuid = "GPU-r"}));
  std::vector<ncclinsp::any_sink> sinks;
  sinks.emplace_back(ncclinsp::prom_textfile_sink({.dir = dir}));
  ncclinsp::exporter ex(col, std::move(sinks), {.interval = 1ms});
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    std::uint64_t n = 0;
    while (!stop.load()) {
      ncclinsp::op_record op;
      op.fn = n % 3 ? ncclinsp::func::all_reduce : ncclinsp::func::all_gather;
      ncclinsp::set_size(op, std::uint64_t{1} << (10 + n % 6), ncclinsp::dtype::float32);
      op.start_ns = 1;
      op.end_ns = 1000 + n % 100000;
      col.record(hs[n % hs.size()], op);
      ++n;
    }
  });
  REQUIRE(ex.start());
  const std::string path = dir + "/" + ncclinsp::prom_file_name("GPU-r", "unknown");  // a bare collector: job "unknown"
  REQUIRE(wait_for([&] { return ::access(path.c_str(), R_OK) == 0; }));
  std::this_thread::sleep_for(20ms);
  std::set<std::string> want;
  REQUIRE(prom_well_formed(slurp(path), &want));
  REQUIRE(want.size() >= 10);
  int reads = 0, bad = 0, distinct = 0;
  std::string last;
  char buf[1 << 16];
  const auto until = std::chrono::steady_clock::now() + 60s;  // a slow (sanitized, loaded) machine gets time
  while ((reads < 2000 || distinct < 50) && std::chrono::steady_clock::now() < until) {
    // As node_exporter: open, read the whole file, close, parse every line.
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      ++bad;
      continue;
    }
    std::string text;
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    std::set<std::string> fams;
    if (!prom_well_formed(text, &fams) || fams != want) ++bad;
    if (text != last) ++distinct;
    last.swap(text);
    ++reads;
  }
  stop = true;
  producer.join();
  ex.stop();
  INFO(reads << " reads, " << distinct << " distinct versions");
  CHECK(bad == 0);
  CHECK(reads >= 2000);
  CHECK(distinct >= 50);  // it really was rewritten underneath the readers
  for (const auto& f : files_in(dir)) CHECK(f.find(".tmp.") == std::string::npos);
}

// ---- 5. no silent loss -------------------------------------------------------------------------------

namespace {
struct json_tally {
  std::map<std::string, std::uint64_t> records;  // per comm name
  std::map<std::string, std::uint64_t> dropped;  // last dump_stats dropped_total per comm name
  std::map<std::string, std::uint64_t> completed;
  bool any_final = false;
};
/// The text after `"key":` up to the next `,`, `"` or `}` (numbers; strings without quotes).
std::string json_field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const auto p = line.find(k);
  if (p == std::string::npos) return {};
  auto b = p + k.size();
  if (b < line.size() && line[b] == '"') ++b;
  return line.substr(b, line.find_first_of(",\"}", b) - b);
}
json_tally tally_json(const std::string& file) {
  json_tally t;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const std::string name = json_field(line, "comm_name");
    if (name.empty()) continue;
    if (line.find("\"dump_stats\"") != std::string::npos) {
      t.dropped[name] = std::stoull(json_field(line, "dropped_total"));
      t.completed[name] = std::stoull(json_field(line, "completed_total"));
      t.any_final = t.any_final || line.find("\"final\":true") != std::string::npos;
    } else if (line.find("_perf\"") != std::string::npos) {
      ++t.records[name];
    }
  }
  return t;
}
}  // namespace

TEST_CASE("JSON mode: N ops in = records out + dropped_total, with a tiny ring under load and at teardown",
          "[reliability][loss]") {
  for (const char* ring : {"8", "1024"}) {
    const std::string dir = fresh_dir("rel");
    auto env = base_env(dir, "json");
    env["NCCL_INSPECTOR_DUMP_COLL_RING_SIZE"] = ring;
    env["NCCL_INSPECTOR_DUMP_P2P_RING_SIZE"] = ring;
    env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
    constexpr int n_threads = 4, per_thread = 3000;
    INFO("ring " << ring);
    REQUIRE(in_child(env, [] {
              sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
              set_device(0);
              std::vector<std::thread> ts;
              for (int k = 0; k < n_threads; ++k)
                ts.emplace_back([&lib, k] {
                  sim::comm_driver c(lib, {.comm_hash = 500u + k, .name = "loss" + std::to_string(k), .n_ranks = 2});
                  for (int i = 0; i < per_thread; ++i) {
                    one_op(c, t0 + i * 1000ull);
                    if (i % 1000 == 999) ::usleep(120'000);  // some exports in between
                  }
                  c.finalize();  // the rest at teardown
                });
              for (auto& t : ts) t.join();
              // Teardown returned within its bound; the final export may still be running in the
              // background (detached): the process lives on, so it lands.
              const std::string dir = std::getenv("NCCL_INSPECTOR_DUMP_DIR");
              wait_for(
                  [&] {
                    const auto logs = files_in(dir, ".log");
                    return !logs.empty() && slurp(logs[0]).find("\"final\":true") != std::string::npos;
                  },
                  20s);
              ::usleep(100'000);
              return 0;
            }) == 0);
    const auto logs = files_in(dir, ".log");
    REQUIRE(logs.size() == 1);
    REQUIRE(json_lines_check(logs[0]) == "ok");
    const auto t = tally_json(logs[0]);
    CHECK(t.any_final);
    for (int k = 0; k < n_threads; ++k) {
      const std::string name = "loss" + std::to_string(k);
      INFO(name << ": records " << t.records.at(name) << " dropped " << t.dropped.at(name));
      CHECK(t.records.at(name) + t.dropped.at(name) == per_thread);
      CHECK(t.completed.at(name) == per_thread);
      if (std::string(ring) == "1024") CHECK(t.dropped.at(name) == 0);
    }
  }
}

TEST_CASE("plugin under concurrency: user threads enqueue, proxy threads complete, exporter writes, exact totals",
          "[reliability][threads]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir, "prom,json");
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  env["NCCL_INSPECTOR_DUMP_VERBOSE"] = "1";  // per-op callback traces: written from both threads
  constexpr int n_comms = 3, per_comm = 2000;
  REQUIRE(in_child(env, [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            std::vector<std::thread> ts;
            for (int k = 0; k < n_comms; ++k)
              ts.emplace_back([&lib, k] {
                sim::comm_driver c(lib, {.comm_hash = 900u + k, .name = "mt" + std::to_string(k), .n_ranks = 4});
                std::mutex mu;
                std::condition_variable cv;
                std::deque<sim::pending_op> q;
                bool done = false;
                std::thread proxy([&] {  // NCCL's proxy/profiler thread: kernel completion
                  for (;;) {
                    std::unique_lock lk(mu);
                    cv.wait(lk, [&] { return done || !q.empty(); });
                    if (q.empty()) return;
                    const auto p = q.front();
                    q.pop_front();
                    lk.unlock();
                    const sim::kernel_time ch[2] = {{t0, t0 + 50'000}, {t0 + 10, t0 + 60'000}};
                    c.complete(p, ch);
                  }
                });
                for (int i = 0; i < per_comm; ++i) {  // the user thread: enqueue
                  const auto p = c.enqueue(
                      sim::op_desc{.func = i % 2 ? sim::nccl_func::all_reduce : sim::nccl_func::reduce_scatter,
                                   .dtype = sim::nccl_dtype::float32,
                                   .count = 1 << 20,
                                   .n_channels = 2});
                  std::lock_guard lk(mu);
                  q.push_back(p);
                  cv.notify_one();
                  if (q.size() > 200) std::this_thread::yield();  // pools hold 256
                }
                {
                  std::lock_guard lk(mu);
                  done = true;
                  cv.notify_one();
                }
                proxy.join();
                c.finalize();
              });
            for (auto& t : ts) t.join();
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  const std::string text = slurp(proms[0]);
  // Every op is counted once: completed (per communicator) or dropped because the in-flight pool
  // was full (the user thread may run far ahead of the proxy thread; that counter is per process).
  double completed = 0;
  for (int k = 0; k < n_comms; ++k) {
    const std::string name = "comm_name=\"mt" + std::to_string(k) + "\"";
    const double ar = sample(text, "ncclinsp_ops_total", {name, "collective=\"AllReduce\""});
    const double rs = sample(text, "ncclinsp_ops_total", {name, "collective=\"ReduceScatter\""});
    INFO(name << " AllReduce " << ar << " ReduceScatter " << rs);
    CHECK(sample(text, "ncclinsp_inflight_ops", {name}) == 0);
    CHECK(ar + rs > 0);
    completed += ar + rs;
  }
  const double dropped = sample(text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""});
  INFO("completed " << completed << " pool drops " << dropped);
  CHECK(completed + dropped == n_comms * per_comm);
  const auto logs = files_in(dir, ".log");
  REQUIRE(logs.size() == 1);
  CHECK(json_lines_check(logs[0]) == "ok");
}

namespace {
/// CLOCK_MONOTONIC in ns (system-wide: comparable between a parent and its child).
std::uint64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

/// Forks a child that writes 40 ops through the JSON sink into a FIFO nobody reads (the final
/// export blocks in open() like a hung filesystem), finalizes, writes "<finalize ms> <mono ns>" to
/// `<dir>/finalized` and leaves through exit(). Returns the child's pid.
pid_t fork_hung_sink_child(const std::string& dir, const std::string& host,
                           const std::map<std::string, std::string>& extra_env, int n_ops) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  auto env = base_env(dir, "json");
  for (const auto& [k, v] : extra_env) env[k] = v;
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  const std::string fifo = dir + "/" + host + "-pid" + std::to_string(::getpid()) + ".log";
  if (::mkfifo(fifo.c_str(), 0644) != 0) ::_exit(1);
  sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
  set_device(0);
  sim::comm_driver c(lib, {.comm_hash = 77, .name = "hung", .n_ranks = 2});
  for (int i = 0; i < n_ops; ++i) one_op(c, t0 + i * 1'000'000ull);
  const auto begin = std::chrono::steady_clock::now();
  c.finalize();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begin).count();
  std::ofstream(dir + "/finalized") << ms << " " << mono_ns() << "\n";
  std::fflush(nullptr);
  std::exit(0);  // runs the plugin's exit handler
}

std::string hostname() {
  char host[256] = "unknown";
  ::gethostname(host, sizeof host - 1);
  return host;
}
}  // namespace

TEST_CASE("a hung sink at teardown: finalize returns within its bound, and at exit() the final records still land",
          "[reliability][teardown]") {
  // The sink stays stuck until finalize has returned (and longer): a finalize that waited for it
  // would never return, and the parent would time out. Bound: 100 ms promised, 200 ms asserted
  // (slack for a loaded 2-core machine). exit() then waits (bounded) for the export, which lands
  // once a reader appears. The default configuration exports only at teardown, so this final
  // export is all the data there is.
  const std::string dir = fresh_dir("rel");
  constexpr int n_ops = 40;
  const pid_t pid = fork_hung_sink_child(dir, hostname(), {}, n_ops);
  const std::string fifo = dir + "/" + hostname() + "-pid" + std::to_string(pid) + ".log";
  const bool returned = wait_for([&] { return slurp(dir + "/finalized").find('\n') != std::string::npos; }, 5s);
  std::this_thread::sleep_for(300ms);  // stuck well past the bound
  // Now a reader appears (also when finalize never returned, so the child is not left blocked).
  const int fd = ::open(fifo.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  int st = 0;
  ::waitpid(pid, &st, 0);
  REQUIRE(returned);  // finalize returned while the sink was still stuck
  const long finalize_ms = std::stol(slurp(dir + "/finalized"));
  INFO("finalize took " << finalize_ms << " ms with the sink stuck");
  CHECK(finalize_ms <= 200);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  const std::string copy = dir + "/copy.log";
  std::ofstream(copy, std::ios::binary) << text;
  CHECK(json_lines_check(copy) == "ok");
  std::size_t records = 0;
  for (std::size_t p = 0; (p = text.find("\"coll_perf\"", p)) != std::string::npos; ++p) ++records;
  CHECK(records == n_ops);
}

TEST_CASE("a sink that never recovers: finalize within its bound, process exit within NCCLINSP_EXIT_FLUSH_MS",
          "[reliability][teardown]") {
  // Nobody ever opens the FIFO: the final export never finishes. exit() waits for it exactly
  // NCCLINSP_EXIT_FLUSH_MS (here 300 ms), then the process ends anyway.
  const std::string dir = fresh_dir("rel");
  constexpr long flush_ms = 300;
  const pid_t pid = fork_hung_sink_child(dir, hostname(), {{"NCCLINSP_EXIT_FLUSH_MS", std::to_string(flush_ms)}}, 10);
  int st = 0;
  pid_t done = 0;
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while ((done = ::waitpid(pid, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(5ms);
  const std::uint64_t exited = mono_ns();
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
  }
  REQUIRE(done == pid);  // the process ended on its own
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  std::istringstream in(slurp(dir + "/finalized"));
  long finalize_ms = -1;
  std::uint64_t at = 0;
  in >> finalize_ms >> at;
  REQUIRE(at != 0);
  const double exit_ms = static_cast<double>(exited - at) * 1e-6;
  INFO("finalize " << finalize_ms << " ms, exit() " << exit_ms << " ms");
  CHECK(finalize_ms <= 200);
  CHECK(exit_ms >= flush_ms - 10);   // it did give the export its chance
  CHECK(exit_ms <= flush_ms + 500);  // and not much more (slack: a loaded 2-core machine, 5 ms polling)
}

// ---- 7. finalize racing NCCL's threads ------------------------------------------------------------------

namespace {
/// Raw calls through the newest table (abi::newest) for one communicator, as NCCL's threads make them
/// (no driver state shared between the threads, so only the plugin's own synchronization is exercised).
struct raw_comm {
  const abi::version<abi::newest>::table* t;
  void* ctx = nullptr;
  static constexpr int channels = 2;

  void* start_coll(std::uint64_t seq) const {
    abi::version<abi::newest>::descr d{};
    d.type = abi::ev_coll;
    d.coll.seqNumber = seq;
    d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32";
    d.coll.count = 1 << 20;
    d.coll.nChannels = channels;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    void* h = nullptr;
    t->startEvent(ctx, &h, &d);
    return h;
  }
  /// The proxy side of one op: ProxyOps and every KernelCh start, stop state and stop.
  void kernel(void* parent, std::uint64_t at) const {
    for (std::uint8_t ch = 0; ch < channels; ++ch) {
      abi::version<abi::newest>::descr d{};
      d.type = abi::ev_proxy_op;
      d.parentObj = parent;
      d.proxyOp.pid = ::getpid();
      d.proxyOp.channelId = ch;
      void* ph = nullptr;
      t->startEvent(ctx, &ph, &d);
      t->stopEvent(ph);
      d = {};
      d.type = abi::ev_kernel_ch;
      d.parentObj = parent;
      d.kernelCh.channelId = ch;
      d.kernelCh.pTimer = at;
      void* kh = nullptr;
      t->startEvent(ctx, &kh, &d);
      abi::state_args a{};
      a.kernelCh.pTimer = at + 40'000 + ch;
      t->recordEventState(kh, abi::st_kernel_ch_stop, &a);
      t->stopEvent(kh);
    }
  }
};
}  // namespace

TEST_CASE("finalize racing NCCL's threads: events during and after finalize, kernels completing before their Coll stop",
          "[reliability][threads][teardown]") {
  // finalize frees a communicator's state while NCCL's proxy thread (or, since 2.31, the
  // communicator's profiler thread) may still deliver KernelCh/ProxyOp events for its ops. Every op
  // must end up completed or abandoned, exactly once, and nothing may touch freed state (this test
  // runs under ThreadSanitizer in the test command, where such an access is reported).
  const std::string dir = fresh_dir("rel");
  constexpr int rounds = 24, per_round = 64, in_order = 600;
  REQUIRE(in_child(base_env(dir), [] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            const auto* t = lib.table<abi::newest>();
            int mask = 0;
            raw_comm keeper{t};
            if (t->init(&keeper.ctx, 1, &mask, "keeper", 1, 2, 0, capture_logger) != abi::success) return 1;
            // Kernels that complete before their Coll stop, more of them than the pool holds: each
            // releases its slot exactly once, at whichever of the two comes last.
            raw_comm early{t};
            if (t->init(&early.ctx, 2, &mask, "kernel_first", 1, 2, 0, capture_logger) != abi::success) return 2;
            for (int i = 0; i < in_order; ++i) {
              void* h = early.start_coll(i + 1);
              if (!h) return 3;
              std::thread proxy([&] { early.kernel(h, t0 + i * 100'000ull); });
              proxy.join();
              t->stopEvent(h);
              t->stopEvent(h);  // and a second stop after completion: ignored
            }
            t->finalize(early.ctx);
            for (int r = 0; r < rounds; ++r) {
              raw_comm c{t};
              const std::string name = "race" + std::to_string(r);
              if (t->init(&c.ctx, 100u + r, &mask, name.c_str(), 2, 4, 0, capture_logger) != abi::success) return 4;
              std::vector<void*> ops;
              for (int i = 0; i < per_round; ++i) {
                ops.push_back(c.start_coll(i + 1));
                if (!ops.back()) return 5;
                if (i % 2 == 0) t->stopEvent(ops.back());  // odd ops: Coll stop only after the kernel (or never)
              }
              std::atomic<int> progressed{0};
              std::atomic<bool> finalized{false};
              std::thread proxy([&] {  // completes the ops, then keeps delivering events on their handles
                int after = 0;
                for (int pass = 0; after < 3; ++pass) {
                  for (int i = 0; i < per_round; ++i) {
                    c.kernel(ops[i], t0 + (pass * per_round + i) * 100'000ull);
                    if (pass == 0) progressed.store(i + 1, std::memory_order_release);
                  }
                  if (finalized.load(std::memory_order_acquire)) ++after;
                }
              });
              while (progressed.load(std::memory_order_acquire) < per_round / 2) std::this_thread::yield();
              for (int i = 1; i < per_round / 2; i += 2) t->stopEvent(ops[i]);  // Coll stops racing the kernels
              t->finalize(c.ctx);                                               // half the ops may still be in flight
              finalized.store(true, std::memory_order_release);
              for (int i = per_round / 2 + 1; i < per_round; i += 2) t->stopEvent(ops[i]);  // late Coll stops: ignored
              proxy.join();
            }
            t->finalize(keeper.ctx);
            return 0;
          }) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 1);
  const std::string text = slurp(proms[0]);
  INFO(text.substr(0, 3000));
  CHECK(sample(text, "ncclinsp_ops_total", {"comm_name=\"kernel_first\""}) == in_order);
  CHECK(sample(text, "ncclinsp_inflight_ops", {"comm_name=\"kernel_first\""}) == 0);
  const double pool_full = sample(text, "ncclinsp_dropped_events_total", {"reason=\"op_pool_full\""});
  CHECK((std::isnan(pool_full) || pool_full == 0));  // every slot came back
  for (int r = 0; r < rounds; ++r) {
    const std::string name = "comm_name=\"race" + std::to_string(r) + "\"";
    const double done = sample(text, "ncclinsp_ops_total", {name});
    const double abandoned = sample(text, "ncclinsp_abandoned_ops_total", {name});
    INFO(name << ": completed " << done << ", abandoned " << abandoned);
    CHECK(done >= per_round / 2);
    CHECK(done + abandoned == per_round);  // exactly once each: not both, not neither
    CHECK(sample(text, "ncclinsp_inflight_ops", {name}) == 0);
  }
}

// ---- 8. fork, re-init, two processes ---------------------------------------------------------------------

TEST_CASE("fork() after init: the child runs without ncclinsp, exits at once and leaves the parent's files alone",
          "[reliability][fork]") {
  // A data-loader worker or a launcher forks a process that has NCCL communicators. The child has
  // only the forking thread: the exporter thread is gone and the plugin's locks may be copied
  // held. It must not wait for that exporter (at finalize or at exit) nor write the parent's files.
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  env["NCCLINSP_PROM_KEEP_FILES"] = "0";  // a child that shut the sink down would delete the file
  REQUIRE(in_child(env, [&dir] {
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            sim::comm_driver c(lib, {.comm_hash = 31, .name = "parent", .n_ranks = 2});
            one_op(c);
            const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");
            if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"parent\""}) == 1; }))
              return 1;
            const std::uint64_t before = mono_ns();
            std::fflush(nullptr);
            const pid_t pid = ::fork();
            if (pid == 0) {
              // The child: a new communicator runs without ncclinsp; the inherited one's finalize
              // returns at once; exit() does not wait for the parent's exporter.
              sim::comm_driver other(lib, {.comm_hash = 32, .name = "child", .n_ranks = 2});
              if (other.init_result() != abi::success || other.context()) ::_exit(2);
              one_op(other);
              lib.table<abi::newest>()->finalize(c.context());
              std::exit(0);
            }
            int st = 0;
            ::waitpid(pid, &st, 0);
            const double child_ms = static_cast<double>(mono_ns() - before) * 1e-6;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 3;
            if (child_ms > 500) {
              std::fprintf(stderr, "the forked child took %.0f ms to finish\n", child_ms);
              return 4;
            }
            // The parent goes on: its file is still there and gets the next op.
            one_op(c, t0 + 1'000'000);
            if (!wait_for([&] { return sample(slurp(prom), "ncclinsp_ops_total", {"comm_name=\"parent\""}) == 2; }))
              return 5;
            if (slurp(prom).find("comm_name=\"child\"") != std::string::npos) return 6;
            return 0;
          }) == 0);
  CHECK(files_in(dir, ".prom").empty());  // KEEP_FILES=0: the parent removed it at its own teardown
}

TEST_CASE("two processes on one GPU: each keeps a .prom file of its own, neither hides the other",
          "[reliability][twoproc]") {
  // Two processes on the same GPU (MPS, two jobs on one node) name their file after the same
  // UUID. Sharing it, each export would replace the other process's series. The first keeps the
  // name, the second writes `..._<uuid>.job-<key>.pid<pid>.prom` (node_exporter reads every *.prom).
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  const auto spawn = [&](const std::string& me, const std::string& other) {
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int rc = 0;
    {
      sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
      set_device(0);
      sim::comm_driver c(lib, {.comm_hash = std::hash<std::string>{}(me), .name = me, .n_ranks = 2});
      one_op(c);
      std::ofstream(dir + "/" + me + ".ready") << "1\n";
      if (!wait_for([&] { return ::access((dir + "/" + other + ".ready").c_str(), F_OK) == 0; }, 10s)) rc = 1;
      for (int i = 0; i < 5; ++i) {  // both alive, both exporting every 100 ms
        one_op(c, t0 + (i + 1) * 1'000'000ull);
        ::usleep(60'000);
      }
      std::ofstream(dir + "/" + me + ".done") << "1\n";
      if (!wait_for([&] { return ::access((dir + "/" + other + ".done").c_str(), F_OK) == 0; }, 10s)) rc = 2;
    }
    std::fflush(nullptr);
    std::exit(rc);
  };
  const pid_t a = spawn("procA", "procB"), b = spawn("procB", "procA");
  int sa = 0, sb = 0;
  ::waitpid(a, &sa, 0);
  ::waitpid(b, &sb, 0);
  REQUIRE(WIFEXITED(sa));
  REQUIRE(WIFEXITED(sb));
  CHECK(WEXITSTATUS(sa) == 0);
  CHECK(WEXITSTATUS(sb) == 0);
  const auto proms = files_in(dir, ".prom");
  REQUIRE(proms.size() == 2);
  const std::string shared_name = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");  // one job: SLURM_JOB_ID 5
  CHECK(std::count(proms.begin(), proms.end(), shared_name) == 1);
  int seen_a = 0, seen_b = 0;
  for (const auto& f : proms) {
    const std::string text = slurp(f);
    INFO(f << "\n" << text.substr(0, 1500));
    CHECK(prom_well_formed(text));
    const double na = sample(text, "ncclinsp_ops_total", {"comm_name=\"procA\""});
    const double nb = sample(text, "ncclinsp_ops_total", {"comm_name=\"procB\""});
    CHECK(std::isnan(na) != std::isnan(nb));  // each file holds exactly one process's series
    seen_a += na == 6;
    seen_b += nb == 6;
  }
  CHECK(seen_a == 1);
  CHECK(seen_b == 1);
}

TEST_CASE("re-init while the old exporter is still writing, after dlclose and dlopen: both exports land, no torn file",
          "[reliability][reinit]") {
  // The last communicator is destroyed while the final export is stuck (the JSON file is a FIFO
  // nobody reads yet), NCCL unloads the plugin (dlclose) and loads it again for a new
  // communicator. The new exporter must run beside the old one; readers of the .prom file see
  // complete files throughout; once the FIFO is read both exports complete; counters continue.
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir, "prom,json");
  env["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] = "100000";
  REQUIRE(in_child(env, [&dir] {
            const std::string fifo = dir + "/" + hostname() + "-pid" + std::to_string(::getpid()) + ".log";
            if (::mkfifo(fifo.c_str(), 0644) != 0) return 1;
            const std::string prom = dir + "/" + ncclinsp::prom_file_name(uuid_of(0), "5");
            std::atomic<bool> stop{false};
            std::atomic<int> reads{0}, torn{0};
            std::thread reader([&] {  // node_exporter
              while (!stop.load()) {
                const std::string text = slurp(prom);
                if (!text.empty()) {
                  ++reads;
                  if (!prom_well_formed(text)) ++torn;
                }
              }
            });
            sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
            set_device(0);
            {
              sim::comm_driver a(lib, {.comm_hash = 41, .name = "before", .n_ranks = 2});
              for (int i = 0; i < 20; ++i) one_op(a, t0 + i * 1'000'000ull);
              const auto begin = std::chrono::steady_clock::now();
              a.finalize();  // the final export blocks on the FIFO: left running
              if (std::chrono::steady_clock::now() - begin > 250ms) return 2;
            }
            lib.close();  // dlclose, dlopen, a new communicator: a new exporter beside the stuck one
            if (!lib.open(NCCLINSP_PLUGIN_SO, abi::newest)) return 3;
            sim::comm_driver b(lib, {.comm_hash = 42, .name = "after", .n_ranks = 2});
            if (b.init_result() != abi::success || !b.context()) return 4;
            for (int i = 0; i < 7; ++i) one_op(b, t0 + i * 1'000'000ull);
            std::mutex json_mu;
            std::string json;
            std::atomic<bool> drained{false};
            std::thread drain([&] {  // the stuck filesystem recovers: every writer's open succeeds from now on
              while (!drained.load()) {
                const int fd = ::open(fifo.c_str(), O_RDONLY);
                char buf[4096];
                for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
                  std::lock_guard lk(json_mu);
                  json.append(buf, static_cast<std::size_t>(n));
                }
                ::close(fd);
              }
            });
            const auto records_of = [&](const char* name) {
              std::lock_guard lk(json_mu);
              std::size_t n = 0;
              for (std::size_t p = 0;
                   (p = json.find(std::string("\"comm_name\":\"") + name + "\"", p)) != std::string::npos; ++p)
                ++n;
              return n;
            };
            const bool both = wait_for([&] {
              const std::string text = slurp(prom);
              return sample(text, "ncclinsp_ops_total", {"comm_name=\"before\""}) == 20 &&
                     sample(text, "ncclinsp_ops_total", {"comm_name=\"after\""}) == 7;
            });
            b.finalize();
            // The old exporter's final export (before) and the new one's (after) reach the file.
            const bool landed = wait_for([&] { return records_of("before") >= 20 && records_of("after") >= 7; }, 10s);
            wait_for([&] { return reads.load() >= 10; });  // a slow reader (ASan, busy machine) still gets its 10 reads
            stop = true;
            reader.join();
            drained = true;
            for (int i = 0; i < 100; ++i) {  // unblock the drain's open(): be its writer once
              const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
              if (w >= 0) ::close(w);
              ::usleep(10'000);
              if (w >= 0) break;
            }
            drain.join();
            if (!landed) {
              std::fprintf(stderr, "JSON: %zu records of before, %zu of after\n", records_of("before"),
                           records_of("after"));
              return 7;
            }
            if (!both) return 5;
            if (torn.load() != 0 || reads.load() < 10) {
              std::fprintf(stderr, "%d torn of %d reads\n", torn.load(), reads.load());
              return 6;
            }
            return 0;
          }) == 0);
}

TEST_CASE("4096 live communicators: the next one runs without ncclinsp and is counted as comm_table_full",
          "[reliability][limits]") {
  const std::string dir = fresh_dir("rel");
  auto env = base_env(dir);
  env["NCCL_INSPECTOR_COLL_POOL_SIZE"] = "10";  // small pools: 4096 communicators in little memory
  env["NCCL_INSPECTOR_ENABLE_P2P"] = "0";
  constexpr int limit = 4096;
  REQUIRE(
      in_child(env, [] {
        sim::plugin_library lib(NCCLINSP_PLUGIN_SO, abi::newest);
        set_device(0);
        const auto* t = lib.table<abi::newest>();
        std::vector<void*> ctx(limit + 1, nullptr);
        int mask = 0;
        for (int i = 0; i < limit; ++i) {
          std::string name = "c";  // not "c" + std::to_string(i): GCC 12 -O3 reports a false -Wrestrict in operator+
          name += std::to_string(i);
          if (t->init(&ctx[i], 1000u + i, &mask, name.c_str(), 1, 2, 0, capture_logger) != abi::success || !ctx[i]) {
            std::fprintf(stderr, "communicator %d refused\n", i);
            return 1;
          }
        }
        // One more while all 4096 are live: success without a context (an error would make NCCL
        // 2.30.3+ unload the library under the 4096 others), one warning, and the drop counted.
        if (t->init(&ctx[limit], 99, &mask, "one_too_many", 1, 2, 0, capture_logger) != abi::success || ctx[limit])
          return 2;
        if (warnings_containing("communicator table full") != 1) return 3;
        // A finalized communicator's slot is taken over by the next one (the longest-retired).
        t->finalize(ctx[7]);
        void* again = nullptr;
        if (t->init(&again, 98, &mask, "after_one_left", 1, 2, 0, capture_logger) != abi::success || !again) return 4;
        for (int i = 0; i < limit; ++i)
          if (i != 7) t->finalize(ctx[i]);
        t->finalize(again);
        return 0;
      }) == 0);
  const std::string text = slurp(files_in(dir, ".prom").at(0));
  CHECK(sample(text, "ncclinsp_dropped_events_total", {"reason=\"comm_table_full\""}) == 1);
  CHECK(text.find("comm_name=\"one_too_many\"") == std::string::npos);
  CHECK(text.find("comm_name=\"after_one_left\"") != std::string::npos);
}
