/// ncclinsp-sim's `--summary` scenarios (scenario_summary.hpp).

#include "scenario_summary.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ncclinsp::sim::app {

namespace {

/// One communicator instance of kind k that rank r belongs to: its name and its members (global ranks).
std::pair<std::string, std::vector<int>> comm_instance(const options& o, comm_kind k, int r) {
  const int node = r / o.gpus, local = r % o.gpus;
  std::vector<int> members;
  if (k == comm_kind::tp)
    for (int l = 0; l < o.gpus; ++l) members.push_back(node * o.gpus + l);
  else if (k == comm_kind::fsdp)
    for (int x = 0; x < o.nodes * o.gpus; ++x) members.push_back(x);
  else
    for (int n = 0; n < o.nodes; ++n) members.push_back(n * o.gpus + local);
  const std::string name =
      k == comm_kind::tp || k == comm_kind::fsdp ? kind_name(k) : kind_name(k) + std::to_string(local);
  return {name, members};
}

}  // namespace

/// The rank faults and the network stall as the job met them: each scenario (kind, culprit, onset,
/// duration), then every communicator instance in which ranks block, in the order they block (the
/// ranks' own timeline, every fault in): its op (function, NCCL seqNumber of an eager collective), the
/// earliest launch into it, the ranks in flight in it and the members that never entered it; then per
/// --pause-rank the op its peers waited in: the paused rank's first launch after the onset (`until`), the
/// members that launched into it before (`waiting`) and the earliest of those launches (`t`).
void write_scenarios(ncclinsp::format::json_writer& j, const options& o, const model& m, int precision) {
  auto num_or_null = [&](std::string_view k, double v, bool has) {
    j.key(k);
    has ? (void)j.general(v, precision) : (void)j.null();
  };
  j.key("scenarios").begin_array({"\n    ", "\n  "});
  for (const rank_fault& f : o.rank_faults) {
    j.begin_object().key("kind").value(rank_fault_name(f.kind)).key("rank").value(f.rank);
    j.key("node").value(f.rank / o.gpus).key("node_name").value(o.node_prefix + std::to_string(f.rank / o.gpus));
    j.key("gpu").value(f.rank % o.gpus);
    num_or_null("onset", f.t, true);
    num_or_null("duration", f.d, f.kind == rank_fault_kind::pause);
    j.end_object();
  }
  if (o.net_stall_at >= 0) {
    j.begin_object().key("kind").value("net_stall").key("rank").null().key("node").null().key("node_name").null();
    j.key("gpu").null();
    num_or_null("onset", o.net_stall_at, true);
    num_or_null("duration", 0, false);
    j.end_object();
  }
  j.end_array();
  struct block {
    double t = 1e300;
    std::string comm, func;
    long long seq = -1;
    std::vector<int> in_flight, members;
  };
  std::map<std::pair<std::size_t, std::vector<int>>, block> blocks;  // per (program group, instance)
  std::map<std::pair<int, std::string>, long long> seq;              // per (rank, comm instance + function)
  struct wait {
    const rank_fault* pause = nullptr;
    bool found = false;
    double t = 0, until = 0;
    std::string comm, func;
    long long seq = -1;
    std::vector<int> waiting;
  };
  std::vector<wait> waits;
  for (const rank_fault& f : o.rank_faults)
    if (f.kind == rank_fault_kind::pause) waits.emplace_back().pause = &f;
  timeline tl(m);
  for (u64 s = 0; o.steps > 0 ? s < u64(o.steps) : tl.job_now() < o.duration; ++s) {
    bool any = false;
    for (int r = 0; r < tl.ranks() && !any; ++r) any = !tl.blocked(r);
    if (!any) break;
    tl.step(s);
    for (int r = 0; r < tl.ranks(); ++r)
      for (const rank_op& ro : tl.ops(r)) {
        const sim_op& op = m.program[std::size_t(ro.group)].ops[std::size_t(ro.op)];
        const auto [name, members] = comm_instance(o, op.comm, r);
        long long& n = seq[{r, name + func_name(op.func)}];
        for (wait& w : waits)
          if (!w.found && w.pause->rank == r && ro.op == 0 && ro.start >= w.pause->t && !ro.hung) {
            w.found = true;
            w.t = w.until = ro.start;
            w.comm = name;
            w.func = func_name(op.func);
            w.seq = op.ce || op.p2p_dir ? -1 : n;
            for (int p : members)
              for (const rank_op& po : tl.ops(p))
                if (p != r && po.group == ro.group && po.op == 0 && po.start < ro.start) {
                  w.waiting.push_back(p);
                  w.t = std::min(w.t, po.start);
                }
          }
        if (!ro.hung) {
          n += op.ce || op.p2p_dir ? 0 : 1;
          continue;
        }
        block& b = blocks[{std::size_t(ro.group), members}];
        b.t = std::min(b.t, ro.start);
        b.comm = name;
        b.func = func_name(op.func);
        b.seq = op.ce || op.p2p_dir ? -1 : n;
        if (std::find(b.in_flight.begin(), b.in_flight.end(), r) == b.in_flight.end()) b.in_flight.push_back(r);
        b.members = members;
      }
  }
  std::vector<block> v;
  for (auto& [k, b] : blocks) v.push_back(std::move(b));
  std::stable_sort(v.begin(), v.end(), [](const block& a, const block& b) { return a.t < b.t; });
  j.key("blocked").begin_array({"\n    ", "\n  "});
  for (block& b : v) {
    std::sort(b.in_flight.begin(), b.in_flight.end());
    j.begin_object().key("comm").value(b.comm).key("func").value(b.func).key("seq");
    b.seq >= 0 ? (void)j.value(b.seq) : (void)j.null();
    num_or_null("t", b.t, true);
    j.key("in_flight").begin_array();
    for (int r : b.in_flight) j.value(r);
    j.end_array().key("missing").begin_array();
    for (int r : b.members)
      if (!std::binary_search(b.in_flight.begin(), b.in_flight.end(), r)) j.value(r);
    j.end_array().end_object();
  }
  j.end_array().key("waited").begin_array({"\n    ", "\n  "});
  for (const wait& w : waits) {
    if (!w.found) continue;
    j.begin_object().key("rank").value(w.pause->rank).key("comm").value(w.comm).key("func").value(w.func);
    j.key("seq");
    w.seq >= 0 ? (void)j.value(w.seq) : (void)j.null();
    num_or_null("t", w.t, true);
    num_or_null("until", w.until, true);
    j.key("waiting").begin_array();
    for (int r : w.waiting) j.value(r);
    j.end_array().end_object();
  }
  j.end_array();
}

}  // namespace ncclinsp::sim::app
