// ncclinsp-cleaner: removes the .prom files of ended and killed jobs from node_exporter's textfile
// directory, deciding from each file's own content (its owner line, detail/owner_stamp.hpp) and
// whether its writer lives. Run by a systemd timer, the Slurm epilog (--job) and a Kubernetes
// DaemonSet alike; docs/deploy.md says what it removes when, and why each rule is safe.
//
// A file is ours only if it is a regular file named nccl_inspector_metrics_*.prom whose first line
// is an owner line naming the uid that owns the file; anything else is left alone. Its writer is
//   alive  when the file's lock (.<name>.lock, flock'ed by the writer for its whole life) is held,
//          or when the pid lives with the recorded start time (same boot and PID namespace only);
//   dead   when the lock exists and nobody holds it, or the pid is gone or reused;
//   unknown otherwise (no lock, and another PID namespace or boot: a container without hostPID).
// Removed: final files (the writer said it ended) older than --grace; files of dead writers;
// files of unknown writers older than --stale-after (by their export timestamp). With --job K only
// job K's files are judged, and they go unless their writer is alive (the scheduler says it ended).
// A removed file's lock goes with it; a lock whose file is gone goes when nobody holds it. Never followed: symlinks (the directory itself
// included). Everything is decided and removed through the directory's descriptor, and an entry is
// unlinked only if it is still the inode that was read.
//
// State dumps (<node>-pid<pid>-<gpu>.state.json, plugin/state_dumper.hpp) are the evidence of a
// killed or hung job; the plugin removes its own at a normal end. One is ours only if it is a
// regular file with that name whose content starts with the dump's header
// ({"format":"ncclinsp-state","version":...) and whose "pid" is the one in its name. It goes when it
// was last written --state-max-age ago (24 h) and its writer is gone: written on this host (its
// "hostname") and the pid is gone, a zombie, or a process started after the file's last write.
// --job never removes one (the epilog runs right after a killed job: its dumps are still to read).

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/detail/owner_stamp.hpp"

namespace {

using ncclinsp::detail::owner_stamp;

struct settings {
  std::vector<std::string> dirs;
  std::string job;                     // --job: remove this job's files (its scheduler says it ended)
  double grace = 120;                  // --grace: how long a final file stays for the last scrapes
  double stale_after = 600;            // --stale-after: bound for files whose writer cannot be checked
  double now = 0;                      // --now: Unix time to judge ages by (tests, what-if runs)
  double every = 0;                    // --every: run again every this many seconds (a DaemonSet's loop)
  double state_max_age = 24 * 3600.0;  // --state-max-age (given in hours): state dumps of gone writers
  bool dry_run = false;
  bool verbose = false;
};

constexpr std::string_view prefix = "nccl_inspector_metrics_";
constexpr std::string_view suffix = ".prom";
constexpr std::string_view state_suffix = ".state.json";
constexpr std::string_view state_head = "{\"format\":\"ncclinsp-state\",\"version\":";

bool ends_with(std::string_view s, std::string_view e) {
  return s.size() >= e.size() && s.substr(s.size() - e.size()) == e;
}
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

enum class writer { alive, dead, unknown };

struct me {
  std::string boot = ncclinsp::detail::boot_id();
  std::uint64_t pidns = ncclinsp::detail::pid_namespace();
  std::string host = ncclinsp::detail::host_name();
};

/// The writer's lock: held (alive), free (dead), or absent/unusable (unknown).
writer lock_state(int dfd, const std::string& lock_name) {
  const int fd = ::openat(dfd, lock_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return writer::unknown;
  struct stat st {};
  writer w = writer::unknown;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
      w = writer::dead;  // nobody holds it; the writer held it from its first export until it exited
      ::flock(fd, LOCK_UN);
    } else if (errno == EWOULDBLOCK) {
      w = writer::alive;
    }
  }
  ::close(fd);
  return w;
}

/// The pid check, meaningful only in the writer's own boot and PID namespace.
writer pid_state(const owner_stamp& o, const me& m) {
  if (o.boot.empty() || o.boot != m.boot || o.pidns == 0 || o.pidns != m.pidns) return writer::unknown;
  std::uint64_t start = 0;
  char state = 0;
  if (!ncclinsp::detail::proc_start(o.pid, start, &state)) return writer::dead;
  return start == o.start && state != 'Z' ? writer::alive : writer::dead;  // another start: the pid was reused
}

