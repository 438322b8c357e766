#pragma once
/// json_sink: JSON lines in NVIDIA Inspector's layout (format/inspector_json.hpp), appended to one
/// file per process (never truncated on re-init, unlike Inspector). Every record in a snapshot
/// reaches the file or is counted: on a write error the lines wait in memory (up to
/// `max_pending_bytes`) and are retried at the next export; beyond that they are dropped and
/// counted in the next `dump_stats` record. With `max_file_bytes` the file rotates to `<file>.1`;
/// records discarded with an older `.1` are counted the same way. The file is never opened through
/// a symlink (O_NOFOLLOW): a link planted at its name is refused with one warning, the export
/// counts as failed and the lines wait in memory as for any write error.
/// Thread-safety: exporter thread only (cold path).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ncclinsp/detail/atomic_file.hpp"
#include "ncclinsp/detail/failure_log.hpp"
#include "ncclinsp/detail/host.hpp"
#include "ncclinsp/format/inspector_json.hpp"
#include "ncclinsp/log.hpp"
#include "ncclinsp/sink.hpp"

namespace ncclinsp {

struct json_sink_options {
  std::string dir = ".";
  std::string file_name{};           ///< default "<hostname>-pid<pid>.log" (Inspector's name)
  std::uint64_t max_file_bytes = 0;  ///< 0 = no rotation
  std::uint64_t max_pending_bytes = 64ull << 20;
  bool verbose = false;  ///< Inspector's event_trace_sn/_ts for records that carry an op_trace
  log_fn log{};
};

class json_sink {
 public:
  explicit json_sink(json_sink_options o) : o_(std::move(o)) { detail::ignore_sigxfsz(); }

  export_result write(const snapshot& snap) noexcept {
    const std::size_t mark = pending_.size();
    const std::uint64_t lines = pending_lines_;
    try {
      const auto unreported = unreported_;
      try {
        format_records(snap);
        for (std::uint32_t i = 0; i < snap.comms.size(); ++i) {
          const auto& c = snap.comms[i];
          std::uint64_t drops = 0;
          for (auto d : c.dropped) drops += d;
          const std::uint64_t key = comm_key(c.desc);
          auto& seen = last_drops_[key];
          const auto un = unreported_.find(key);
          const std::uint64_t written = un == unreported_.end() ? 0 : un->second;
          if (written || drops != seen || snap.final || c.newly_retired || dropped_by_sink_) {
            format::write_dump_stats(pending_, snap, c, written, dropped_by_sink_, dropped_total_);
            ++pending_lines_;
            seen = drops;
          }
          const std::size_t before = pending_.size();
          format::write_proxy_stats(pending_, snap, i);
          pending_lines_ += pending_.size() != before;
        }
      } catch (...) {  // no half-written line stays pending
        unreported_ = unreported;
        throw;
      }
      unreported_.clear();                   // reported now; those of communicators no longer exported with them
      reported_by_sink_ = dropped_by_sink_;  // in these dump_stats; cleared once they are written
      return counted(flush_pending());
    } catch (...) {
      pending_.resize(std::min(mark, pending_.size()));
      pending_lines_ = lines;
      return counted(export_result::failure);
    }
  }

  /// Records drained between exports (records-only snapshots): written now; their count goes into
  /// each communicator's next `dump_stats` record.
  export_result write_records(const snapshot& snap) noexcept {
    const std::size_t mark = pending_.size();
    try {
      format_records(snap);
      return counted(flush_pending());
    } catch (...) {
      pending_.resize(std::min(mark, pending_.size()));  // no half-written line stays pending
      ++failed_exports_;
      return export_result::failure;
    }
  }

  void shutdown() noexcept {
    if (!pending_.empty() && flush_pending() != export_result::success)
      emitf(o_.log, log_level::warn, "json sink: {} records could not be written at shutdown", pending_lines_);
  }
  std::string_view name() const noexcept { return "json"; }
  /// Records lost so far (write errors beyond the pending limit, rotation).
  std::uint64_t dropped() const noexcept { return dropped_total_; }
  /// Exports whose lines could not all be written (they stay pending).
  std::uint64_t failed_exports() const noexcept { return failed_exports_; }
  std::string path() const {
    if (!o_.file_name.empty()) return o_.dir + "/" + o_.file_name;
    return o_.dir + "/" + detail::host_name() + "-pid" + std::to_string(::getpid()) + ".log";
  }

