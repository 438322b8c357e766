#pragma once
/// Atomic file replacement: write `<dir>/.<name>.tmp.<pid>.<random>`, rename over `<dir>/<name>`.
/// Readers (node_exporter) see the old file or the new one, never a partial one (no fsync: metrics
/// need atomic visibility, not crash durability, and fsync can stall for seconds); on any error
/// (ENOSPC, EACCES, EFBIG...) the temp file is removed and the old file stays. Creates `dir`
/// (and parents) if missing. Thread-safety: reentrant (cold path, called by the exporter).
/// Published files are read by another user (node_exporter's textfile collector runs as its own
/// user): the file is 0644 and the directories we create for it 0755 whatever the process umask
/// (a job under umask 077 would otherwise publish 0600 files nobody else can read). Appended files
/// (open_nofollow: the JSON log) keep 0644 less the umask, as any file the job writes.
/// Shared directories (node_exporter's textfile folder): no file is opened through a symlink. The
/// temporary file is created with O_EXCL | O_NOFOLLOW under an unpredictable name, so a link planted
/// there makes the open fail instead of truncating its target; the rename replaces a link at
/// `<name>` itself, never what it points to. Appending writers use open_nofollow (ELOOP on a link).

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ncclinsp::detail {

/// mkdir -p; returns 0 or an errno value. Directories it creates are 0755 less the umask, or 0755
/// exactly when `readable_by_all` (existing ones are left as they are).
inline int make_dirs(const std::string& dir, bool readable_by_all = false) {
  if (dir.empty()) return 0;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  const auto slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (int e = make_dirs(dir.substr(0, slash), readable_by_all)) return e;
  }
  if (::mkdir(dir.c_str(), 0755) != 0) return errno == EEXIST ? 0 : errno;
  if (readable_by_all) {  // ours: through an fd, so a link swapped in meanwhile is not followed
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      ::fchmod(fd, 0755);
      ::close(fd);
    }
  }
  return 0;
}

/// Writes all of `data`; returns 0 or an errno value, and in `*written` (when given) the bytes that
/// reached the file. SIGXFSZ (RLIMIT_FSIZE) is reported as EFBIG.
inline int write_all(int fd, std::string_view data, std::size_t* written = nullptr) {
  std::size_t done = 0;
  int err = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  if (written) *written = done;
  return err;
}

/// Opens `path` for writing (`flags` | O_WRONLY | O_CREAT, mode 0644 less the umask) without
/// following a symlink at its last component: a link there fails with ELOOP. Returns the fd or -1.
inline int open_nofollow(const std::string& path, int flags) {
  return ::open(path.c_str(), flags | O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
}

/// The warning text for an errno value of ours: ELOOP means a symlink was refused.
inline std::string describe_error(int err) {
  if (err == ELOOP) return "a symbolic link is in the way (not followed; remove it)";
  return std::strerror(err);
}

/// 16 hex digits from getrandom() (a clock mix before the kernel has entropy, early at boot).
inline std::string random_hex() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);  // no entropy yet (early boot): still unique per call
    r = (static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'007ull) ^ static_cast<std::uint64_t>(ts.tv_nsec) ^
        reinterpret_cast<std::uintptr_t>(&r);
  }
  char hex[17];
  for (int i = 15; i >= 0; --i, r >>= 4) hex[i] = "0123456789abcdef"[r & 15];
  hex[16] = 0;
  return hex;
}

/// `<dir>/.<name>.tmp.<pid>.<16 hex digits>`: the digits are random, so another user of a shared
/// directory cannot plant a link at the next name (O_EXCL refuses it anyway).
inline std::string temp_path(const std::string& dir, const std::string& name) {
  return dir + "/." + name + ".tmp." + std::to_string(::getpid()) + "." + random_hex();
}

/// Replaces `<dir>/<name>` with `data` atomically, mode 0644 whatever the umask; returns 0 or an
/// errno value.
inline int write_file_atomic(const std::string& dir, const std::string& name, std::string_view data) {
  if (int e = make_dirs(dir, /*readable_by_all=*/true)) return e;
  const std::string path = dir + "/" + name;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 4; ++attempt) {  // a fresh name if one is taken
    tmp = temp_path(dir, name);
    fd = open_nofollow(tmp, O_EXCL);
    if (fd < 0 && errno != EEXIST) return errno;
  }
  if (fd < 0) return EEXIST;
  int err = ::fchmod(fd, 0644) != 0 ? errno : 0;  // our fresh file: the umask does not decide who reads it
  if (!err) err = write_all(fd, data);
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
