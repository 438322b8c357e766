#pragma once
/// prom_textfile_sink: one `nccl_inspector_metrics_<uuid>.job-<job key>.prom` per GPU and job for
/// node_exporter's textfile collector, replaced atomically (temp file + rename) on every export.
/// When the directory is missing it is created; when it cannot be written (unwritable, a regular
/// file, disk full) the sink warns once per distinct error, keeps nothing on disk half-written, and
/// writes the current values on the next export that succeeds (the collector holds the data, so
/// nothing is lost).
/// Shared directories (several jobs and users on one node): the job key in the name keeps jobs
/// apart; every file opens with an owner line (detail/owner_stamp.hpp) from which the node-side
/// cleaner (tools/cleaner/) decides whether its writer is gone; a file at our name that belongs to
/// another user is never replaced (this process writes a name of its own, with one warning); a
/// directory any user may write to, or one whose group may replace our files (no sticky bit), gets
/// one warning. Symlinks are never followed (detail/atomic_file.hpp): one planted at a file's name
/// by this user is replaced by the new file, one at a temporary name makes that export fail with a
/// warning. Thread-safety: exporter thread only (cold path).

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "ncclinsp/detail/atomic_file.hpp"
#include "ncclinsp/detail/failure_log.hpp"
#include "ncclinsp/detail/file_claim.hpp"
#include "ncclinsp/detail/owner_stamp.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

struct prom_textfile_options {
  std::string dir = ".";
  /// Delete the files at shutdown. False: the final values stay for the last scrapes, marked by
  /// `ncclinsp_info{final="1"}` and the owner line, until the cleaner removes them (its grace);
  /// the environment's default (NCCLINSP_PROM_KEEP_FILES=0) is true.
  bool remove_on_shutdown = false;
  /// Write Inspector's four gauge families too (for existing Inspector dashboards).
  bool compat_gauges = true;
  log_fn log{};
  /// Labels, size buckets, histogram and the per-file line cap (docs/scale.md).
  format::cardinality card{};
};

/// Characters outside [A-Za-z0-9._-] become '_' (`dot` false: '.' too), at most `max` of them.
inline std::string file_name_part(std::string_view v, bool dot = true, std::size_t max = 96) {
  std::string s;
  for (char c : v.substr(0, max))
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || (dot && c == '.')) ? c : '_';
  return s;
}

/// File name for a GPU and a job: `nccl_inspector_metrics_<uuid>.job-<job key>.prom`, each part
/// sanitized (the job key also loses its dots, so `.job-` and `.prom` stay unambiguous), or
/// `nccl_inspector_metrics_<uuid>.prom` without a job key. `suffix` (".pid123") comes before `.prom`.
inline std::string prom_file_name(std::string_view uuid, std::string_view job = {}, std::string_view suffix = {}) {
  std::string s = "nccl_inspector_metrics_" + file_name_part(uuid);
  if (!job.empty()) s += ".job-" + file_name_part(job, /*dot=*/false);
  return s + std::string(suffix) + ".prom";
}

/// Why a shared output directory is unsafe, or "" when it is not: writable by every user (anyone
/// can add series or take file names), or by its group without the sticky bit (members can
/// replace or delete each other's files).
inline std::string shared_dir_problem(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {};
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  if (st.st_mode & S_IWOTH)
    return std::string("is writable by every user (mode ") + mode +
           "): anyone on this node can add series to what node_exporter serves";
  if ((st.st_mode & S_IWGRP) && !(st.st_mode & S_ISVTX))
    return std::string("is group-writable without the sticky bit (mode ") + mode +
           "): members of its group can replace or delete this job's files";
  return {};
}

template <class NativeBucketer = pow2_bucketer>
class basic_prom_textfile_sink {
 public:
  explicit basic_prom_textfile_sink(prom_textfile_options o) : o_(std::move(o)) { detail::ignore_sigxfsz(); }

