#pragma once
/// The owner line that opens every published `.prom` file: who wrote it, so that a node-side
/// cleaner (tools/cleaner/) can tell a dead writer's file from a live one's and refuse a file that
/// is not ours, from the file's own content. One comment line (node_exporter and Prometheus ignore
/// comments), written and parsed here only:
///   # ncclinsp-owner v1 uid=1000 pid=4242 start=981234 boot=<boot id> pidns=4026531836 ts=1733212345.250 final=0 host=<h> job=<key>
/// `start` is the process start time in clock ticks since boot (/proc/<pid>/stat field 22), so a
/// reused pid is told apart; `boot` is the kernel's boot id and `pidns` the inode of the writer's
/// PID namespace: the pid means something to a reader only where both are its own. `host` and
/// `job` are percent-encoded (anything outside [A-Za-z0-9._:/@+-]). Cold path; reentrant.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace ncclinsp::detail {

inline constexpr std::string_view owner_tag = "# ncclinsp-owner v1 ";

/// What the owner line says.
struct owner_stamp {
  long uid = -1;
  long pid = 0;
  std::uint64_t start = 0;  ///< process start, clock ticks since boot
  std::string boot;         ///< /proc/sys/kernel/random/boot_id
  std::uint64_t pidns = 0;  ///< inode of /proc/self/ns/pid (0: unknown)
  double ts = 0;            ///< Unix time of the export, seconds
  bool final = false;       ///< written at shutdown
  std::string host;         ///< the writer's host name (for people; not used to decide)
  std::string job;          ///< the job key (label job_id)
};

/// The first `max` bytes of a small file under /proc, or "" when it cannot be read.
inline std::string read_small_file(const char* path, std::size_t max = 4096) {
  std::string s;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return s;
  s.resize(max);
  std::size_t got = 0;
  while (got < max) {
    const ssize_t n = ::read(fd, s.data() + got, max - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  s.resize(got);
  return s;
}

/// Start time (field 22 of /proc/<pid>/stat, ticks since boot) and state (field 3) of `pid` as
/// this process's /proc sees it; false when there is no such process here.
inline bool proc_start(long pid, std::uint64_t& start, char* state = nullptr) {
  const std::string st = read_small_file(("/proc/" + std::to_string(pid) + "/stat").c_str());
  const auto paren = st.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return false;
  std::size_t at = paren + 2, field = 3;
  if (state && at < st.size()) *state = st[at];
  while (field < 22 && at < st.size()) {
    at = st.find(' ', at);
    if (at == std::string::npos) return false;
    ++at;
    ++field;
  }
  std::uint64_t v = 0;
  bool any = false;
  for (; at < st.size() && st[at] >= '0' && st[at] <= '9'; ++at, any = true)
    v = v * 10 + static_cast<unsigned>(st[at] - '0');
  start = v;
  return any;
}

inline std::string boot_id() {
  std::string b = read_small_file("/proc/sys/kernel/random/boot_id", 64);
  while (!b.empty() && (b.back() == '\n' || b.back() == ' ')) b.pop_back();
  return b;
}

/// The inode of this process's PID namespace ("pid:[4026531836]"), 0 when unknown.
inline std::uint64_t pid_namespace() {
  char buf[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  std::uint64_t v = 0;
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] >= '0' && buf[i] <= '9') v = v * 10 + static_cast<unsigned>(buf[i] - '0');
  return v;
}

/// This process's stamp (uid, pid, start, boot, pidns), read again after a fork.
inline owner_stamp this_process() {
  owner_stamp s;
  s.uid = static_cast<long>(::geteuid());
  s.pid = static_cast<long>(::getpid());
  proc_start(s.pid, s.start);
  s.boot = boot_id();
  s.pidns = pid_namespace();
  return s;
}

inline std::string owner_encode(std::string_view v) {
  std::string r;
  for (char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == ':' || c == '/' || c == '@' || c == '+' || c == '-';
    if (plain) {
      r += static_cast<char>(c);
    } else {
      r += '%';
      r += "0123456789ABCDEF"[c >> 4];
      r += "0123456789ABCDEF"[c & 15];
    }
  }
  return r;
}

inline std::string owner_decode(std::string_view v) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                  : -1;
  };
  std::string r;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] == '%' && i + 2 < v.size() && hex(v[i + 1]) >= 0 && hex(v[i + 2]) >= 0) {
      r += static_cast<char>(hex(v[i + 1]) * 16 + hex(v[i + 2]));
      i += 2;
    } else {
      r += v[i];
    }
  }
  return r;
}