 private:
  export_result flush_pending() {
    if (pending_.empty()) return export_result::success;
    int err = detail::make_dirs(o_.dir);
    const std::string p = path();
    if (!err && o_.max_file_bytes) {
      struct stat st {};  // lstat: a symlink is never rotated (the open below refuses it)
      if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          static_cast<std::uint64_t>(st.st_size) + pending_.size() > o_.max_file_bytes && st.st_size > 0) {
        dropped_by_sink_ += rotated_lines_;  // the previous .1 is discarded now
        dropped_total_ += rotated_lines_;
        if (::rename(p.c_str(), (p + ".1").c_str()) == 0) {
          rotated_lines_ = file_lines_;
          file_lines_ = 0;
        }
      }
    }
    if (!err) {
      const int fd = detail::open_nofollow(p, O_APPEND);
      if (fd < 0) {
        err = errno;
      } else {
        // Write whole lines only: on a short write keep the remainder pending.
        std::size_t done = 0;
        err = detail::write_all(fd, pending_, &done);
        if (err && done) {  // cut a torn line: truncate back to the last complete line we wrote
          const std::size_t keep =
              pending_.rfind('\n', done - 1) == std::string::npos ? 0 : pending_.rfind('\n', done - 1) + 1;
          struct stat st {};
          if (::fstat(fd, &st) == 0) (void)::ftruncate(fd, st.st_size - static_cast<off_t>(done - keep));
          done = keep;
        }
        ::close(fd);
        const auto lines = done == pending_.size()
                               ? pending_lines_
                               : static_cast<std::uint64_t>(std::count(
                                     pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done), '\n'));
        file_lines_ += lines;
        pending_lines_ -= lines;
        pending_.erase(0, done);
      }
    }
    if (!err) {
      if (errors_.succeeded()) emitf(o_.log, log_level::info, "json sink: writing {} again", p);
      // Only the drops already reported in the lines just written: those of a rotation in this
      // flush (the discarded .1) go into the next export's dump_stats.
      dropped_by_sink_ -= std::min(dropped_by_sink_, reported_by_sink_);
      reported_by_sink_ = 0;
      return export_result::success;
    }
    if (errors_.failed(err))
      emitf(o_.log, log_level::warn, "json sink: cannot write {}: {} (records kept in memory, retrying)", p,
            detail::describe_error(err));
    if (pending_.size() > o_.max_pending_bytes) {  // bounded memory: drop the oldest lines, counted
      const std::size_t cut = pending_.find('\n', pending_.size() - o_.max_pending_bytes);
      std::uint64_t lines = 0;
      for (std::size_t i = 0; i <= cut && i < pending_.size(); ++i) lines += pending_[i] == '\n';
      pending_.erase(0, cut == std::string::npos ? pending_.size() : cut + 1);
      pending_lines_ -= lines;
      dropped_by_sink_ += lines;
      dropped_total_ += lines;
    }
    return export_result::failure;
  }

  export_result counted(export_result r) noexcept {
    failed_exports_ += r == export_result::failure;
    return r;
  }

  static std::uint64_t comm_key(const comm_desc& d) noexcept {
    return d.hash ^ (static_cast<std::uint64_t>(d.rank) << 48);
  }

  /// Appends the snapshot's records to the pending lines (header and metadata formatted once per
  /// communicator) and counts them per communicator in unreported_. pending_ keeps its capacity,
  /// so a steady stream of drains formats into memory that is already mapped.
  void format_records(const snapshot& snap) {
    if (snap.records.empty()) return;
    std::vector<std::string> prefix(snap.comms.size());
    std::vector<std::uint64_t> per_comm(snap.comms.size(), 0);
    for (const auto& r : snap.records) {
      if (prefix[r.comm].empty()) prefix[r.comm] = format::inspector_record_prefix(snap, snap.comms[r.comm].desc);
      format::write_inspector_record(pending_, snap, r, o_.verbose, prefix[r.comm]);
      ++per_comm[r.comm];
    }
    pending_lines_ += snap.records.size();
    for (std::uint32_t i = 0; i < snap.comms.size(); ++i)
      if (per_comm[i]) unreported_[comm_key(snap.comms[i].desc)] += per_comm[i];
  }

  json_sink_options o_;
  std::map<std::uint64_t, std::uint64_t> unreported_;  // records written since their communicator's last dump_stats
  std::string pending_;
  std::uint64_t pending_lines_ = 0, file_lines_ = 0, rotated_lines_ = 0;
  std::uint64_t dropped_by_sink_ = 0, dropped_total_ = 0, reported_by_sink_ = 0, failed_exports_ = 0;
  detail::failure_log errors_;
  std::map<std::uint64_t, std::uint64_t> last_drops_;
};

}  // namespace ncclinsp