  export_result write(const snapshot& snap) noexcept {
    try {
      export_result res = export_result::success;
      if (me_.pid != static_cast<long>(::getpid())) me_ = detail::this_process();  // first write, or a fork
      check_dir_once();
      const std::string& job = format::job_key(snap.identity);
      const std::string& host = snap.identity.hostname.empty() ? snap.identity.node : snap.identity.hostname;
      for (const auto& uuid : format::gpu_uuids(snap)) {
        std::string text = detail::owner_line(me_, job, host, snap.time_unix_ns, snap.final);
        format::write_prometheus<NativeBucketer>(text, snap, uuid, o_.compat_gauges, o_.card);
        const std::string name = file_name_for(uuid, job);
        const int err = detail::write_file_atomic(o_.dir, name, text);
        if (err) {
          res = export_result::failure;
          if (errors_.failed(err))
            emitf(o_.log, log_level::warn,
                  "cannot write {}/{}: {} (metrics kept in memory, retrying at the next export)", o_.dir, name,
                  detail::describe_error(err));
        } else {
          if (errors_.succeeded()) emitf(o_.log, log_level::info, "writing {} again", o_.dir);
          written_.insert(name);
        }
      }
      failed_exports_ += res == export_result::failure;
      return res;
    } catch (...) {
      ++failed_exports_;
      return export_result::failure;
    }
  }

  void shutdown() noexcept {
    if (!o_.remove_on_shutdown) return;
    for (const auto& n : written_) {
      ::unlink((o_.dir + "/" + n).c_str());
      detail::release_file_name(o_.dir, n);
    }
  }
  std::string_view name() const noexcept { return "prometheus-textfile"; }
  /// Exports in which some file could not be written.
  std::uint64_t failed_exports() const noexcept { return failed_exports_; }

 private:
  /// Whether `<dir>/<name>` exists and belongs to another user: we never replace it.
  bool foreign(const std::string& name) const {
    struct stat st {};
    return ::lstat((o_.dir + "/" + name).c_str(), &st) == 0 && st.st_uid != ::geteuid();
  }

  /// The name this process writes for GPU `uuid`: the GPU and job's own name, unless another live
  /// process of this job writes it (two processes on one GPU: flock, detail/file_claim.hpp) or a
  /// file there belongs to another user; then `<name>.pid<pid>`, and if that is taken too a random
  /// suffix (one warning per GPU and reason). Checked at every export (one lstat), kept otherwise.
  std::string file_name_for(const std::string& uuid, const std::string& job) {
    std::string& chosen = names_[uuid + '\n' + job];
    if (!chosen.empty() && !foreign(chosen)) return chosen;
    const std::string base = prom_file_name(uuid, job);
    const std::string pid = ".pid" + std::to_string(::getpid());
    std::string why;
    for (int attempt = 0; attempt < 3; ++attempt) {
      const std::string name = attempt == 0 ? base
                               : attempt == 1
                                   ? prom_file_name(uuid, job, pid)
                                   : prom_file_name(uuid, job, pid + "." + detail::random_hex().substr(0, 8));
      if (foreign(name)) {
        if (why.empty()) why = "a file there belongs to another user (not replaced)";
        continue;
      }
      if (!detail::claim_file_name(o_.dir, name)) {
        if (why.empty()) why = "another live process writes it (same GPU and job)";
        continue;
      }
      if (name != base && warned_.insert(uuid + why).second)
        emitf(o_.log, log_level::warn, "{}/{}: {}; this process writes {}", o_.dir, base, why, name);
      return chosen = name;
    }
    return chosen = prom_file_name(uuid, job, pid + "." + detail::random_hex());  // all taken: one of our own
  }

  /// One warning per directory and process (a re-initialized plugin does not repeat it).
  void check_dir_once() {
    if (dir_checked_) return;
    struct stat st {};
    if (::stat(o_.dir.c_str(), &st) != 0) return;  // not there yet: the first write creates it, then we look
    dir_checked_ = true;
    static std::mutex mu;
    static auto* warned = new std::set<std::string>();  // never destroyed: exporter threads may outlive statics
    {
      std::lock_guard lk(mu);
      if (!warned->insert(o_.dir).second) return;
    }
    const std::string why = shared_dir_problem(o_.dir);
    if (!why.empty())
      emitf(o_.log, log_level::warn,
            "{} {}; use a group-owned setgid directory with the sticky bit, not world-writable "
            "(deploy/slurm/setup-textfile-dir.sh)",
            o_.dir, why);
  }

  prom_textfile_options o_;
  detail::failure_log errors_;
  std::uint64_t failed_exports_ = 0;
  std::set<std::string> written_;
  std::map<std::string, std::string> names_;  ///< uuid + job -> the name this process writes
  std::set<std::string> warned_;
  detail::owner_stamp me_{};
  bool dir_checked_ = false;
};

using prom_textfile_sink = basic_prom_textfile_sink<>;

}  // namespace ncclinsp