/// Reads the owner line of an open regular file; false when it is not ours.
bool read_owner(int fd, const struct stat& st, owner_stamp& o, std::string& why) {
  std::string head(4096, '\0');
  const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
  head.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  if (!ncclinsp::detail::parse_owner_line(head, o)) {
    why = "no ncclinsp owner line: not ours";
    return false;
  }
  if (o.uid != static_cast<long>(st.st_uid)) {
    why = "its owner line names uid " + std::to_string(o.uid) + " but uid " + std::to_string(st.st_uid) +
          " owns it: not ours";
    return false;
  }
  return true;
}

/// Unlinks `name` if it still is the inode `st` describes (never what a swapped-in entry is).
bool unlink_same(int dfd, const std::string& name, const struct stat& st, const settings& s, const std::string& dir,
                 const std::string& why) {
  struct stat now {};
  if (::fstatat(dfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != st.st_dev ||
      now.st_ino != st.st_ino) {
    std::fprintf(stderr, "ncclinsp-cleaner: %s/%s changed while it was read; left for the next run\n", dir.c_str(),
                 name.c_str());
    return false;
  }
  if (s.dry_run) {
    std::printf("would remove %s/%s (%s)\n", dir.c_str(), name.c_str(), why.c_str());
    return true;
  }
  if (::unlinkat(dfd, name.c_str(), 0) != 0) {
    std::fprintf(stderr, "ncclinsp-cleaner: cannot remove %s/%s (%s): %s\n", dir.c_str(), name.c_str(), why.c_str(),
                 std::strerror(errno));
    return false;
  }
  std::printf("removed %s/%s (%s)\n", dir.c_str(), name.c_str(), why.c_str());
  return true;
}

void judge_lock(int dfd, const std::string& dir, const std::string& name, const settings& s);

std::string age_text(double age) { return std::to_string(static_cast<long long>(age)) + " s"; }

/// Opens a file to judge without following a symlink (one is never ours); -1, said when verbose, if
/// it cannot be opened.
int open_candidate(int dfd, const std::string& dir, const std::string& name, const settings& s) {
  const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && s.verbose)
    std::printf("kept %s/%s (%s)\n", dir.c_str(), name.c_str(),
                errno == ELOOP ? "a symlink: not ours" : std::strerror(errno));
  return fd;
}

/// Decides one .prom (or temporary) file; returns true when it was removed.
bool judge(int dfd, const std::string& dir, const std::string& name, const settings& s, const me& m, bool temp) {
  const int fd = open_candidate(dfd, dir, name, s);
  if (fd < 0) return false;
  struct stat st {};
  owner_stamp o;
  std::string why;
  bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ours) why = "not a regular file: not ours";
  ours = ours && read_owner(fd, st, o, why);
  ::close(fd);
  if (!ours) {
    if (s.verbose) std::printf("kept %s/%s (%s)\n", dir.c_str(), name.c_str(), why.c_str());
    return false;
  }
  if (!s.job.empty() && o.job != s.job) return false;  // --job: that job's files only
  const double age = s.now - o.ts;
  const std::string who = "job " + o.job + ", pid " + std::to_string(o.pid);
  if (temp) {  // a write takes milliseconds: a temporary file this old lost its writer mid-write
    const double mage = s.now - static_cast<double>(st.st_mtime);
    if (mage >= s.grace)
      return unlink_same(dfd, name, st, s, dir, who + ": temporary file left " + age_text(mage) + " ago");
    return false;
  }
  writer w = lock_state(dfd, "." + name + ".lock");
  if (w != writer::alive) {
    const writer p = pid_state(o, m);
    if (p != writer::unknown) w = p;
  }
  if (o.final && age >= s.grace)
    return unlink_same(dfd, name, st, s, dir, who + ": final file, last export " + age_text(age) + " ago");
  if (w == writer::alive) {
    if (s.verbose) std::printf("kept %s/%s (%s: writer alive)\n", dir.c_str(), name.c_str(), who.c_str());
    return false;
  }
  if (!s.job.empty() && o.job == s.job) return unlink_same(dfd, name, st, s, dir, who + ": the job ended");
  if (o.final) return false;  // dead or not, a final file stays for its grace
  if (w == writer::dead) return unlink_same(dfd, name, st, s, dir, who + ": writer gone");
  if (age >= s.stale_after)
    return unlink_same(dfd, name, st, s, dir,
                       who + ": writer not checkable here, last export " + age_text(age) + " ago");
  if (s.verbose)
    std::printf("kept %s/%s (%s: writer not checkable, %s old)\n", dir.c_str(), name.c_str(), who.c_str(),
                age_text(age).c_str());
  return false;
}

/// The string value of `"key":"` in a dump's JSON text (no escapes: a host name has none); false
/// when absent or escaped.
bool json_text(std::string_view j, std::string_view key, std::string& out) {
  const std::string k = "\"" + std::string(key) + "\":\"";
  const auto at = j.find(k);
  if (at == std::string_view::npos) return false;
  const auto end = j.find('"', at + k.size());
  if (end == std::string_view::npos) return false;
  out = std::string(j.substr(at + k.size(), end - at - k.size()));
  return out.find('\\') == std::string::npos;
}

