// Reliability: hostile input through the loaded plugin, no torn files under concurrent readers, no
// silent loss. The plugin keeps process-wide state configured from the environment at its first init,
// so every plugin scenario runs in a forked child (which dlopens the plugin); the parent checks the
// files. Under ASan each child runs LeakSanitizer itself before it exits.
// This file: the dump directory (missing, unreadable, a file, read-only), disk full, and atomic
// replacement under readers.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ncclinsp/collector.hpp"
#include "ncclinsp/exporter.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "reliability_harness.hpp"

namespace sim = ncclinsp::sim;
namespace abi = ncclinsp::abi;
using namespace ncclinsp_test;
using namespace ncclinsp_test::reliability;
using namespace std::chrono_literals;

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

// ---- atomic files under readers -------------------------------------------------------------------

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
