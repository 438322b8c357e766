#pragma once
// ncclinsp-report: reads the JSON-lines files of all ranks of a job (ncclinsp's JSON mode or NVIDIA
// Inspector's, v4.0 to v4.3), matches ops across ranks by (communicator, function, sequence number),
// summarizes bus bandwidth per collective x message size and attributes slowness to ranks and hosts.
// Library part (tested by tests/report); main.cpp is the CLI.

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace ncclinsp::report {

/// One per-op record of one rank (a `coll_perf` or `p2p_perf` line).
struct op_rec {
  std::uint32_t comm = 0;  ///< index into job::comms
  std::uint32_t rank = 0;  ///< rank within the communicator
  std::uint32_t host = 0;  ///< index into job::hosts
  std::uint32_t fn = 0;    ///< index into job::funcs
  bool p2p = false;
  bool valid = true;
  std::int32_t peer = -1;
  std::uint64_t sn = 0;
  std::uint64_t bytes = 0;
  double exec_us = 0;
  double busbw = 0;
  std::uint64_t start_ns = 0;  ///< 0 = absent (Inspector, ncclinsp < start_ts)
  std::uint64_t end_ns = 0;    ///< 0 = absent (Inspector)
};

struct comm_info {
  std::string id;         ///< as printed ("0x..."), after re-mapping truncated ids
  std::string name;       ///< comm_name ("unknown" when absent)
  int n_ranks = 0;
  int nnodes = 0;
  bool id_truncated = false;  ///< Inspector's 14-digit id
};

/// Counted warnings, printed once per kind.
struct warnings {
  struct entry {
    std::uint64_t count = 0;
    std::string first;  ///< where/what for the first occurrence
  };
  std::map<std::string, entry> by_kind;
  void add(const std::string& kind, const std::string& where, std::uint64_t n = 1) {
    auto& e = by_kind[kind];
    if (e.count == 0) e.first = where;
    e.count += n;
  }
  std::uint64_t count(const std::string& kind) const {
    auto it = by_kind.find(kind);
    return it == by_kind.end() ? 0 : it->second.count;
  }
};

struct job {
  std::vector<comm_info> comms;
  std::vector<std::string> hosts;  ///< metadata.node, else metadata.hostname
  std::vector<std::string> funcs;
  std::vector<op_rec> ops;
  std::map<std::string, std::uint64_t> versions;  ///< inspector_output_format_version -> lines
  std::uint64_t files = 0, lines = 0, dump_stats_lines = 0;
  std::uint64_t comms_used = 0;     ///< communicators with op records (after id re-mapping)
  std::uint64_t dropped_total = 0;  ///< sum over the last dump_stats of each (comm, rank, host, pid)
  warnings warn;
};

/// Reads files and directory trees (recursively: *.log, *.jsonl and rotated *.log.N / *.jsonl.N).
job read_job(const std::vector<std::string>& inputs);
/// After reading: re-maps truncated ids onto full ones, de-duplicates, etc.
void finish_job(job& j);

struct stats {
  std::uint64_t n = 0;
  double p50 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};
stats compute_stats(std::vector<double> v);

/// Per (communicator, function, message size) row.
struct size_row {
  std::uint32_t comm = 0, fn = 0;
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;      ///< distinct matched ops (comm, fn, sn)
  std::uint64_t records = 0;  ///< rank records
  std::uint64_t invalid = 0;
  stats busbw;                ///< over valid rank records
  stats exec_us;
  double time_us = 0;         ///< sum of exec time over rank records
  double time_share = 0;      ///< of all records' exec time
};

struct rank_row {
  std::uint32_t comm = 0, rank = 0, host = 0;
  std::uint64_t records = 0;
  double rel_busbw = 1;      ///< median of (record busbw / class median busbw), class = comm x fn x size
  double rel_exec = 1;       ///< median of (record exec time / class median exec time)
  double rel_in_op = 1;      ///< median of (record busbw / median busbw of the same matched op)
  double late_us = 0;        ///< mean arrival lateness in matched ops (start, or end when no start)
  std::uint64_t slow_ops = 0;  ///< matched ops where this rank was below (1 - threshold) of the op median
};

struct host_row {
  std::uint32_t host = 0;
  std::uint64_t ranks = 0, records = 0, slow_ops = 0;
  double rel_busbw = 1, rel_in_op = 1, rel_exec = 1, late_us = 0;
  double deviation = 0;  ///< rel_in_op - 1 (negative: slower than the job)
  bool straggler = false;
};

struct analysis {
  std::vector<size_row> sizes;   ///< sorted by time share
  std::vector<rank_row> ranks;   ///< sorted by rel_in_op ascending
  std::vector<host_row> hosts;   ///< sorted by deviation ascending
  std::uint64_t matched_ops = 0, incomplete_ops = 0, single_rank_ops = 0;
  std::string skew_source;       ///< "start_ts_ns", "end_ts_ns" or "none"
  double threshold = 0.1;
  double total_time_us = 0;
  std::vector<std::string> missing_ranks;  ///< "comm tp 0x..: ranks 3,5 never seen"
};

struct analysis_options {
  double threshold = 0.10;  ///< a host is a straggler when its in-op busbw is below 1 - threshold
  std::uint64_t min_bytes = 0;
};

analysis analyze(job& j, const analysis_options& o);

void write_text(std::ostream& os, const job& j, const analysis& a, int top_ranks);
void write_csv_sizes(std::ostream& os, const job& j, const analysis& a);
void write_csv_ranks(std::ostream& os, const job& j, const analysis& a);
void write_csv_hosts(std::ostream& os, const job& j, const analysis& a);
void write_json(std::ostream& os, const job& j, const analysis& a);
void write_html(std::ostream& os, const job& j, const analysis& a);
void write_warnings(std::ostream& os, const job& j);

std::string human_bytes(std::uint64_t b);  ///< 1024-based: "32 MiB"

}  // namespace ncclinsp::report