/// The owner line (with its newline) for `p` writing job `job` at Unix time `ts_ns`.
inline std::string owner_line(const owner_stamp& p, std::string_view job, std::string_view host, std::uint64_t ts_ns,
                              bool final) {
  char ts[32];
  std::snprintf(ts, sizeof ts, "%llu.%03llu", static_cast<unsigned long long>(ts_ns / 1000000000ull),
                static_cast<unsigned long long>(ts_ns % 1000000000ull / 1000000ull));
  return std::string(owner_tag) + "uid=" + std::to_string(p.uid) + " pid=" + std::to_string(p.pid) +
         " start=" + std::to_string(p.start) + " boot=" + owner_encode(p.boot) + " pidns=" + std::to_string(p.pidns) +
         " ts=" + ts + " final=" + (final ? "1" : "0") + " host=" + owner_encode(host) + " job=" + owner_encode(job) +
         "\n";
}

/// Parses the first line of `text` as an owner line; false when it is not one (not our file).
inline bool parse_owner_line(std::string_view text, owner_stamp& out) {
  if (text.substr(0, owner_tag.size()) != owner_tag) return false;
  const auto eol = text.find('\n');
  if (eol == std::string_view::npos) return false;
  std::string_view rest = text.substr(owner_tag.size(), eol - owner_tag.size());
  owner_stamp s;
  bool has_uid = false, has_pid = false, has_ts = false, has_job = false;
  auto number = [](std::string_view v, std::uint64_t& n) {
    if (v.empty() || v.size() > 19) return false;
    n = 0;
    for (char c : v) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + static_cast<unsigned>(c - '0');
    }
    return true;
  };
  while (!rest.empty()) {
    const auto sp = rest.find(' ');
    const std::string_view item = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view k = item.substr(0, eq), v = item.substr(eq + 1);
    std::uint64_t n = 0;
    if (k == "uid") {
      if (!(has_uid = number(v, n))) return false;
      s.uid = static_cast<long>(n);
    } else if (k == "pid") {
      if (!(has_pid = number(v, n)) || n == 0) return false;
      s.pid = static_cast<long>(n);
    } else if (k == "start") {
      if (!number(v, s.start)) return false;
    } else if (k == "boot") {
      s.boot = owner_decode(v);
    } else if (k == "pidns") {
      if (!number(v, s.pidns)) return false;
    } else if (k == "ts") {
      const auto dot = v.find('.');
      std::uint64_t sec = 0, ms = 0;
      if (!number(v.substr(0, dot), sec) || (dot != std::string_view::npos && !number(v.substr(dot + 1), ms)))
        return false;
      const std::size_t digits = dot == std::string_view::npos ? 0 : v.size() - dot - 1;
      double frac = static_cast<double>(ms);
      for (std::size_t i = 0; i < digits; ++i) frac /= 10;
      s.ts = static_cast<double>(sec) + frac;
      has_ts = true;
    } else if (k == "final") {
      s.final = v == "1";
    } else if (k == "host") {
      s.host = owner_decode(v);
    } else if (k == "job") {
      s.job = owner_decode(v);
      has_job = !s.job.empty();
    }  // unknown keys: a newer writer's; ignored
  }
  if (!(has_uid && has_pid && has_ts && has_job)) return false;
  out = std::move(s);
  return true;
}

}  // namespace ncclinsp::detail
