#pragma once
/// One writer per file name across processes: two processes on one GPU (MPS, two jobs sharing a
/// node) would otherwise replace each other's `nccl_inspector_metrics_<uuid>.prom`, and each
/// process's series would come and go with every export. The first process to write a name
/// claims it with flock() on `<dir>/.<name>.lock`, held until the process exits (the lock goes
/// with it, also on a crash); another live process gets `false` and writes a name of its own.
/// The node-side cleaner (tools/cleaner/) reads a held lock as "its writer lives", across PID
/// namespaces (containers) too.
/// The answer is remembered per path for the life of the process, so a later exporter of the same
/// process (re-init after the last communicator was destroyed) keeps the same name.
/// Thread-safety: any thread (cold path, a mutex).

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <string>

namespace ncclinsp::detail {

/// The claims of this process: path -> the locked descriptor, or -1 when another process holds it.
inline std::map<std::string, int>& file_claims(std::mutex*& mu) {
  static std::mutex m;
  static auto* claims = new std::map<std::string, int>();  // never destroyed: exporter threads may outlive statics
  mu = &m;
  return *claims;
}

/// True when this process may write `<dir>/<name>` (claimed now or before), false when another
/// live process holds it. When the lock file cannot be made (missing or unwritable directory) the
/// answer is true and is not remembered: the next call tries again. The lock file is opened
/// read-only (flock needs no write access), so one left by another user still tells whether its
/// writer lives; it is never followed through a symlink.
inline bool claim_file_name(const std::string& dir, const std::string& name) {
  std::mutex* mu = nullptr;
  auto& claims = file_claims(mu);
  const std::string path = dir + "/" + name;
  std::lock_guard lk(*mu);
  if (const auto it = claims.find(path); it != claims.end()) return it->second >= 0;
  int fd = ::open((dir + "/." + name + ".lock").c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return true;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool held = errno == EWOULDBLOCK;  // another process holds it; any other error: behave as before
    ::close(fd);
    if (!held) return true;
    fd = -1;
  }  // else: fd stays open (and locked) until the process exits or releases it
  claims.emplace(path, fd);
  return fd >= 0;
}

/// Gives up this process's claim of `<dir>/<name>` and removes its lock file (the sink's files
/// were deleted at shutdown: nothing is left behind). A later claim starts afresh.
inline void release_file_name(const std::string& dir, const std::string& name) {
  std::mutex* mu = nullptr;
  auto& claims = file_claims(mu);
  std::lock_guard lk(*mu);
  const auto it = claims.find(dir + "/" + name);
  if (it == claims.end()) return;
  if (it->second >= 0) {
    ::unlink((dir + "/." + name + ".lock").c_str());  // unlinked while still locked: no one else took it meanwhile
    ::close(it->second);
  }
  claims.erase(it);
}

}  // namespace ncclinsp::detail
