#include <catch2/catch.hpp>

#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <atomic>
#include <thread>
#include <vector>

#include "format_fixture.hpp"
#include "ncclinsp/sinks/callback_sink.hpp"
#include "ncclinsp/sinks/json_sink.hpp"
#include "ncclinsp/sinks/prom_textfile_sink.hpp"
#include "ncclinsp/sinks/trace_sink.hpp"

using namespace ncclinsp;

namespace {
std::string scratch_dir(const std::string& tag) {
  char tmpl[] = "/tmp/ncclinsp_sinkXXXXXX";
  const std::string d = ::mkdtemp(tmpl);
  return d + "/" + tag;
}
std::vector<std::string> list_dir(const std::string& d) {
  std::vector<std::string> out;
  if (DIR* dir = ::opendir(d.c_str())) {
    while (auto* e = ::readdir(dir))
      if (e->d_name[0] != '.' || std::string(e->d_name).find(".tmp") != std::string::npos)
        if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    ::closedir(dir);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

/// A file outside `dir` that a hostile user wants us to overwrite; symlinks to it are planted at
/// the names we write.
struct victim {
  std::string path;
  std::string content = "precious: not ours to touch\n";
  victim() : path(scratch_dir("victim")) { std::ofstream(path) << content; }
  bool untouched() const { return fixture::slurp(path) == content; }
  void plant(const std::string& at) const { REQUIRE(::symlink(path.c_str(), at.c_str()) == 0); }
};
/// A .prom file's metrics: its text after the owner line (checked to be there and ours).
std::string metrics_of(const std::string& text) {
  detail::owner_stamp o;
  REQUIRE(detail::parse_owner_line(text, o));
  CHECK(o.pid == ::getpid());
  CHECK(o.uid == static_cast<long>(::geteuid()));
  return text.substr(text.find('\n') + 1);
}
bool is_symlink(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}
bool is_regular(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

TEST_CASE("prom_textfile_sink writes one file per GPU, creating the directory", "[sink][prom]") {
  const auto dir = scratch_dir("a/b/prom");
  std::vector<std::string> logs;
  prom_textfile_sink sink({.dir = dir, .log = [&](log_level, std::string_view m) { logs.emplace_back(m); }});
  const auto snap = fixture::make_snapshot();
  CHECK(sink.write(snap) == export_result::success);
  const auto files = list_dir(dir);
  REQUIRE(files.size() == 2);
  CHECK(files[0] == "nccl_inspector_metrics_GPU-11111111-2222-3333-4444-555555555555.job-4242.prom");
  std::string want;
  format::write_prometheus(want, snap, "GPU-11111111-2222-3333-4444-555555555555");
  CHECK(metrics_of(fixture::slurp(dir + "/" + files[0])) == want);
  CHECK(logs.empty());
}

TEST_CASE("prom_textfile_sink: a path that is a regular file warns once and recovers", "[sink][prom][faults]") {
  const auto dir = scratch_dir("blocked");
  std::ofstream(dir) << "not a directory";
  std::vector<std::string> logs;
  prom_textfile_sink sink({.dir = dir, .log = [&](log_level, std::string_view m) { logs.emplace_back(m); }});
  const auto snap = fixture::make_snapshot();
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(sink.write(snap) == export_result::failure);
  REQUIRE(logs.size() == 1);  // one warning per distinct error, not one per export
  CHECK(logs[0].find("Not a directory") != std::string::npos);
  ::unlink(dir.c_str());
  CHECK(sink.write(snap) == export_result::success);
  CHECK(list_dir(dir).size() == 2);
}

TEST_CASE(
    "Two writers of one file in one process (an old exporter and a re-initialized one) never share a temporary file",
    "[sink][prom][atomic]") {
  // After dlclose/dlopen a new exporter runs beside the old one, in the same process, writing the
  // same .prom name. Sharing a temporary name (pid only), one would truncate or rename the other's
  // half-written file: a torn file published, or a failed rename. Each writer's payload is one
  // repeated letter with its length at the end, so a reader can tell a whole file from a mix.
  const auto dir = scratch_dir("twowriters");
  const std::size_t size = 256 << 10;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, torn{0}, reads{0};
  std::vector<std::thread> writers;
  for (char letter : {'a', 'b', 'c', 'd'})
    writers.emplace_back([&, letter] {
      const std::string body = std::string(size, letter) + "\n" + std::to_string(size) + "\n";
      for (int i = 0; i < 150; ++i) failures += detail::write_file_atomic(dir, "m.prom", body) != 0;
    });
  std::thread reader([&] {
    while (!stop.load()) {
      const std::string t = fixture::slurp(dir + "/m.prom");
      if (t.empty()) continue;
      ++reads;
      const std::string tail = "\n" + std::to_string(size) + "\n";
      const bool whole = t.size() == size + tail.size() && t.compare(size, tail.size(), tail) == 0 &&
                         t.find_first_not_of(t[0]) == size;
      torn += !whole;
    }
  });
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  CHECK(failures.load() == 0);
  CHECK(torn.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(list_dir(dir).size() == 1);  // no temporary file left behind
}

TEST_CASE("prom_textfile_sink: a full disk leaves the previous file intact and no temp file", "[sink][prom][faults]") {
  const auto dir = scratch_dir("full");
  const auto snap = fixture::make_snapshot();
  prom_textfile_sink({.dir = dir}).write(snap);
  const std::string file = dir + "/" + list_dir(dir)[0];
  const std::string before = fixture::slurp(file);
  // RLIMIT_FSIZE in a child process: writes past 512 bytes fail with EFBIG (SIGXFSZ is ignored).
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct rlimit rl {
      512, 512
    };
    ::setrlimit(RLIMIT_FSIZE, &rl);
    int warnings = 0;
    prom_textfile_sink sink({.dir = dir, .log = [&](log_level, std::string_view) { ++warnings; }});
    const bool failed = sink.write(snap) == export_result::failure;
    ::_exit(failed && warnings == 1 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fixture::slurp(file) == before);
  for (const auto& f : list_dir(dir)) CHECK(f.find(".tmp") == std::string::npos);
}

TEST_CASE("prom_textfile_sink removes its files at shutdown only when asked", "[sink][prom]") {
  const auto dir = scratch_dir("rm");
  const auto snap = fixture::make_snapshot();
  prom_textfile_sink keep({.dir = dir});
  keep.write(snap);
  keep.shutdown();
  CHECK(list_dir(dir).size() == 2);
  prom_textfile_sink rm({.dir = dir, .remove_on_shutdown = true});
  rm.write(snap);
  rm.shutdown();
  CHECK(list_dir(dir).empty());
}

TEST_CASE("json_sink appends every record and a dump_stats line per communicator", "[sink][json]") {
  const auto dir = scratch_dir("json");
  const auto snap = fixture::make_snapshot();
  {
    json_sink sink({.dir = dir, .file_name = "ranks.log"});
    CHECK(sink.write(snap) == export_result::success);
  }
  {
    json_sink again({.dir = dir, .file_name = "ranks.log"});  // re-init must not truncate (Inspector does)
    CHECK(again.write(snap) == export_result::success);
  }
  const std::string text = fixture::slurp(dir + "/ranks.log");
  const std::size_t per_write = snap.records.size() + snap.comms.size();
  CHECK(count_lines(text) == 2 * per_write);
  std::size_t records = 0, pos = 0;
  while ((pos = text.find("_perf\":{", pos)) != std::string::npos) ++records, ++pos;
  CHECK(records == 2 * snap.records.size());
}

TEST_CASE("json_sink keeps lines in memory while the directory is unusable, then writes them", "[sink][json][faults]") {
  const auto dir = scratch_dir("jfault");
  std::ofstream(dir) << "file in the way";
  int warnings = 0;
  json_sink sink({.dir = dir, .file_name = "x.log", .log = [&](log_level l, std::string_view) {
                    warnings += l == log_level::warn;
                  }});
  const auto snap = fixture::make_snapshot();
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(warnings == 1);
  ::unlink(dir.c_str());
  CHECK(sink.write(snap) == export_result::success);
  const std::string text = fixture::slurp(dir + "/x.log");
  CHECK(count_lines(text) == 3 * (snap.records.size() + snap.comms.size()));
  CHECK(sink.dropped() == 0);
}

TEST_CASE("json_sink rotation counts the records it discards", "[sink][json]") {
  const auto dir = scratch_dir("rot");
  const auto snap = fixture::make_snapshot();
  json_sink sink({.dir = dir, .file_name = "r.log", .max_file_bytes = 4000});
  for (int i = 0; i < 6; ++i) sink.write(snap);
  const std::size_t per_write = snap.records.size() + snap.comms.size();
  const std::size_t kept = count_lines(fixture::slurp(dir + "/r.log")) + count_lines(fixture::slurp(dir + "/r.log.1"));
  // Every communicator of the fixture has records, so each write emits exactly one line per
  // record and one dump_stats line per communicator: every line is either kept or counted.
  for (std::uint32_t i = 0; i < snap.comms.size(); ++i)
    REQUIRE(std::any_of(snap.records.begin(), snap.records.end(), [i](const auto& r) { return r.comm == i; }));
  CHECK(sink.dropped() > 0);
  CHECK(kept + sink.dropped() == 6 * per_write);
  CHECK(fixture::slurp(dir + "/r.log").find("\"dropped_total\":") != std::string::npos);
}

TEST_CASE("callback_sink catches exceptions and reports them", "[sink][callback]") {
  std::vector<std::string> logs;
  int calls = 0;
  callback_sink ok([&](const snapshot& s) { calls += static_cast<int>(s.comms.size()); });
  callback_sink bad([](const snapshot&) { throw std::runtime_error("telemetry down"); },
                    [&](log_level, std::string_view m) { logs.emplace_back(m); });
  const auto snap = fixture::make_snapshot();
  CHECK(ok.write(snap) == export_result::success);
  CHECK(calls == 3);
  CHECK(bad.write(snap) == export_result::failure);
  REQUIRE(logs.size() == 1);
  CHECK(logs[0].find("telemetry down") != std::string::npos);
}

TEST_CASE("any_sink accepts sink types and forwards optional members", "[sink]") {
  struct minimal {
    int* n;
    export_result write(const snapshot&) noexcept {
      ++*n;
      return export_result::success;
    }
  };
  struct not_a_sink {
    void write(const snapshot&) {}
  };
  static_assert(sink<minimal>);
  static_assert(!sink<not_a_sink>);
  static_assert(!sink<int>);
  int n = 0;
  any_sink s{minimal{&n}};
  CHECK(s.write(snapshot{}) == export_result::success);
  s.shutdown();
  CHECK(s.name() == "sink");
  CHECK(n == 1);
}

TEST_CASE("Symlinks planted at the JSON file's name: refused with one warning, counted, records kept",
          "[sink][json][symlink]") {
  const auto dir = scratch_dir("jlink");
  REQUIRE(detail::make_dirs(dir) == 0);
  const victim v;
  v.plant(dir + "/x.log");
  std::vector<std::string> warnings;
  json_sink sink({.dir = dir, .file_name = "x.log", .log = [&](log_level l, std::string_view m) {
                    if (l == log_level::warn) warnings.emplace_back(m);
                  }});
  const auto snap = fixture::make_snapshot();
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(v.untouched());
  CHECK(is_symlink(dir + "/x.log"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("symbolic link") != std::string::npos);
  CHECK(sink.failed_exports() == 2);
  ::unlink((dir + "/x.log").c_str());  // the owner removes the link: everything kept is written
  CHECK(sink.write(snap) == export_result::success);
  CHECK(is_regular(dir + "/x.log"));
  CHECK(count_lines(fixture::slurp(dir + "/x.log")) == 3 * (snap.records.size() + snap.comms.size()));
  CHECK(sink.dropped() == 0);
  CHECK(v.untouched());
}

TEST_CASE("Symlinks planted at the rotated JSON name are replaced, never followed", "[sink][json][symlink]") {
  const auto dir = scratch_dir("jrot");
  REQUIRE(detail::make_dirs(dir) == 0);
  const victim v;
  v.plant(dir + "/r.log.1");
  json_sink sink({.dir = dir, .file_name = "r.log", .max_file_bytes = 4000});
  const auto snap = fixture::make_snapshot();
  for (int i = 0; i < 4; ++i) CHECK(sink.write(snap) == export_result::success);
  CHECK(v.untouched());
  CHECK(is_regular(dir + "/r.log.1"));  // the rename replaced the link itself
  CHECK(fixture::slurp(dir + "/r.log.1").find("\"dump_stats\"") != std::string::npos);
  // A link at the live name is not rotated either (that would move it to .1): it is refused.
  ::unlink((dir + "/r.log").c_str());
  v.plant(dir + "/r.log");
  const std::string rotated = fixture::slurp(dir + "/r.log.1");
  CHECK(sink.write(snap) == export_result::failure);
  CHECK(v.untouched());
  CHECK(is_symlink(dir + "/r.log"));
  CHECK(fixture::slurp(dir + "/r.log.1") == rotated);
}

TEST_CASE("Symlinks planted at the .prom names and at a temporary name are never followed", "[sink][prom][symlink]") {
  const auto dir = scratch_dir("plink");
  REQUIRE(detail::make_dirs(dir) == 0);
  const victim v;
  const auto snap = fixture::make_snapshot();
  const auto uuids = format::gpu_uuids(snap);
  REQUIRE(uuids.size() == 2);
  const std::string name = prom_file_name(uuids[0], "4242");
  v.plant(dir + "/" + name);
  // The name this sink used before it had unpredictable suffixes, and the pid-only prefix of today's.
  v.plant(dir + "/." + name + ".tmp." + std::to_string(::getpid()));
  prom_textfile_sink sink({.dir = dir});
  CHECK(sink.write(snap) == export_result::success);
  CHECK(v.untouched());
  CHECK(is_regular(dir + "/" + name));
  std::string want;
  format::write_prometheus(want, snap, uuids[0]);
  CHECK(metrics_of(fixture::slurp(dir + "/" + name)) == want);
  CHECK(sink.failed_exports() == 0);
  // No temporary file left behind, and temporary names are not predictable from the pid.
  std::size_t temps = 0;
  for (const auto& f : list_dir(dir)) temps += f.find(".tmp.") != std::string::npos;
  CHECK(temps == 1);  // only the planted link
  const std::string a = detail::temp_path(dir, name), b = detail::temp_path(dir, name);
  CHECK(a != b);
  CHECK(a.rfind(dir + "/." + name + ".tmp." + std::to_string(::getpid()) + ".", 0) == 0);
  // An existing entry at a temporary name (link or file) is never opened: O_EXCL | O_NOFOLLOW.
  v.plant(a);
  CHECK(detail::open_nofollow(a, O_EXCL) == -1);
  CHECK(errno == EEXIST);
  CHECK(v.untouched());
}

TEST_CASE("Symlink planted at the trace file's name is replaced, never followed", "[sink][trace][symlink]") {
  const auto dir = scratch_dir("tlink");
  REQUIRE(detail::make_dirs(dir) == 0);
  const victim v;
  trace_sink sink({.dir = dir, .trigger_file = false, .write_at_exit = false});
  const auto snap = fixture::make_snapshot();
  CHECK(sink.write(snap) == export_result::success);  // no dump requested yet: names known
  v.plant(sink.path());
  CHECK(sink.dump() == export_result::success);
  CHECK(v.untouched());
  CHECK(is_regular(sink.path()));
  CHECK(fixture::slurp(sink.path()).find("\"traceEvents\"") != std::string::npos);
  CHECK(sink.failed_exports() == 0);
}

TEST_CASE("Directories the sinks create are 0755 at most, never world-writable", "[sink][symlink]") {
  const auto base = scratch_dir("mode");
  const mode_t old = ::umask(0);  // the most permissive umask: our own mode must hold
  json_sink json({.dir = base + "/j/k", .file_name = "x.log"});
  prom_textfile_sink prom({.dir = base + "/p/q"});
  const auto snap = fixture::make_snapshot();
  const bool ok = json.write(snap) == export_result::success && prom.write(snap) == export_result::success;
  ::umask(old);
  CHECK(ok);
  for (const char* d : {"/j", "/j/k", "/p", "/p/q"}) {
    struct stat st {};
    REQUIRE(::stat((base + d).c_str(), &st) == 0);
    INFO(d);
    CHECK((st.st_mode & 07777) == 0755);
  }
  struct stat st {};
  REQUIRE(::stat((base + "/j/k/x.log").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
}

TEST_CASE("json_sink holds at most 64 MiB of lines while the directory is unusable, then drops and counts the oldest",
          "[sink][json][faults]") {
  CHECK(json_sink_options{}.max_pending_bytes == 64ull << 20);  // the documented cap
  const auto snap = fixture::make_snapshot();
  // Bytes of one export (every communicator of the fixture has records: same lines each time).
  const auto probe_dir = scratch_dir("jprobe");
  json_sink probe({.dir = probe_dir, .file_name = "p.log"});
  REQUIRE(probe.write(snap) == export_result::success);
  const std::size_t per_write_bytes = fixture::slurp(probe_dir + "/p.log").size();
  const std::size_t per_write_lines = snap.records.size() + snap.comms.size();
  REQUIRE(per_write_bytes > 0);
  const auto dir = scratch_dir("jcap");
  std::ofstream(dir) << "file in the way";
  json_sink sink({.dir = dir, .file_name = "x.log"});
  const std::size_t fits = (64ull << 20) / per_write_bytes;  // whole exports that fit the cap
  std::size_t writes = 0;
  while (sink.dropped() == 0 && writes < fits + 10) {
    CHECK(sink.write(snap) == export_result::failure);
    ++writes;
  }
  INFO(per_write_bytes << " bytes per export, " << fits << " fit, first drop at write " << writes);
  CHECK(writes >= fits);      // nothing dropped below the cap
  CHECK(writes <= fits + 1);  // and dropped as soon as it is exceeded
  const std::uint64_t dropped = sink.dropped();
  CHECK(dropped <= per_write_lines);  // only the oldest lines beyond the cap
  ::unlink(dir.c_str());
  CHECK(sink.write(snap) == export_result::success);
  const std::string text = fixture::slurp(dir + "/x.log");
  CHECK(text.size() <= (64ull << 20) + 2 * per_write_bytes);
  CHECK(count_lines(text) + dropped == (writes + 1) * per_write_lines);  // kept + counted = written
}

TEST_CASE("json_sink on a full disk (small tmpfs): only whole lines in the file, the rest written when space is back",
          "[sink][json][faults]") {
  const auto dir = scratch_dir("jfull");
  ::mkdir(dir.c_str(), 0755);
  // The test command runs as root: a mount failure fails the test (nothing passes by skipping).
  INFO("mount tmpfs: " << std::strerror(errno));
  REQUIRE(::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0);
  const auto snap = fixture::make_snapshot();
  const std::size_t per_write_lines = snap.records.size() + snap.comms.size();
  int warnings = 0;
  json_sink sink({.dir = dir, .file_name = "x.log", .log = [&](log_level l, std::string_view) {
                    warnings += l == log_level::warn;
                  }});
  std::size_t writes = 0;
  while (writes < 10000 && sink.write(snap) == export_result::success) ++writes;
  ++writes;  // the one that hit ENOSPC (its lines are kept pending)
  REQUIRE(writes < 10000);
  const std::string full = fixture::slurp(dir + "/x.log");
  INFO(full.size() << " bytes on the full disk after " << writes << " exports");
  CHECK(full.size() > 32 * 1024);
  REQUIRE(!full.empty());
  CHECK(full.back() == '\n');  // a torn last line was cut back
  std::size_t pos = 0;
  while (pos < full.size()) {  // every line is a whole JSON object
    const std::size_t nl = full.find('\n', pos);
    CHECK(full[pos] == '{');
    CHECK(full[nl - 1] == '}');
    pos = nl + 1;
  }
  CHECK(warnings >= 1);
  REQUIRE(::mount("tmpfs", dir.c_str(), "tmpfs", MS_REMOUNT, "size=4m") == 0);
  CHECK(sink.write(snap) == export_result::success);
  const std::string text = fixture::slurp(dir + "/x.log");
  ::umount2(dir.c_str(), MNT_DETACH);
  CHECK(sink.dropped() == 0);
  CHECK(count_lines(text) == (writes + 1) * per_write_lines);  // no line lost, none doubled
}

TEST_CASE("prom_textfile_sink warns once per directory about a shared one anyone, or its group, may overwrite",
          "[sink][prom][shared]") {
  const auto snap = fixture::make_snapshot();
  auto warnings_in = [&](mode_t mode) {
    const auto dir = scratch_dir("shared");
    REQUIRE(detail::make_dirs(dir) == 0);
    REQUIRE(::chmod(dir.c_str(), mode) == 0);
    std::vector<std::string> logs;
    for (int sink_instance = 0; sink_instance < 2; ++sink_instance) {  // a re-initialized plugin: a new sink
      prom_textfile_sink sink({.dir = dir, .log = [&](log_level l, std::string_view m) {
                                 if (l == log_level::warn) logs.emplace_back(m);
                               }});
      CHECK(sink.write(snap) == export_result::success);  // a warning, never a failed publish
      CHECK(sink.write(snap) == export_result::success);
    }
    return logs;
  };
  auto world = warnings_in(01777);
  REQUIRE(world.size() == 1);
  CHECK(world[0].find("writable by every user (mode 1777)") != std::string::npos);
  auto group = warnings_in(0775);
  REQUIRE(group.size() == 1);
  CHECK(group[0].find("without the sticky bit") != std::string::npos);
  CHECK(warnings_in(03775).empty());  // the documented setup (deploy/slurm/setup-textfile-dir.sh)
  CHECK(warnings_in(0755).empty());
}
