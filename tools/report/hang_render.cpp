// ncclinsp-report hang: the verdict as text and JSON.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "hang.hpp"
#include "ncclinsp/format/json_writer.hpp"
#include "report.hpp"

namespace ncclinsp::report::hang {
namespace {

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

/// "node1 GPU 1 (GPU-...), global rank 5, pid 42" for a rank with a dump.
std::string where(const dumps& d, int f) {
  if (f < 0) return "no dump: node, GPU and global rank unknown";
  const dump& x = d.files[f];
  std::string s = (x.node.empty() ? x.hostname : x.node) + " GPU " + std::to_string(x.gpu);
  if (!x.uuid.empty()) s += " (" + x.uuid + ")";
  if (x.global_rank >= 0) s += ", global rank " + std::to_string(x.global_rank) + " (" + x.global_comm + ")";
  return s + ", pid " + std::to_string(x.pid);
}

const comm_view* view_of(const dumps& d, int f, const std::string& hash) {
  if (f < 0) return nullptr;
  for (const auto& c : d.files[f].comms)
    if (c.hash == hash) return &c;
  return nullptr;
}

/// What the rank last did on the communicator: its last completed op, and how long before its dump.
std::string last_done(const dumps& d, int f, const std::string& hash) {
  const comm_view* v = view_of(d, f, hash);
  if (!v || v->completed.empty()) return "no completed op on it in its dump";
  const op& o = v->completed.back();
  std::string s = "last completed " + o.fn + " seq " + std::to_string(o.seq);
  if (o.bytes) s += " (" + human_bytes(o.bytes) + ")";
  if (d.files[f].time_ns > o.end_ns)
    s += ", " + secs(static_cast<double>(d.files[f].time_ns - o.end_ns) / 1e9) + " before its dump";
  return s;
}

std::string rank_line(const dumps& d, const comm_verdict& c, const rank_state& r) {
  std::string s = "rank " + std::to_string(r.rank) + " [" + where(d, r.dump) + "]: ";
  if (r.what == "not_joined") {
    s += "never joined " + c.fn + " seq " + std::to_string(c.seq);
    if (const comm_view* v = view_of(d, r.dump, c.hash)) {
      const auto l = v->last_seq.find(c.fn);
      s += l == v->last_seq.end() ? " (no " + c.fn + " completed)"
                                  : " (its last: seq " + std::to_string(l->second) + ")";
    }
    s += "; " + last_done(d, r.dump, c.hash) + "; nothing in flight anywhere";
  } else if (r.what == "gone")
    s += "its process is gone or stopped writing (its dump is " + secs(r.dump_behind_s) +
         " older than the newest of the job); " + last_done(d, r.dump, c.hash);
  else if (r.what == "missing")
    s += "no dump from it (its process is gone, or never wrote one)";
  else if (r.what == "victim")
    s += "waits in " + r.other_comm + " " + r.other_fn + " seq " + std::to_string(r.other_seq) + " for " +
         secs(r.age_s) + " (a victim: see that communicator)";
  else if (r.what == "inside") {
    s += "inside for " + secs(r.age_s) + ", " + r.progress;
    if (const comm_view* v = view_of(d, r.dump, c.hash); v && v->proxy)
      s += "; network steps: " + std::to_string(v->proxy_steps) + ", none for " + secs(v->proxy_idle_s);
  } else if (r.what == "behind")
    s += "in flight on the earlier " + r.other_fn + " seq " + std::to_string(r.other_seq) + " for " + secs(r.age_s);
  else
    s += r.what;
  return s;
}

std::string ranks_list(const comm_verdict& c, const char* what) {
  std::string s;
  int n = 0, lo = -2, prev = -2;
  auto flush = [&] {
    if (lo < 0) return;
    s += (s.empty() ? "" : ",") + std::to_string(lo) + (prev > lo ? "-" + std::to_string(prev) : "");
  };
  for (const auto& r : c.ranks)
    if (r.what == what) {
      ++n;
      if (r.rank != prev + 1) {
        flush();
        lo = r.rank;
      }
      prev = r.rank;
    }
  flush();
  return n ? std::to_string(n) + " (" + s + ")" : std::string();
}

std::string headline(const dumps& d, const comm_verdict& c) {
  const std::string comm = c.name + " " + c.hash + " " + c.fn + " seq " + std::to_string(c.seq);
  if (c.kind == "fault_in_collective")
    return "every rank of " + comm + " is inside it (" + secs(c.wait_s) + "): a fault in the collective or the network";
  if (c.kind == "waits_on_other_comm") return comm + ": its missing ranks wait in " + c.waits_on;
  std::string s;
  for (int i : c.culprits) {
    const rank_state& r = c.ranks[static_cast<std::size_t>(i)];
    s += s.empty() ? "" : "; ";
    s += "rank " + std::to_string(r.rank) + " of " + c.name;
    s += r.what == "not_joined" ? " never joined " + comm
         : r.what == "behind"   ? " is behind on " + comm
                                : "'s process is gone or stopped writing (" + comm + ")";
    s += " [" + where(d, r.dump) + "]";
  }
  return s;
}

}  // namespace

void write_text(std::ostream& os, const dumps& d, const std::vector<job_verdict>& v) {
  for (const auto& jv : v) {
    os << "Job " << jv.job_id << ": " << jv.files.size() << " dumps (GPUs) from " << jv.processes << " processes on "
       << jv.nodes << " nodes; stuck = in flight >= " << secs(jv.min_age_s) << "; a dump is stale "
       << (jv.stale_after_s < 1e300 ? secs(jv.stale_after_s) + " behind the newest"
                                    : std::string("never (no heartbeat)"))
       << "\n";
    if (!jv.hang) {
      os << "Verdict: no hang (no op in flight for " << secs(jv.min_age_s) << " in the dumps)\n";
      continue;
    }
    os << "Verdict: " << headline(d, jv.comms.front()) << "\n";
    for (const auto& c : jv.comms) {
      os << "\n"
         << c.name << " " << c.hash << " (" << c.nranks << " ranks) " << c.fn << " seq " << c.seq << ": " << c.kind;
      if (!c.waits_on.empty()) os << " (" << c.waits_on << ")";
      os << "\n";
      if (auto s = ranks_list(c, "inside"); !s.empty()) os << "  inside: " << s << ", up to " << secs(c.wait_s) << "\n";
      if (auto s = ranks_list(c, "passed"); !s.empty()) os << "  completed it: " << s << "\n";
      for (const auto& r : c.ranks)
        if (r.what != "inside" && r.what != "passed") os << "  " << rank_line(d, c, r) << "\n";
      if (c.kind == "fault_in_collective")
        for (const auto& r : c.ranks)
          if (r.what == "inside") os << "  " << rank_line(d, c, r) << "\n";
    }
  }
  for (const auto& e : d.errors) std::cerr << "ncclinsp-report hang: skipped " << e << "\n";
}

void write_json(std::ostream& os, const dumps& d, const std::vector<job_verdict>& v) {
  std::string out;
  format::json_writer j(out);
  bool hang = false;
  for (const auto& jv : v) hang |= jv.hang;
  j.begin_object();
  j.key("hang").value(hang);
  j.key("jobs").begin_array();
  for (const auto& jv : v) {
    j.begin_object();
    j.key("job_id").value(jv.job_id);
    j.key("dumps").value(jv.files.size());
    j.key("processes").value(jv.processes);
    j.key("nodes").value(jv.nodes);
    j.key("newest_ns").value(jv.newest_ns);
    j.key("min_age_s").value(jv.min_age_s);
    j.key("hang").value(jv.hang);
    if (jv.hang) j.key("verdict").value(headline(d, jv.comms.front()));
    j.key("comms").begin_array();
    for (const auto& c : jv.comms) {
      j.begin_object();
      j.key("name").value(c.name);
      j.key("hash").value(c.hash);
      j.key("nranks").value(c.nranks);
      j.key("seq").value(c.seq);
      j.key("op").value(c.fn);
      j.key("p2p").value(c.p2p);
      j.key("kind").value(c.kind);
      j.key("wait_s").value(c.wait_s);
      if (!c.waits_on.empty()) j.key("waits_on").value(c.waits_on);
      j.key("culprits").begin_array();
      for (int i : c.culprits) j.value(c.ranks[static_cast<std::size_t>(i)].rank);
      j.end_array();
      j.key("ranks").begin_array();
      for (const auto& r : c.ranks) {
        j.begin_object();
        j.key("rank").value(r.rank);
        j.key("state").value(r.what);
        if (r.dump >= 0) {
          const dump& f = d.files[static_cast<std::size_t>(r.dump)];
          j.key("node").value(f.node);
          j.key("gpu").value(f.gpu);
          j.key("uuid").value(f.uuid);
          j.key("pid").value(f.pid);
          j.key("global_rank").value(f.global_rank);
          j.key("dump").value(f.path);
          if (const comm_view* cv = view_of(d, r.dump, c.hash); cv && !cv->completed.empty()) {
            const op& o = cv->completed.back();
            j.key("last_completed").begin_object();
            j.key("seq").value(o.seq).key("op").value(o.fn).key("bytes").value(o.bytes).key("end_ns").value(o.end_ns);
            j.end_object();
          }
        }
        if (r.what == "inside" || r.what == "behind" || r.what == "victim") j.key("age_s").value(r.age_s);
        if (!r.progress.empty()) j.key("progress").value(r.progress);
        if (r.what == "victim") {
          j.key("stuck_in").value(r.other_comm);
          j.key("stuck_seq").value(r.other_seq);
          j.key("stuck_op").value(r.other_fn);
        }
        if (r.what == "gone") j.key("dump_behind_s").value(r.dump_behind_s);
        j.end_object();
      }
      j.end_array();
      j.end_object();
    }
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.key("skipped").begin_array();
  for (const auto& e : d.errors) j.value(e);
  j.end_array();
  j.end_object();
  os << out << "\n";
}

}  // namespace ncclinsp::report::hang
