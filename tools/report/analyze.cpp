// Matching ops across ranks and attributing slowness to ranks and hosts.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

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
/// 10th percentile: "late in at least a tenth of its ops".
double low_quantile(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.1);
}

// Per host: network wire time per byte of its out and in edges (proxy SendWait), min of both / median.
std::vector<proxy_host_row> proxy_hosts(const job& j) {
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> host_of;  // (comm, rank) -> host
  for (const auto& r : j.ops) host_of.emplace(std::pair{r.comm, r.rank}, r.host);
  for (const auto& p : j.proxy) host_of.emplace(std::pair{p.comm, p.rank}, p.host);
  std::map<std::uint32_t, std::array<double, 4>> acc;  // out ns, out bytes, in ns, in bytes
  for (const auto& p : j.proxy) {
    if (!p.send || p.bytes == 0) continue;
    const auto to = host_of.find({p.comm, static_cast<std::uint32_t>(p.peer)});
    if (to == host_of.end() || to->second == p.host) continue;  // a peer on the same host is no network edge
    auto& o = acc[p.host];
    o[0] += static_cast<double>(p.network_ns), o[1] += static_cast<double>(p.bytes);
    auto& i = acc[to->second];
    i[2] += static_cast<double>(p.network_ns), i[3] += static_cast<double>(p.bytes);
  }
  std::vector<proxy_host_row> rows;
  std::vector<double> link;
  for (const auto& [h, a] : acc) {
    if (a[1] <= 0 || a[3] <= 0) continue;
    proxy_host_row r;
    r.host = h;
    r.out_s_per_gb = a[0] / a[1];  // ns per byte = s per GB
    r.in_s_per_gb = a[2] / a[3];
    rows.push_back(r);
    link.push_back(std::min(r.out_s_per_gb, r.in_s_per_gb));
  }
  const double med = median(link);
  for (auto& r : rows) r.ratio = med > 0 ? std::min(r.out_s_per_gb, r.in_s_per_gb) / med : 1;
  std::sort(rows.begin(), rows.end(),
            [](const proxy_host_row& x, const proxy_host_row& y) { return x.ratio > y.ratio; });
  return rows;
}

