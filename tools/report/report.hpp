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
  std::string id;    ///< as printed ("0x..."), after re-mapping truncated ids
  std::string name;  ///< comm_name ("unknown" when absent)
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

/// Cumulative network proxy totals of one (communicator, rank, process, peer, direction): the last
/// `proxy_stats` line of it (ncclinsp's JSON sink with NCCLINSP_PROXY=1).
struct proxy_rec {
  std::uint32_t comm = 0, rank = 0, host = 0;
  std::int32_t peer = -1;
  bool send = false;
  std::uint64_t network_ns = 0;  ///< send: SendWait (handed to the network until complete); recv: RecvWait
  std::uint64_t bytes = 0, steps = 0;
};

struct job {
  std::vector<proxy_rec> proxy;
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
  stats busbw;  ///< over valid rank records
  stats exec_us;
  double time_us = 0;     ///< sum of exec time over rank records
  double time_share = 0;  ///< of all records' exec time
};

struct rank_row {
  std::uint32_t comm = 0, rank = 0, host = 0;
  std::uint64_t records = 0;
  double rel_busbw = 1;       ///< median of (record busbw / class median busbw), class = comm x fn x size
  double rel_exec = 1;        ///< median of (record exec time / class median exec time)
  double rel_in_op = 1;       ///< median of (record busbw / median busbw of the same matched op)
  double rel_exec_in_op = 1;  ///< 10th percentile of (record exec time / median exec time of the same matched op)
  /// Mean arrival lateness in matched ops spanning hosts: op median exec time - own exec time. Clock-free: the
  /// ranks of one collective end together (sim/README.md "Timing model"), so exec time = common end - own arrival.
  double late_us = 0;
  std::uint64_t slow_ops =
      0;                      ///< matched ops where this rank arrived late: exec below (1 - threshold) of the op median
  std::uint64_t matched = 0;  ///< matched ops spanning hosts with this rank
  bool straggler = false;     ///< arrives late in >= 10% of its matched ops: a compute straggler (its peers wait)
};

struct host_row {
  std::uint32_t host = 0;
  std::uint64_t ranks = 0, records = 0, slow_ops = 0;
  double rel_busbw = 1, rel_in_op = 1, rel_exec = 1;
  double late_us = 0;      ///< the largest late_us of the host's ranks (its latest GPU)
  double deviation = 0;    ///< lowest rel_exec_in_op of the host's ranks - 1 (negative: a GPU that arrives late)
  bool straggler = false;  ///< holds a straggler rank
};

/// Bus bandwidth over the run per series (communicator name, NVLink-only ones per host; and per host), in
/// fixed time bins of the ops' GPU end timestamps, with the incidents: runs of bins where a series fell below
/// (1 - threshold) of its baseline (median of the first quarter of the bins).
struct timeline {
  struct series {
    std::string name;           ///< "fsdp", "dp0", "tp@node1", or a host name
    bool host = false;          ///< a per-host series
    int nnodes = 0;             ///< communicator series: its n_nodes
    std::vector<double> busbw;  ///< per bin, GB/s; < 0 = no op in the bin
    double baseline = 0;
  };
  struct incident {
    std::size_t first_bin = 0, last_bin = 0;
    std::vector<std::string> degraded;  ///< communicator series below threshold during it
    std::string kind;                   ///< network | nvlink | straggler | unknown
    std::string culprit;                ///< host, rank or "fabric"/"" when not localized
    std::string detail;
  };
  double bin_s = 0;
  std::uint64_t t0_ns = 0;
  std::size_t bins = 0;
  std::vector<series> rows;
  std::vector<incident> incidents;
};

/// Per host: the network wire time per byte of its out edges (its sends' SendWait) and of its in
/// edges (the sends addressed to it), over the whole run, and min(out, in) / the median host's.
/// A slow host or NIC is an endpoint of every slow edge; its ring neighbours have one slow side only
/// (docs/diagnosis.md "Attribution").
struct proxy_host_row {
  std::uint32_t host = 0;
  double out_s_per_gb = 0, in_s_per_gb = 0;
  double ratio = 1;  ///< min(out, in) / median over hosts
};

struct analysis {
  std::vector<proxy_host_row> proxy_hosts;  ///< sorted by ratio, highest first; empty without proxy_stats
  std::vector<size_row> sizes;              ///< sorted by time share
  std::vector<rank_row> ranks;              ///< sorted by rel_in_op ascending
  std::vector<host_row> hosts;              ///< sorted by deviation ascending
  std::uint64_t matched_ops = 0, incomplete_ops = 0, single_rank_ops = 0;
  std::string skew_source;  ///< "start_ts_ns", "end_ts_ns" or "none"
  double threshold = 0.1;
  double total_time_us = 0;
  std::vector<std::string> missing_ranks;  ///< "comm tp 0x..: ranks 3,5 never seen"
  timeline time;
};

struct analysis_options {
  double threshold = 0.10;  ///< a rank arrives late when its exec time is below 1 - threshold of the op median
  std::uint64_t min_bytes = 0;
  std::size_t timeline_bins = 40;  ///< at most this many bins in the timeline
  /// A network incident names the host whose min(out, in) wire time per byte is above this x the
  /// median host's (needs proxy_stats lines and >= 3 hosts).
  double proxy_host_ratio = 1.03;
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
