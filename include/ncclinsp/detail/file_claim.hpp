#pragma once
/// One writer per file name across processes: two processes on one GPU (MPS, two jobs sharing a
/// node) would otherwise replace each other's `nccl_inspector_metrics_<uuid>.prom`, and each
/// process's series would come and go with every export. The first process to write a name
/// claims it with flock() on `<dir>/.<name>.lock`, held until the process exits (the lock goes
/// with it, also on a crash); another live process gets `false` and writes a name of its own.
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

/// True when this process may write `<dir>/<name>` (claimed now or before), false when another
/// live process holds it. When the lock file cannot be made (missing or unwritable directory) the
/// answer is true and is not remembered: the next call tries again.
inline bool claim_file_name(const std::string& dir, const std::string& name) {
  static std::mutex mu;
  static auto* claims = new std::map<std::string, bool>();  // never destroyed: exporter threads may outlive statics
  const std::string path = dir + "/" + name;
  std::lock_guard lk(mu);
  if (const auto it = claims->find(path); it != claims->end()) return it->second;
  const int fd = ::open((dir + "/." + name + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return true;
  bool mine = true;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    mine = errno != EWOULDBLOCK;  // another process holds it; any other error: behave as before
    ::close(fd);
  }  // else: fd stays open (and locked) until the process exits
  claims->emplace(path, mine);
  return mine;
}

}  // namespace ncclinsp::detail