/// Whether process `pid` of this PID namespace is the one that last wrote a file at Unix time
/// `mtime`: alive if it runs and started before that write (its start, from /proc, to the second).
writer state_writer(long pid, double mtime) {
  std::uint64_t start = 0;
  char state = 0;
  if (!ncclinsp::detail::proc_start(pid, start, &state) || state == 'Z') return writer::dead;
  timespec real{}, boot{};
  ::clock_gettime(CLOCK_REALTIME, &real);
  ::clock_gettime(CLOCK_BOOTTIME, &boot);
  const double booted =
      static_cast<double>(real.tv_sec - boot.tv_sec) + 1e-9 * static_cast<double>(real.tv_nsec - boot.tv_nsec);
  const double started = booted + static_cast<double>(start) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return started > mtime + 2 ? writer::dead : writer::alive;  // started after the write: the pid was reused
}

/// Decides one state dump; returns true when it was removed.
bool judge_state(int dfd, const std::string& dir, const std::string& name, const settings& s, const me& m) {
  const int fd = open_candidate(dfd, dir, name, s);
  if (fd < 0) return false;
  struct stat st {};
  std::string head(4096, '\0'), why, host;
  bool ours = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ours) {
    const ssize_t n = ::pread(fd, head.data(), head.size(), 0);
    head.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  long pid = 0;
  if (!ours) {
    why = "not a regular file: not ours";
  } else if (!starts_with(head, state_head)) {
    why = "no ncclinsp-state header: not ours";
  } else {
    const auto at = head.find(",\"pid\":");
    char* end = nullptr;
    if (at != std::string::npos) pid = std::strtol(head.c_str() + at + 7, &end, 10);
    if (pid <= 0 || name.find("-pid" + std::to_string(pid) + "-") == std::string::npos) {
      ours = false;
      why = "its pid is not the one in its name: not ours";
    }
  }
  if (!ours) {
    if (s.verbose) std::printf("kept %s/%s (%s)\n", dir.c_str(), name.c_str(), why.c_str());
    return false;
  }
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
  const double age = s.now - mtime;
  const std::string who = "state dump of pid " + std::to_string(pid);
  if (!json_text(head, "hostname", host) || host != m.host) {
    if (s.verbose)
      std::printf("kept %s/%s (%s: written on host \"%s\", not checkable here)\n", dir.c_str(), name.c_str(),
                  who.c_str(), host.c_str());
    return false;
  }
  if (state_writer(pid, mtime) == writer::alive) {
    if (s.verbose) std::printf("kept %s/%s (%s: writer alive)\n", dir.c_str(), name.c_str(), who.c_str());
    return false;
  }
  if (age >= s.state_max_age)
    return unlink_same(dfd, name, st, s, dir, who + ": writer gone, last written " + age_text(age) + " ago");
  if (s.verbose)
    std::printf("kept %s/%s (%s: writer gone, %s old: evidence to collect)\n", dir.c_str(), name.c_str(), who.c_str(),
                age_text(age).c_str());
  return false;
}

/// A lock file whose .prom is gone and that nobody holds (empty, regular): removed while we hold it.
void judge_lock(int dfd, const std::string& dir, const std::string& name, const settings& s) {
  const std::string prom = name.substr(1, name.size() - 1 - std::string_view(".lock").size());
  struct stat pst {};
  if (::fstatat(dfd, prom.c_str(), &pst, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) return;
  const int fd = ::openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0)
    unlink_same(dfd, name, st, s, dir, "lock of a removed file, not held");
  ::close(fd);
}

