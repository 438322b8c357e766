// Matching ops across ranks and attributing slowness to ranks and hosts.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "report.hpp"

namespace ncclinsp::report {

namespace {
double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}
}  // namespace

stats compute_stats(std::vector<double> v) {
  stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = quantile_sorted(v, 0.5);
  s.p90 = quantile_sorted(v, 0.9);
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

std::string human_bytes(std::uint64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

analysis analyze(job& j, const analysis_options& o) {
  analysis a;
  a.threshold = o.threshold;
  std::vector<std::uint32_t> idx;
  idx.reserve(j.ops.size());
  for (std::uint32_t i = 0; i < j.ops.size(); ++i)
    if (j.ops[i].bytes >= o.min_bytes) idx.push_back(i);

  // Peer classes: (comm name, n_ranks, nnodes, function, size). Communicators of the same name and
  // shape (e.g. the tp comm of every node) are compared with each other.
  using class_key = std::tuple<std::string, int, int, std::uint32_t, std::uint64_t>;
  auto class_of = [&](const op_rec& r) {
    const auto& c = j.comms[r.comm];
    return class_key{c.name, c.n_ranks, c.nnodes, r.fn, r.bytes};
  };
  struct class_acc {
    std::vector<double> bw, ex;
    std::uint64_t records = 0, invalid = 0;
    double time = 0;
    std::set<std::pair<std::uint32_t, std::uint64_t>> ops;
    std::uint32_t comm = 0, fn = 0;
    std::uint64_t bytes = 0;
    double med_bw = 0, med_ex = 0;
  };
  std::map<class_key, class_acc> classes;
  for (auto i : idx) {
    const auto& r = j.ops[i];
    auto& c = classes[class_of(r)];
    c.comm = r.comm, c.fn = r.fn, c.bytes = r.bytes;
    ++c.records;
    c.ops.emplace(r.comm, r.sn * 2 + (r.p2p ? 1 : 0));
    if (std::isfinite(r.exec_us) && r.exec_us > 0) c.time += r.exec_us;
    if (r.valid) {
      c.bw.push_back(r.busbw);
      c.ex.push_back(r.exec_us);
    } else {
      ++c.invalid;
    }
  }
  for (auto& [k, c] : classes) {
    a.total_time_us += c.time;
    c.med_bw = median(c.bw);
    c.med_ex = median(c.ex);
  }
  for (auto& [k, c] : classes) {
    size_row s;
    s.comm = c.comm, s.fn = c.fn, s.bytes = c.bytes;
    s.ops = c.ops.size();
    s.records = c.records;
    s.invalid = c.invalid;
    s.busbw = compute_stats(c.bw);
    s.exec_us = compute_stats(c.ex);
    s.time_us = c.time;
    s.time_share = a.total_time_us > 0 ? c.time / a.total_time_us : 0;
    a.sizes.push_back(s);
  }
  std::sort(a.sizes.begin(), a.sizes.end(), [](const size_row& x, const size_row& y) { return x.time_us > y.time_us; });

  // Per (comm, rank) accumulators.
  struct rank_acc {
    std::vector<double> rel_bw, rel_ex, in_op, in_op_cross;
    double late = 0;
    std::uint64_t late_n = 0, records = 0, slow = 0;
    std::uint32_t host = 0;
  };
  std::map<std::pair<std::uint32_t, std::uint32_t>, rank_acc> ranks;
  for (auto i : idx) {
    const auto& r = j.ops[i];
    auto& ra = ranks[{r.comm, r.rank}];
    ra.host = r.host;
    ++ra.records;
    if (!r.valid) continue;
    const auto& c = classes[class_of(r)];
    if (c.med_bw > 0) ra.rel_bw.push_back(r.busbw / c.med_bw);
    if (c.med_ex > 0) ra.rel_ex.push_back(r.exec_us / c.med_ex);
  }

  // Matched collectives: (comm, function, sequence number).
  std::vector<std::uint32_t> coll;
  for (auto i : idx)
    if (!j.ops[i].p2p) coll.push_back(i);
  std::sort(coll.begin(), coll.end(), [&](std::uint32_t x, std::uint32_t y) {
    const auto& a1 = j.ops[x];
    const auto& b1 = j.ops[y];
    return std::tie(a1.comm, a1.fn, a1.sn, a1.rank) < std::tie(b1.comm, b1.fn, b1.sn, b1.rank);
  });
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::set<std::uint32_t>> seen_ranks;  // comm -> ranks
  std::uint64_t with_start = 0, with_end = 0;
  std::vector<double> bws;
  for (std::size_t b = 0; b < coll.size();) {
    std::size_t e = b;
    const auto& first = j.ops[coll[b]];
    while (e < coll.size() && j.ops[coll[e]].comm == first.comm && j.ops[coll[e]].fn == first.fn && j.ops[coll[e]].sn == first.sn) ++e;
    const std::size_t n = e - b;
    const auto& ci = j.comms[first.comm];
    ++a.matched_ops;
    for (std::size_t k = b; k < e; ++k) seen_ranks[{first.comm, 0}].insert(j.ops[coll[k]].rank);
    if (ci.n_ranks > 0 && n < static_cast<std::size_t>(ci.n_ranks)) {
      ++a.incomplete_ops;
      j.warn.add("op seen on fewer ranks than n_ranks (missing rank files, drops or a hang)",
                 ci.name + " " + ci.id + " " + j.funcs[first.fn] + " sn " + std::to_string(first.sn) + ": " + std::to_string(n) + "/" +
                     std::to_string(ci.n_ranks) + " ranks");
    }
    if (n < 2) {
      ++a.single_rank_ops;
      b = e;
      continue;
    }
    bws.clear();
    bool all_start = true, all_end = true;
    std::set<std::uint32_t> hosts;
    std::uint64_t min_start = UINT64_MAX, min_end = UINT64_MAX;
    for (std::size_t k = b; k < e; ++k) {
      const auto& r = j.ops[coll[k]];
      hosts.insert(r.host);
      if (r.valid) bws.push_back(r.busbw);
      all_start &= r.start_ns != 0;
      all_end &= r.end_ns != 0;
      if (r.start_ns) min_start = std::min(min_start, r.start_ns);
      if (r.end_ns) min_end = std::min(min_end, r.end_ns);
    }
    const double med = median(bws);
    const bool cross = hosts.size() > 1;
    with_start += all_start;
    with_end += all_end && !all_start;
    for (std::size_t k = b; k < e; ++k) {
      const auto& r = j.ops[coll[k]];
      auto& ra = ranks[{r.comm, r.rank}];
      if (r.valid && med > 0) {
        const double rel = r.busbw / med;
        ra.in_op.push_back(rel);
        if (cross) ra.in_op_cross.push_back(rel);
        if (rel < 1 - o.threshold) ++ra.slow;
      }
      if (cross && (all_start || all_end)) {
        ra.late += all_start ? static_cast<double>(r.start_ns - min_start) / 1e3 : static_cast<double>(r.end_ns - min_end) / 1e3;
        ++ra.late_n;
      }
    }
    b = e;
  }
  a.skew_source = with_start ? "start_ts_ns" : with_end ? "end_ts_ns (proxy: start times absent)" : "none";

  // Ranks never seen in a communicator that other ranks reported.
  for (const auto& [k, rs] : seen_ranks) {
    const auto& ci = j.comms[k.first];
    std::string miss;
    int nmiss = 0;
    for (int r = 0; r < ci.n_ranks; ++r)
      if (!rs.count(static_cast<std::uint32_t>(r))) {
        if (nmiss++ < 16) miss += (miss.empty() ? "" : ",") + std::to_string(r);
      }
    if (nmiss) {
      if (nmiss > 16) miss += ",...";
      a.missing_ranks.push_back(ci.name + " " + ci.id + ": " + std::to_string(nmiss) + " of " + std::to_string(ci.n_ranks) +
                                " ranks never seen (" + miss + ")");
      j.warn.add("communicator with ranks that have no records at all (missing files?)", a.missing_ranks.back());
    }
  }

  // Rank rows, then host rows (pooled over the host's records).
  struct host_acc {
    std::vector<double> rel_bw, rel_ex, in_op, in_op_cross;
    double late = 0;
    std::uint64_t late_n = 0, records = 0, slow = 0;
    std::map<std::uint32_t, std::set<std::uint32_t>> ranks_per_comm;
  };
  std::map<std::uint32_t, host_acc> hosts;
  for (auto& [k, ra] : ranks) {
    rank_row rr;
    rr.comm = k.first, rr.rank = k.second, rr.host = ra.host;
    rr.records = ra.records;
    rr.rel_busbw = ra.rel_bw.empty() ? 1 : median(ra.rel_bw);
    rr.rel_exec = ra.rel_ex.empty() ? 1 : median(ra.rel_ex);
    rr.rel_in_op = ra.in_op.empty() ? 1 : median(ra.in_op);
    rr.late_us = ra.late_n ? ra.late / static_cast<double>(ra.late_n) : 0;
    rr.slow_ops = ra.slow;
    a.ranks.push_back(rr);
    auto& h = hosts[ra.host];
    h.rel_bw.insert(h.rel_bw.end(), ra.rel_bw.begin(), ra.rel_bw.end());
    h.rel_ex.insert(h.rel_ex.end(), ra.rel_ex.begin(), ra.rel_ex.end());
    h.in_op.insert(h.in_op.end(), ra.in_op.begin(), ra.in_op.end());
    h.in_op_cross.insert(h.in_op_cross.end(), ra.in_op_cross.begin(), ra.in_op_cross.end());
    h.late += ra.late;
    h.late_n += ra.late_n;
    h.records += ra.records;
    h.slow += ra.slow;
    h.ranks_per_comm[k.first].insert(k.second);
  }
  std::sort(a.ranks.begin(), a.ranks.end(), [](const rank_row& x, const rank_row& y) {
    return std::tie(x.rel_in_op, x.rel_busbw) < std::tie(y.rel_in_op, y.rel_busbw);
  });
  for (auto& [hi, h] : hosts) {
    host_row r;
    r.host = hi;
    for (const auto& [c, rs] : h.ranks_per_comm) r.ranks = std::max<std::uint64_t>(r.ranks, rs.size());
    r.records = h.records;
    r.slow_ops = h.slow;
    r.rel_busbw = h.rel_bw.empty() ? 1 : median(h.rel_bw);
    r.rel_exec = h.rel_ex.empty() ? 1 : median(h.rel_ex);
    // Only ops that span hosts can tell hosts apart; a host-local op is compared with itself.
    r.rel_in_op = !h.in_op_cross.empty() ? median(h.in_op_cross) : h.in_op.empty() ? 1 : median(h.in_op);
    r.late_us = h.late_n ? h.late / static_cast<double>(h.late_n) : 0;
    r.deviation = (h.in_op_cross.empty() ? r.rel_busbw : r.rel_in_op) - 1;
    r.straggler = hosts.size() > 1 && r.deviation < -o.threshold;
    a.hosts.push_back(r);
  }
  std::sort(a.hosts.begin(), a.hosts.end(), [](const host_row& x, const host_row& y) { return x.deviation < y.deviation; });
  return a;
}

}  // namespace ncclinsp::report
