#pragma once
/// Atomic file replacement: write `<dir>/.<name>.tmp.<pid>`, rename over `<dir>/<name>`.
/// Readers (node_exporter) see the old file or the new one, never a partial one (no fsync: metrics
/// need atomic visibility, not crash durability, and fsync can stall for seconds); on any error
/// (ENOSPC, EACCES, EFBIG...) the temp file is removed and the old file stays. Creates `dir`
/// (and parents) if missing. Thread-safety: reentrant (cold path, called by the exporter).

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace ncclinsp::detail {

/// mkdir -p; returns 0 or an errno value.
inline int make_dirs(const std::string& dir) {
  if (dir.empty()) return 0;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (int e = make_dirs(dir.substr(0, slash))) return e;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return errno;
  return 0;
}

/// Writes all of `data`; returns 0 or an errno value. SIGXFSZ (RLIMIT_FSIZE) is reported as EFBIG.
inline int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

/// Replaces `<dir>/<name>` with `data` atomically; returns 0 or an errno value.
inline int write_file_atomic(const std::string& dir, const std::string& name, std::string_view data) {
  if (int e = make_dirs(dir)) return e;
  const std::string path = dir + "/" + name;
  const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = write_all(fd, data);
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) ::unlink(tmp.c_str());
  return err;
}

/// Ignores SIGXFSZ once per process so a file-size limit becomes EFBIG instead of killing the job.
inline void ignore_sigxfsz() {
  static const bool done = [] {
    struct sigaction sa {};
    if (::sigaction(SIGXFSZ, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) ::signal(SIGXFSZ, SIG_IGN);
    return true;
  }();
  (void)done;
}

}  // namespace ncclinsp::detail
