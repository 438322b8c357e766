#pragma once
// ncclinsp-report hang: merges the state dumps of every rank (include/ncclinsp/format/state_dump.hpp,
// written by the plugin's state dumper) and names, per communicator, the rank(s) a hang waits for:
// ranks in flight on sequence number N against ranks that never joined N (their last completed
// collective is below N and nothing of theirs is stuck elsewhere), ranks whose dump is missing or much
// older than their peers' (the process is gone or stopped writing), or every rank inside N (a fault in
// the collective or the network). A rank stuck in another communicator is a victim: the verdict points
// at that communicator. docs/report.md, "ncclinsp-report hang".

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace ncclinsp::report::hang {

struct op {
  std::uint64_t seq = 0;
  std::string fn;
  std::uint64_t bytes = 0;
  int peer = -1;
  std::string state;
  std::uint64_t start_ns = 0, end_ns = 0, gpu_ns = 0;
  double age_s = 0;
  std::uint32_t channels = 0;
  std::vector<int> ch_started, ch_ended;
  bool p2p() const { return fn == "Send" || fn == "Recv"; }
};

struct comm_view {
  std::string name, hash;
  int rank = 0, nranks = 0, nnodes = 0;
  std::map<std::string, std::int64_t> last_seq;  ///< per function: the last completed sequence number
  std::uint64_t inflight_total = 0;
  double oldest_age_s = 0;
  std::vector<op> completed, inflight;
  bool proxy = false;
  std::uint64_t proxy_steps = 0;
  double proxy_idle_s = 0;
};

/// One dump file: one GPU of one process.
struct dump {
  std::string path, reason, node, hostname, job_id, uuid;
  long pid = 0;
  int gpu = -1;
  std::uint64_t time_ns = 0;
  std::uint32_t warn_after_s = 0, every_s = 0;
  std::vector<comm_view> comms;
  int global_rank = -1;  ///< its rank on the largest communicator of its job (analysis)
  std::string global_comm;
};

struct dumps {
  std::vector<dump> files;
  std::vector<std::string> errors;  ///< files that could not be read (path: why)
};

/// Reads every `*.state.json` file under the inputs (files or directories, recursively).
dumps read_dumps(const std::vector<std::string>& inputs);

struct options {
  double min_age_s = -1;      ///< an op in flight this long is stuck (-1: each dump's warn_after_s)
  double stale_after_s = -1;  ///< a dump older than the job's newest by this much is stale (-1: 3 x every_s + 5)
  std::string job;            ///< only the dumps of this job key (empty: all)
};

/// What one rank of a hung communicator is doing.
struct rank_state {
  int rank = 0;
  int dump = -1;  ///< index into dumps::files, -1: none
  /// inside (in flight on N), passed (completed N), behind (in flight on an earlier one), not_joined (the
  /// culprit: nothing in flight anywhere), victim (stuck in another communicator), gone (its dump is stale),
  /// missing (no dump).
  std::string what;
  double age_s = 0;        ///< inside/behind/victim: how long its op has been in flight
  std::string other_comm;  ///< victim: the communicator it is stuck in ("name 0xhash")
  std::uint64_t other_seq = 0;
  std::string other_fn;
  double dump_behind_s = 0;  ///< gone: how much older its dump is than the newest of the job
  std::string progress;      ///< inside: channels started/ended, "8/8 started, 3/8 ended"
};

/// One hung communicator.
struct comm_verdict {
  std::string name, hash;
  int nranks = 0;
  std::uint64_t seq = 0;  ///< N: the sequence number (of function fn) of the oldest op a rank is stuck on
  std::string fn;
  bool p2p = false;
  double wait_s = 0;  ///< the longest any rank has been in flight on it
  /// never_joined, process_gone, fault_in_collective, waits_on_other_comm, behind
  std::string kind;
  std::vector<rank_state> ranks;
  std::vector<int> culprits;  ///< ranks (indices into `ranks`) the kind names
  std::string waits_on;       ///< waits_on_other_comm: the communicators its ranks are stuck in
};

/// The verdict for one job (dumps connected by a shared communicator).
struct job_verdict {
  std::string job_id;
  std::vector<int> files;  ///< indices into dumps::files
  std::size_t processes = 0, nodes = 0;
  std::uint64_t newest_ns = 0;
  double min_age_s = 0, stale_after_s = 0;
  std::vector<comm_verdict> comms;  ///< hung communicators, root causes first
  bool hang = false;
};

std::vector<job_verdict> analyze(dumps& d, const options& o);

void write_text(std::ostream& os, const dumps& d, const std::vector<job_verdict>& v);
void write_json(std::ostream& os, const dumps& d, const std::vector<job_verdict>& v);

}  // namespace ncclinsp::report::hang