// Bus bandwidth per series over time bins, and the incidents (see report.hpp: timeline).
void build_timeline(const job& j, analysis& a, const analysis_options& o, const std::vector<std::uint32_t>& idx,
                    const std::vector<double>& rex) {
  auto& tl = a.time;
  std::uint64_t lo = UINT64_MAX, hi = 0;
  for (auto i : idx)
    if (j.ops[i].end_ns) lo = std::min(lo, j.ops[i].end_ns), hi = std::max(hi, j.ops[i].end_ns);
  if (hi <= lo || o.timeline_bins == 0) return;
  tl.bins = o.timeline_bins;
  const std::uint64_t bin_ns = (hi - lo) / tl.bins + 1;
  tl.bin_s = static_cast<double>(bin_ns) / 1e9;
  tl.t0_ns = lo;
  struct acc {
    std::vector<double> bytes, time;  // busbw x exec, exec per bin
    std::set<std::uint32_t> hosts;
  };
  std::map<std::string, std::size_t> row_of;
  std::vector<acc> accs;
  auto row = [&](const std::string& name, bool host, int nnodes) -> std::size_t {
    auto [it, fresh] = row_of.emplace((host ? "h:" : "c:") + name, tl.rows.size());
    if (fresh) {
      tl.rows.push_back({name, host, nnodes, {}, 0});
      accs.push_back({std::vector<double>(tl.bins, 0), std::vector<double>(tl.bins, 0), {}});
    }
    return it->second;
  };
  for (auto i : idx) {
    const auto& r = j.ops[i];
    if (!r.end_ns || !r.valid || !(r.exec_us > 0) || r.p2p) continue;
    const auto& c = j.comms[r.comm];
    const auto b = std::min<std::size_t>((r.end_ns - lo) / bin_ns, tl.bins - 1);
    for (auto k : {row(c.nnodes > 1 ? c.name : c.name + "@" + j.hosts[r.host], false, c.nnodes),
                   row(j.hosts[r.host], true, 0)}) {
      accs[k].bytes[b] += r.busbw * r.exec_us;
      accs[k].time[b] += r.exec_us;
      accs[k].hosts.insert(r.host);
    }
  }
  const std::size_t nb = tl.bins, quarter = std::max<std::size_t>(nb / 4, std::min<std::size_t>(3, nb));
  std::vector<std::vector<char>> low(tl.rows.size(), std::vector<char>(nb, 0));
  for (std::size_t k = 0; k < tl.rows.size(); ++k) {
    auto& s = tl.rows[k];
    s.busbw.assign(nb, -1);
    std::vector<double> base;
    // The first and last bins are partial (ops of the bin's first/last instants only): kept, but not baseline.
    for (std::size_t b = 0; b < nb; ++b)
      if (accs[k].time[b] > 0) {
        s.busbw[b] = accs[k].bytes[b] / accs[k].time[b];
        if (b > 0 && b <= quarter) base.push_back(s.busbw[b]);
      }
    s.baseline = median(base);
    for (std::size_t b = 1; b + 1 < nb; ++b) low[k][b] = s.busbw[b] >= 0 && s.busbw[b] < (1 - o.threshold) * s.baseline;
  }
  // Incidents: runs of bins where any communicator series is low (a gap of one bin is bridged).
  std::vector<char> any(nb, 0);
  for (std::size_t k = 0; k < tl.rows.size(); ++k)
    if (!tl.rows[k].host)
      for (std::size_t b = 0; b < nb; ++b) any[b] |= low[k][b];
  for (std::size_t b = 0; b < nb;) {
    if (!any[b]) {
      ++b;
      continue;
    }
    std::size_t e = b;
    while (e + 1 < nb && (any[e + 1] || (e + 2 < nb && any[e + 2]))) ++e;
    timeline::incident inc;
    inc.first_bin = b, inc.last_bin = e;
    std::set<std::uint32_t> bad_hosts, good_hosts;
    bool all_bad = true, net_bad = false, nvl_only = true;
    bool first_bad = true;
    for (std::size_t k = 0; k < tl.rows.size(); ++k) {
      if (tl.rows[k].host) continue;
      std::size_t n = 0, nl = 0;
      for (std::size_t x = b; x <= e; ++x) n += tl.rows[k].busbw[x] >= 0, nl += low[k][x];
      if (n == 0) continue;
      const bool bad = 2 * nl >= n;
      const bool net = tl.rows[k].nnodes > 1;
      if (bad) {
        inc.degraded.push_back(tl.rows[k].name);
        net_bad |= net;
        nvl_only &= !net;
        if (net) {
          if (first_bad)
            bad_hosts = accs[k].hosts;
          else {
            std::set<std::uint32_t> keep;
            for (auto h : bad_hosts)
              if (accs[k].hosts.count(h)) keep.insert(h);
            bad_hosts = keep;
          }
          first_bad = false;
        }
      } else if (net) {
        all_bad = false;
        good_hosts.insert(accs[k].hosts.begin(), accs[k].hosts.end());
      }
    }
    // A late rank in these bins: the shortest exec time vs. its op's median, in most of its ops.
    std::map<std::pair<std::uint32_t, std::uint32_t>, std::vector<double>> late;
    for (auto i : idx) {
      const auto& r = j.ops[i];
      if (rex[i] < 0 || !r.end_ns) continue;
      const auto bb = std::min<std::size_t>((r.end_ns - lo) / bin_ns, nb - 1);
      if (bb >= b && bb <= e) late[{r.comm, r.rank}].push_back(rex[i]);
    }
    double best = 1 - o.threshold;
    const op_rec* who = nullptr;
    int who_ranks = 0;
    for (auto& [k, v] : late) {
      if (v.size() < 2) continue;
      const double m = low_quantile(v);
      const int nr = j.comms[k.first].n_ranks;
      // The same late GPU shows in each of its communicators: name it in the largest (its global rank).
      if (m < 1 - o.threshold && (nr > who_ranks || (nr == who_ranks && m < best))) {
        best = m, who_ranks = nr;
        for (auto i : idx)
          if (j.ops[i].comm == k.first && j.ops[i].rank == k.second) {
            who = &j.ops[i];
            break;
          }
      }
    }
    if (who) {
      inc.kind = "straggler";
      inc.culprit = j.hosts[who->host] + " rank " + std::to_string(who->rank) + " (" + j.comms[who->comm].name + ")";
      inc.detail = "compute straggler: arrives late (exec " +
                   std::to_string(static_cast<int>(std::lround(best * 100))) +
                   "% of the op median); its peers wait, the network is not the cause";
    } else if (nvl_only && !inc.degraded.empty()) {
      inc.kind = "nvlink";
      std::string hosts;
      for (const auto& d : inc.degraded) hosts += (hosts.empty() ? "" : ",") + d.substr(d.find('@') + 1);
      inc.culprit = hosts;
      inc.detail = "only NVLink-only (n_nodes=1) communicators of " + hosts + " degraded";
    } else if (net_bad) {
      inc.kind = "network";
      std::string cand;
      std::size_t nc = 0;
      for (auto h : bad_hosts)
        if (!good_hosts.count(h)) cand += (cand.empty() ? "" : ",") + j.hosts[h], ++nc;
      // Proxy wire time per byte names the host on every edge of which the network is slow (>= 3
      // hosts: with 2, every edge touches both).
      const auto& ph = a.proxy_hosts;
      if (ph.size() >= 3 && ph[0].ratio > o.proxy_host_ratio) {
        inc.culprit = j.hosts[ph[0].host];
        inc.detail = fmt::format(
            "{}: slow host or NIC, {:.2f}x the median host's network wire time per byte, on its in and out edges "
            "(proxy SendWait; next {:.2f}x)",
            inc.culprit, ph[0].ratio, ph[1].ratio);
      } else if (all_bad || nc == 0 || nc == bad_hosts.size()) {
        inc.culprit = "";
        inc.detail =
            "every network communicator degraded: the fabric, or one host/NIC on every path (kernel time cannot tell which; "
            "proxy wait by peer names it: docs/diagnosis.md)";
      } else {
        inc.culprit = cand;
        inc.detail = "only the network communicators through " + cand + " degraded (membership)";
      }
    } else {
      inc.kind = "unknown";
    }
    tl.incidents.push_back(std::move(inc));
    b = e + 1;
  }
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
  return v == std::floor(v) ? fmt::format("{:.0f} {}", v, units[u]) : fmt::format("{:.1f} {}", v, units[u]);
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
    std::vector<double> rel_bw, rel_ex, in_op, in_op_cross, ex_in_op;
    double late = 0;
    std::uint64_t late_n = 0, records = 0, slow = 0;
    std::uint32_t host = 0;
  };
  std::vector<double> rec_ex_in_op(j.ops.size(),
                                   -1.0);  // per record: exec / op median exec (-1: not matched across hosts)
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
  std::vector<double> bws, exs;
  for (std::size_t b = 0; b < coll.size();) {
    std::size_t e = b;
    const auto& first = j.ops[coll[b]];
    while (e < coll.size() && j.ops[coll[e]].comm == first.comm && j.ops[coll[e]].fn == first.fn &&
           j.ops[coll[e]].sn == first.sn)
      ++e;
    const std::size_t n = e - b;
    const auto& ci = j.comms[first.comm];
    ++a.matched_ops;
    for (std::size_t k = b; k < e; ++k) seen_ranks[{first.comm, 0}].insert(j.ops[coll[k]].rank);
    if (ci.n_ranks > 0 && n < static_cast<std::size_t>(ci.n_ranks)) {
      ++a.incomplete_ops;
      j.warn.add("op seen on fewer ranks than n_ranks (missing rank files, drops or a hang)",
                 ci.name + " " + ci.id + " " + j.funcs[first.fn] + " sn " + std::to_string(first.sn) + ": " +
                     std::to_string(n) + "/" + std::to_string(ci.n_ranks) + " ranks");
    }
    if (n < 2) {
      ++a.single_rank_ops;
      b = e;
      continue;
    }
    bws.clear();
    exs.clear();
    bool all_start = true, all_end = true;
    std::set<std::uint32_t> hosts;
    std::uint64_t min_start = UINT64_MAX, min_end = UINT64_MAX;
    for (std::size_t k = b; k < e; ++k) {
      const auto& r = j.ops[coll[k]];
      hosts.insert(r.host);
      if (r.valid) bws.push_back(r.busbw);
      if (r.valid && r.exec_us > 0) exs.push_back(r.exec_us);
      all_start &= r.start_ns != 0;
      all_end &= r.end_ns != 0;
      if (r.start_ns) min_start = std::min(min_start, r.start_ns);
      if (r.end_ns) min_end = std::min(min_end, r.end_ns);
    }
    const double med = median(bws);
    const double med_ex = median(exs);
    const bool cross = hosts.size() > 1;
    with_start += all_start;
    with_end += all_end && !all_start;
    (void)min_start, (void)min_end;
    // The ranks of one collective end together; each starts when it arrives. So exec time = common end -
    // own arrival, and (op median exec - own exec) is how late this rank arrived, without comparing clocks
    // of different hosts (sim/README.md "Timing model", docs/diagnosis.md).
    for (std::size_t k = b; k < e; ++k) {
      const auto& r = j.ops[coll[k]];
      auto& ra = ranks[{r.comm, r.rank}];
      if (r.valid && med > 0) {
        const double rel = r.busbw / med;
        ra.in_op.push_back(rel);
        if (cross) ra.in_op_cross.push_back(rel);
      }
      if (cross && r.valid && r.exec_us > 0 && med_ex > 0) {
        const double rex = r.exec_us / med_ex;
        ra.ex_in_op.push_back(rex);
        rec_ex_in_op[coll[k]] = rex;
        ra.late += med_ex - r.exec_us;
        ++ra.late_n;
        if (rex < 1 - o.threshold) ++ra.slow;
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
      a.missing_ranks.push_back(ci.name + " " + ci.id + ": " + std::to_string(nmiss) + " of " +
                                std::to_string(ci.n_ranks) + " ranks never seen (" + miss + ")");
      j.warn.add("communicator with ranks that have no records at all (missing files?)", a.missing_ranks.back());
    }
  }

  // Rank rows, then host rows (pooled over the host's records).
  struct host_acc {
    std::vector<double> rel_bw, rel_ex, in_op, in_op_cross;
    double late = 0, min_ex = 1;
    bool straggler = false;
    std::uint64_t records = 0, slow = 0;
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
    // Low quantile, not median: a late launch delays only the first op of each group (the next ones start
    // when the previous one ends), and a straggler may be late in only part of the run.
    rr.rel_exec_in_op = ra.ex_in_op.empty() ? 1 : low_quantile(ra.ex_in_op);
    rr.late_us = ra.late_n ? ra.late / static_cast<double>(ra.late_n) : 0;
    rr.slow_ops = ra.slow;
    rr.matched = ra.late_n;
    // A compute straggler: shortest exec time in most of its ops (it arrives last; its peers wait for it).
    rr.straggler = ra.slow >= 2 && rr.rel_exec_in_op < 1 - o.threshold && 10 * ra.slow >= ra.late_n;
    a.ranks.push_back(rr);
    auto& h = hosts[ra.host];
    h.rel_bw.insert(h.rel_bw.end(), ra.rel_bw.begin(), ra.rel_bw.end());
    h.rel_ex.insert(h.rel_ex.end(), ra.rel_ex.begin(), ra.rel_ex.end());
    h.in_op.insert(h.in_op.end(), ra.in_op.begin(), ra.in_op.end());
    h.in_op_cross.insert(h.in_op_cross.end(), ra.in_op_cross.begin(), ra.in_op_cross.end());
    h.late = std::max(h.late, rr.late_us);
    h.min_ex = std::min(h.min_ex, rr.rel_exec_in_op);
    h.straggler |= rr.straggler;
    h.records += ra.records;
    h.slow += ra.slow;
    h.ranks_per_comm[k.first].insert(k.second);
  }
  // Latest ranks first (shortest exec time vs. the op median).
  std::sort(a.ranks.begin(), a.ranks.end(), [](const rank_row& x, const rank_row& y) {
    return std::tie(x.rel_exec_in_op, x.rel_in_op) < std::tie(y.rel_exec_in_op, y.rel_in_op);
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
    r.late_us = h.late;
    // Not the host's own bus bandwidth: a slow host or NIC slows every rank of the communicators routed
    // through it alike, and a late rank makes its peers look slow. Only lateness is the host's own.
    r.deviation = h.min_ex - 1;
    r.straggler = hosts.size() > 1 && h.straggler;
    a.hosts.push_back(r);
  }
  std::sort(a.hosts.begin(), a.hosts.end(),
            [](const host_row& x, const host_row& y) { return x.deviation < y.deviation; });
  a.proxy_hosts = proxy_hosts(j);
  build_timeline(j, a, o, idx, rec_ex_in_op);
  return a;
}

}  // namespace ncclinsp::report
