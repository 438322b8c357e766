#pragma once
/// prom_textfile_sink: one `nccl_inspector_metrics_<uuid>.prom` per GPU for node_exporter's textfile
/// collector, replaced atomically (temp file + rename) on every export. When the directory is
/// missing it is created; when it cannot be written (unwritable, a regular file, disk full) the
/// sink warns once per distinct error, keeps nothing on disk half-written, and writes the current
/// values on the next export that succeeds (the collector holds the data, so nothing is lost).
/// Symlinks are never followed (detail/atomic_file.hpp): one planted at a file's name is replaced
/// by the new file, one at a temporary name makes that export fail with a warning.
/// Thread-safety: exporter thread only (cold path).

#include <cctype>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include <unistd.h>

#include "ncclinsp/detail/atomic_file.hpp"
#include "ncclinsp/detail/failure_log.hpp"
#include "ncclinsp/detail/file_claim.hpp"
#include "ncclinsp/format/prometheus_text.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

struct prom_textfile_options {
  std::string dir = ".";
  /// Delete the files at shutdown. Default false: the final values stay for the last scrapes;
  /// `ncclinsp_export_timestamp_seconds` and `ncclinsp_info{final="1"}` mark them as finished.
  bool remove_on_shutdown = false;
  /// Write Inspector's four gauge families too (for existing Inspector dashboards).
  bool compat_gauges = true;
  log_fn log{};
  /// Labels, size buckets, histogram and the per-file line cap (docs/scale.md).
  format::cardinality card{};
};

/// File name for a GPU: characters outside [A-Za-z0-9._-] become '_'.
inline std::string prom_file_name(std::string_view uuid) {
  std::string s = "nccl_inspector_metrics_";
  for (char c : uuid) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') ? c : '_';
  return s + ".prom";
}

template <class NativeBucketer = pow2_bucketer>
class basic_prom_textfile_sink {
 public:
  explicit basic_prom_textfile_sink(prom_textfile_options o) : o_(std::move(o)) { detail::ignore_sigxfsz(); }

  export_result write(const snapshot& snap) noexcept {
    try {
      export_result res = export_result::success;
      for (const auto& uuid : format::gpu_uuids(snap)) {
        std::string text;
        format::write_prometheus<NativeBucketer>(text, snap, uuid, o_.compat_gauges, o_.card);
        const std::string name = file_name_for(uuid);
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
    for (const auto& n : written_) ::unlink((o_.dir + "/" + n).c_str());
  }
  std::string_view name() const noexcept { return "prometheus-textfile"; }
  /// Exports in which some file could not be written.
  std::uint64_t failed_exports() const noexcept { return failed_exports_; }

 private:
  /// The GPU's file name, or, when another live process on this node already writes it (two
  /// processes on one GPU), `nccl_inspector_metrics_<uuid>-pid<pid>.prom` (one warning).
  std::string file_name_for(const std::string& uuid) {
    std::string name = prom_file_name(uuid);
    if (detail::claim_file_name(o_.dir, name)) return name;
    name = prom_file_name(uuid + "-pid" + std::to_string(::getpid()));
    if (warned_shared_.insert(uuid).second)
      emitf(o_.log, log_level::warn, "another process writes {}/{} (same GPU); this one writes {}", o_.dir,
            prom_file_name(uuid), name);
    return name;
  }

  prom_textfile_options o_;
  detail::failure_log errors_;
  std::uint64_t failed_exports_ = 0;
  std::set<std::string> written_;
  std::set<std::string> warned_shared_;
};

using prom_textfile_sink = basic_prom_textfile_sink<>;

}  // namespace ncclinsp