int clean(const std::string& dir, const settings& s, const me& m) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    std::fprintf(stderr, "ncclinsp-cleaner: cannot open directory %s: %s%s\n", dir.c_str(), std::strerror(errno),
                 errno == ELOOP || errno == ENOTDIR ? " (a symlink is not followed: give the real path)" : "");
    return 2;
  }
  struct stat dst {};
  if (::fstat(dfd, &dst) == 0 && (dst.st_mode & S_IWOTH))
    std::fprintf(stderr,
                 "ncclinsp-cleaner: warning: %s is writable by every user; see deploy/slurm/setup-textfile-dir.sh\n",
                 dir.c_str());
  DIR* d = ::fdopendir(::dup(dfd));
  if (!d) {
    ::close(dfd);
    return 2;
  }
  std::vector<std::string> proms, temps, locks, states;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (starts_with(n, prefix) && ends_with(n, suffix))
      proms.emplace_back(n);
    else if (n.size() > state_suffix.size() && n[0] != '.' && ends_with(n, state_suffix))
      states.emplace_back(n);
    else if (n.size() > 1 && n[0] == '.' && starts_with(n.substr(1), prefix) && ends_with(n, ".prom.lock"))
      locks.emplace_back(n);
    else if (n.size() > 1 && n[0] == '.' && starts_with(n.substr(1), prefix) &&
             n.find(".prom.tmp.") != std::string_view::npos)
      temps.emplace_back(n);
  }
  ::closedir(d);
  for (const auto& n : proms)
    if (judge(dfd, dir, n, s, m, false)) judge_lock(dfd, dir, "." + n + ".lock", s);
  for (const auto& n : temps) judge(dfd, dir, n, s, m, true);
  if (s.job.empty()) {
    for (const auto& n : locks) judge_lock(dfd, dir, n, s);
    for (const auto& n : states) judge_state(dfd, dir, n, s, m);
  }
  ::close(dfd);
  return 0;
}

int usage(const char* argv0, int rc) {
  std::fprintf(
      rc ? stderr : stdout,
      "usage: %s [--job KEY] [--grace S] [--stale-after S] [--state-max-age H] [--dry-run] [--verbose] [--now T]\n"
      "          [--every S] DIR...\n"
      "Removes ncclinsp .prom files of ended and killed jobs from DIR (node_exporter's textfile directory),\n"
      "and state dumps (*.state.json) nobody collected.\n"
      "  --job KEY        also remove job KEY's files now, unless their writer is alive (a scheduler epilog)\n"
      "  --grace S        final files (the job ended normally) stay this long after their last export (120)\n"
      "  --stale-after S  files whose writer cannot be checked from here go this long after their last export (600)\n"
      "  --state-max-age H  a state dump whose writer is gone (same host: its pid ended or was reused) goes\n"
      "                   this many hours after its last write (24); --job never removes one\n"
      "  --dry-run        print what would be removed, remove nothing\n"
      "  --verbose        also say what is kept, and why\n"
      "  --now T          judge ages at Unix time T instead of the clock\n"
      "  --every S        keep running: clean every S seconds (a Kubernetes DaemonSet)\n",
      argv0);
  return rc;
}

bool number(const char* v, double& out) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v, &end);
  if (errno || end == v || *end || d < 0) return false;
  out = d;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ncclinsp-cleaner: %s needs a value\n", what);
        std::exit(usage(argv[0], 1));
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return usage(argv[0], 0);
    if (a == "--dry-run") {
      s.dry_run = true;
    } else if (a == "--verbose" || a == "-v") {
      s.verbose = true;
    } else if (a == "--job") {
      s.job = value("--job");
    } else if (a == "--state-max-age") {
      const char* v = value(argv[i]);
      if (!number(v, s.state_max_age)) {
        std::fprintf(stderr, "ncclinsp-cleaner: --state-max-age: expected a number of hours, got \"%s\"\n", v);
        return usage(argv[0], 1);
      }
      s.state_max_age *= 3600;
    } else if (a == "--grace" || a == "--stale-after" || a == "--now" || a == "--every") {
      const char* v = value(argv[i]);
      double& out = a == "--grace" ? s.grace : a == "--stale-after" ? s.stale_after : a == "--now" ? s.now : s.every;
      if (!number(v, out)) {
        std::fprintf(stderr, "ncclinsp-cleaner: %s: expected a number of seconds, got \"%s\"\n", argv[i - 1], v);
        return usage(argv[0], 1);
      }
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "ncclinsp-cleaner: unknown option %s\n", argv[i]);
      return usage(argv[0], 1);
    } else {
      s.dirs.emplace_back(a);
    }
  }
  if (s.dirs.empty()) return usage(argv[0], 1);
  if (s.every > 0 && (s.now != 0 || !s.job.empty() || s.dry_run)) {
    std::fprintf(stderr, "ncclinsp-cleaner: --every runs on the clock, without --now, --job or --dry-run\n");
    return usage(argv[0], 1);
  }
  const bool fixed_now = s.now != 0;
  const me m;
  int rc = 0;
  for (;;) {
    if (!fixed_now) {
      timespec ts{};
      ::clock_gettime(CLOCK_REALTIME, &ts);
      s.now = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
    }
    rc = 0;
    for (const auto& d : s.dirs) rc = std::max(rc, clean(d, s, m));
    std::fflush(stdout);
    if (s.every <= 0) break;
    const auto ns = static_cast<long long>(s.every * 1e9);
    timespec pause{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    while (::nanosleep(&pause, &pause) != 0 && errno == EINTR) {}
  }
  return rc;
}
