// ncclinsp-report hang: the verdict from merged state dumps (hang.hpp says what each kind means).
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "hang.hpp"

namespace ncclinsp::report::hang {
namespace {

struct union_find {
  std::vector<int> p;
  explicit union_find(std::size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) { return p[x] == x ? x : p[x] = find(p[x]); }
  void unite(int a, int b) { p[find(a)] = find(b); }
};

/// One communicator of a job: its ranks' dumps (the newest per rank).
struct comm_ranks {
  std::string name;
  int nranks = 0;
  std::map<int, std::pair<int, int>> by_rank;  // rank -> (file, comm index in it)
};

const comm_view& view(const dumps& d, std::pair<int, int> fc) { return d.files[fc.first].comms[fc.second]; }

std::string progress_of(const op& o) {
  const std::size_t n = o.channels ? o.channels : std::max(o.ch_started.size(), o.ch_ended.size());
  return std::to_string(o.ch_started.size()) + "/" + std::to_string(n) + " channels started, " +
         std::to_string(o.ch_ended.size()) + "/" + std::to_string(n) + " ended";
}

}  // namespace

std::vector<job_verdict> analyze(dumps& d, const options& o) {
  std::vector<int> use;
  for (std::size_t i = 0; i < d.files.size(); ++i)
    if (o.job.empty() || d.files[i].job_id == o.job) use.push_back(static_cast<int>(i));
  // Jobs: dumps connected through a communicator they share.
  union_find uf(d.files.size());
  std::map<std::string, int> first_of_hash;
  for (int i : use)
    for (const auto& c : d.files[i].comms) {
      auto [it, fresh] = first_of_hash.try_emplace(c.hash, i);
      if (!fresh) uf.unite(i, it->second);
    }
  std::map<int, std::vector<int>> groups;
  for (int i : use) groups[uf.find(i)].push_back(i);

  std::vector<job_verdict> out;
  for (auto& [root, files] : groups) {
    job_verdict jv;
    jv.files = files;
    std::set<std::string> nodes;
    std::set<std::pair<std::string, long>> procs;
    std::uint32_t every = 0, warn = 0;
    std::map<std::string, std::size_t> job_ids;
    for (int i : files) {
      const dump& f = d.files[i];
      jv.newest_ns = std::max(jv.newest_ns, f.time_ns);
      nodes.insert(f.node);
      procs.insert({f.node + "/" + f.hostname, f.pid});
      every = std::max(every, f.every_s);
      warn = std::max(warn, f.warn_after_s);
      ++job_ids[f.job_id];
    }
    jv.job_id =
        std::max_element(job_ids.begin(), job_ids.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    jv.nodes = nodes.size();
    jv.processes = procs.size();
    jv.min_age_s = o.min_age_s >= 0 ? o.min_age_s : warn;
    jv.stale_after_s = o.stale_after_s >= 0 ? o.stale_after_s
                       : every              ? 3.0 * every + 5.0
                                            : std::numeric_limits<double>::infinity();
    auto min_age = [&](int f) { return o.min_age_s >= 0 ? o.min_age_s : static_cast<double>(d.files[f].warn_after_s); };
    auto behind_s = [&](int f) { return static_cast<double>(jv.newest_ns - d.files[f].time_ns) / 1e9; };
    auto stale = [&](int f) { return behind_s(f) > jv.stale_after_s; };

    // The communicators and their ranks (the newest dump of each rank).
    std::map<std::string, comm_ranks> comms;
    for (int i : files)
      for (std::size_t k = 0; k < d.files[i].comms.size(); ++k) {
        const comm_view& c = d.files[i].comms[k];
        comm_ranks& cr = comms[c.hash];
        cr.name = c.name;
        cr.nranks = std::max(cr.nranks, c.nranks);
        auto [it, fresh] = cr.by_rank.try_emplace(c.rank, i, static_cast<int>(k));
        if (!fresh && d.files[it->second.first].time_ns < d.files[i].time_ns) it->second = {i, static_cast<int>(k)};
      }
    // Global rank: the rank on the job's largest communicator.
    std::string largest;
    for (const auto& [h, cr] : comms)
      if (largest.empty() || cr.nranks > comms[largest].nranks ||
          (cr.nranks == comms[largest].nranks && cr.name < comms[largest].name))
        largest = h;
    for (int i : files) {
      dump& f = d.files[i];
      const comm_view* best = nullptr;
      for (const auto& c : f.comms)
        if (c.hash == largest) best = &c;
      for (const auto& c : f.comms)
        if (!best || c.nranks > best->nranks) best = &c;
      if (best) {
        f.global_rank = best->rank;
        f.global_comm = best->name;
      }
    }

    // The op a dump is stuck on outside communicator `hash` (the oldest), if any.
    auto stuck_elsewhere = [&](int f, const std::string& hash, rank_state& rs) {
      double best = -1;
      for (const auto& c : d.files[f].comms) {
        if (c.hash == hash) continue;
        for (const auto& op : c.inflight)
          if (op.age_s >= min_age(f) && op.age_s > best) {
            best = op.age_s;
            rs.other_comm = c.name + " " + c.hash;
            rs.other_seq = op.seq;
            rs.other_fn = op.fn;
            rs.age_s = op.age_s;
          }
      }
      return best >= 0;
    };

    for (const auto& [hash, cr] : comms) {
      // Stuck ops: in flight at least the minimum age in a dump that is not stale.
      const op* first = nullptr;
      int first_rank = -1;
      bool any_coll = false;
      for (const auto& [r, fc] : cr.by_rank) {
        if (stale(fc.first)) continue;
        for (const auto& op : view(d, fc).inflight) {
          if (op.age_s < min_age(fc.first)) continue;
          const bool coll = !op.p2p();
          if (coll && (!any_coll || op.age_s > first->age_s || (op.age_s == first->age_s && op.seq < first->seq))) {
            first = &op;
            first_rank = r;
            any_coll = true;
          } else if (!coll && !any_coll && (!first || op.age_s > first->age_s)) {
            first = &op;
            first_rank = r;
          }
        }
      }
      if (!first) continue;
      comm_verdict cv;
      cv.name = cr.name;
      cv.hash = hash;
      cv.nranks = cr.nranks;
      cv.seq = first->seq;
      cv.fn = first->fn;
      cv.p2p = !any_coll;
      std::vector<int> members;
      if (cv.p2p) {  // the waiting rank and its peer
        members = {first_rank};
        if (first->peer >= 0 && first->peer != first_rank) members.push_back(first->peer);
      } else {
        members.resize(static_cast<std::size_t>(cr.nranks));
        std::iota(members.begin(), members.end(), 0);
      }
      std::set<std::string> waits_on;
      for (int r : members) {
        rank_state rs;
        rs.rank = r;
        auto it = cr.by_rank.find(r);
        if (it == cr.by_rank.end()) {
          rs.what = "missing";
          cv.ranks.push_back(rs);
          continue;
        }
        rs.dump = it->second.first;
        const comm_view& v = view(d, it->second);
        if (stale(rs.dump)) {
          rs.what = "gone";
          rs.dump_behind_s = behind_s(rs.dump);
          cv.ranks.push_back(rs);
          continue;
        }
        const op* on_n = nullptr;
        const op* earlier = nullptr;
        for (const auto& op : v.inflight) {
          if (cv.p2p) {
            const bool match = r == first_rank ? &op == first : op.p2p() && op.peer == first_rank && op.fn != first->fn;
            if (match) on_n = &op;
          } else if (op.fn == cv.fn) {  // NCCL numbers each collective function on its own
            if (op.seq == cv.seq) on_n = &op;
            if (op.seq < cv.seq && (!earlier || op.seq < earlier->seq)) earlier = &op;
          }
        }
        if (on_n) {
          rs.what = "inside";
          rs.age_s = on_n->age_s;
          rs.progress = progress_of(*on_n);
          cv.wait_s = std::max(cv.wait_s, on_n->age_s);
        } else if (auto l = v.last_seq.find(cv.fn);
                   !cv.p2p && l != v.last_seq.end() && l->second >= static_cast<std::int64_t>(cv.seq)) {
          rs.what = "passed";
        } else if (earlier) {
          rs.what = "behind";
          rs.age_s = earlier->age_s;
          rs.other_seq = earlier->seq;
          rs.other_fn = earlier->fn;
        } else if (stuck_elsewhere(rs.dump, hash, rs)) {
          rs.what = "victim";
          waits_on.insert(rs.other_comm);
        } else {
          rs.what = "not_joined";
        }
        cv.ranks.push_back(rs);
      }
      auto pick = [&](std::initializer_list<const char*> whats) {
        for (std::size_t i = 0; i < cv.ranks.size(); ++i)
          for (const char* w : whats)
            if (cv.ranks[i].what == w) cv.culprits.push_back(static_cast<int>(i));
        return !cv.culprits.empty();
      };
      if (pick({"not_joined"})) {
        cv.kind = "never_joined";
        pick({"gone", "missing"});
      } else if (pick({"gone", "missing"})) {
        cv.kind = "process_gone";
      } else if (pick({"victim"})) {
        cv.kind = "waits_on_other_comm";
        for (const auto& w : waits_on) cv.waits_on += (cv.waits_on.empty() ? "" : ", ") + w;
      } else if (pick({"behind"})) {
        cv.kind = "behind";
      } else {
        cv.kind = "fault_in_collective";
      }
      jv.comms.push_back(std::move(cv));
    }
    // Root causes first, then the longest wait.
    std::stable_sort(jv.comms.begin(), jv.comms.end(), [](const comm_verdict& a, const comm_verdict& b) {
      const bool ra = a.kind != "waits_on_other_comm", rb = b.kind != "waits_on_other_comm";
      if (ra != rb) return ra;
      return a.wait_s > b.wait_s;
    });
    jv.hang = !jv.comms.empty();
    out.push_back(std::move(jv));
  }
  return out;
}

}  // namespace ncclinsp::report::hang
