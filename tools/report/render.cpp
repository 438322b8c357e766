// Text, CSV, JSON and self-contained HTML (inline SVG) output.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "ncclinsp/format/json_writer.hpp"
#include "report.hpp"

namespace ncclinsp::report {

namespace {

std::string pct(double rel) { return fmt::format("{:+.1f}%", (rel - 1) * 100); }
std::string pad(std::string s, std::size_t w, bool right = false) {
  if (s.size() >= w) return s + " ";
  return right ? std::string(w - s.size(), ' ') + s + " " : s + std::string(w - s.size(), ' ') + " ";
}
std::string jstr(std::string_view s) {
  std::string o;
  ncclinsp::format::append_json_string(o, s);
  return o;
}
std::string jnum(double v) {
  std::string o;
  ncclinsp::format::append_double(o, std::isfinite(v) ? v : 0);
  return o;
}
std::string html(std::string_view s) {
  std::string o;
  for (char c : s) switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  return o;
}
std::string csv(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}
std::string comm_label(const comm_info& c) {
  return c.name + " (" + std::to_string(c.n_ranks) + "r/" + std::to_string(c.nnodes) + "n)";
}

std::vector<const host_row*> stragglers(const analysis& a) {
  std::vector<const host_row*> s;
  for (const auto& h : a.hosts)
    if (h.straggler) s.push_back(&h);
  return s;
}

std::string verdict(const job& j, const analysis& a) {
  auto s = stragglers(a);
  if (a.hosts.size() < 2) return "only one host in the data: host attribution needs ops that span hosts";
  if (s.empty())
    return "no straggler host: no rank arrives late (exec time within " + fmt::format("{:.0f}", a.threshold * 100) +
           "% of the op median in 90% of ops); a slowdown of every rank alike is a network or NVLink matter (see the timeline)";
  std::string out = "straggler host" + std::string(s.size() > 1 ? "s" : "") + ": ";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += (i ? ", " : "") + j.hosts[s[i]->host];
    for (const auto& r : a.ranks)  // sorted latest first: the host's latest straggler rank
      if (r.straggler && r.host == s[i]->host) {
        out += " (rank " + std::to_string(r.rank) + " of " + j.comms[r.comm].name + " arrives " +
               fmt::format("{:.1f}", r.late_us) + " us late: exec " + pct(r.rel_exec_in_op) +
               " vs. the op median; its peers wait for it)";
        break;
      }
  }
  return out;
}

std::string tl_time(const timeline& t, std::size_t b) {
  return fmt::format("{:.1f}", static_cast<double>(b) * t.bin_s);
}

std::string incident_line(const timeline& t, const timeline::incident& i) {
  std::string s = "t+" + tl_time(t, i.first_bin) + "s..t+" + tl_time(t, i.last_bin + 1) + "s: " + i.kind;
  if (!i.culprit.empty()) s += " [" + i.culprit + "]";
  if (!i.detail.empty()) s += ": " + i.detail;
  std::string d;
  for (const auto& x : i.degraded) d += (d.empty() ? "" : ",") + x;
  if (!d.empty()) s += " (degraded: " + d + ")";
  return s;
}

}  // namespace

void write_warnings(std::ostream& os, const job& j) {
  for (const auto& [kind, e] : j.warn.by_kind)
    os << "warning: " << kind << " [count " << e.count << "; first: " << e.first << "]\n";
}

void write_text(std::ostream& os, const job& j, const analysis& a, int top_ranks) {
  std::set<std::pair<std::uint32_t, std::uint32_t>> rk;
  for (const auto& r : a.ranks) rk.emplace(r.comm, r.rank);
  std::string vers;
  for (const auto& [v, n] : j.versions) vers += (vers.empty() ? "" : ", ") + v;
  os << "ncclinsp-report: " << j.files << " files, " << j.ops.size() << " op records from " << j.hosts.size()
     << " hosts, " << j.comms_used << " communicators (format " << (vers.empty() ? "-" : vers) << ")\n";
  os << "matched collectives: " << a.matched_ops << " (seen on fewer ranks than n_ranks: " << a.incomplete_ops
     << "), arrival skew from: " << a.skew_source << "\n\n";

  os << "Collectives by message size (busbw in GB/s over rank records; time = share of all op time)\n";
  os << pad("comm", 16) << pad("collective", 14) << pad("size", 10, true) << pad("ops", 7, true)
     << pad("records", 8, true) << pad("p50", 8, true) << pad("p90", 8, true) << pad("min", 8, true)
     << pad("exec_p50_us", 12, true) << pad("time%", 6, true) << "\n";
  for (const auto& s : a.sizes) {
    os << pad(comm_label(j.comms[s.comm]), 16) << pad(j.funcs[s.fn], 14) << pad(human_bytes(s.bytes), 10, true)
       << pad(std::to_string(s.ops), 7, true) << pad(std::to_string(s.records), 8, true)
       << pad(fmt::format("{:.2f}", s.busbw.p50), 8, true) << pad(fmt::format("{:.2f}", s.busbw.p90), 8, true)
       << pad(fmt::format("{:.2f}", s.busbw.min), 8, true) << pad(fmt::format("{:.1f}", s.exec_us.p50), 12, true)
       << pad(fmt::format("{:.1f}", s.time_share * 100), 6, true)
       << (s.invalid ? "  (" + std::to_string(s.invalid) + " invalid)" : "") << "\n";
  }

  os << "\nHosts (busbw vs. the median rank of the same op, over ops spanning hosts; vs. job = vs. the median of the same\n"
        "comm/collective/size over the whole job; late = its latest rank's mean arrival lateness (op median exec - own exec);\n"
        "STRAGGLER = holds a rank that arrives late in >= 10% of its ops)\n";
  os << pad("host", 20) << pad("gpus", 5, true) << pad("records", 8, true) << pad("busbw_vs_op", 12, true)
     << pad("busbw_vs_job", 13, true) << pad("exec_vs_job", 12, true) << pad("late_us", 10, true)
     << pad("late_ops", 9, true) << "verdict\n";
  for (const auto& h : a.hosts)
    os << pad(j.hosts[h.host], 20) << pad(std::to_string(h.ranks), 5, true) << pad(std::to_string(h.records), 8, true)
       << pad(pct(h.rel_in_op), 12, true) << pad(pct(h.rel_busbw), 13, true) << pad(pct(h.rel_exec), 12, true)
       << pad(fmt::format("{:.1f}", h.late_us), 10, true) << pad(std::to_string(h.slow_ops), 9, true)
       << (h.straggler ? "STRAGGLER" : "ok") << "\n";

  const std::size_t n = std::min<std::size_t>(a.ranks.size(), static_cast<std::size_t>(std::max(top_ranks, 0)));
  if (n) {
    os << "\nLatest ranks (top " << n << " of " << a.ranks.size()
       << " comm ranks, by exec time vs. the op median: the last to arrive has the shortest)\n";
    os << pad("comm", 16) << pad("id", 19) << pad("rank", 5, true) << pad("host", 20) << pad("records", 8, true)
       << pad("busbw_vs_op", 12, true) << pad("busbw_vs_job", 13, true) << pad("exec_vs_op", 11, true)
       << pad("late_us", 10, true) << "late_ops\n";
    for (std::size_t i = 0; i < n; ++i) {
      const auto& r = a.ranks[i];
      os << pad(comm_label(j.comms[r.comm]), 16) << pad(j.comms[r.comm].id, 19) << pad(std::to_string(r.rank), 5, true)
         << pad(j.hosts[r.host], 20) << pad(std::to_string(r.records), 8, true) << pad(pct(r.rel_in_op), 12, true)
         << pad(pct(r.rel_busbw), 13, true) << pad(pct(r.rel_exec_in_op), 11, true)
         << pad(fmt::format("{:.1f}", r.late_us), 10, true) << r.slow_ops << (r.straggler ? "  STRAGGLER" : "") << "\n";
    }
  }
  for (const auto& m : a.missing_ranks) os << "missing: " << m << "\n";
  const auto& t = a.time;
  if (t.bins) {
    os << "\nTimeline (" << t.bins << " bins of " << fmt::format("{:.2f}", t.bin_s)
       << " s by op end time; busbw vs. the series' baseline: '.' within " << fmt::format("{:.0f}", a.threshold * 100)
       << "%, 'v' below, ' ' no op; '^' incident)\n";
    os << pad("series", 20) << pad("base_GB/s", 10, true) << "\n";
    for (const auto& r : t.rows) {
      std::string line;
      for (double v : r.busbw) line += v < 0 ? ' ' : v < (1 - a.threshold) * r.baseline ? 'v' : '.';
      os << pad((r.host ? "host " : "") + r.name, 20) << pad(fmt::format("{:.1f}", r.baseline), 10, true) << line
         << "\n";
    }
    std::string mark(t.bins, ' ');
    for (const auto& i : t.incidents)
      for (auto b = i.first_bin; b <= i.last_bin; ++b) mark[b] = '^';
    os << pad("incidents", 20) << pad("", 10, true) << mark << "\n";
    for (const auto& i : t.incidents) os << "incident " << incident_line(t, i) << "\n";
  }
  os << "\nVerdict: " << verdict(j, a) << "\n";
}

void write_csv_sizes(std::ostream& os, const job& j, const analysis& a) {
  os << "comm_name,comm_id,n_ranks,nnodes,collective,msg_size_bytes,ops,records,invalid,busbw_p50_gbs,busbw_p90_gbs,busbw_min_gbs,"
        "busbw_max_gbs,exec_p50_us,exec_p90_us,time_us,time_share\n";
  for (const auto& s : a.sizes) {
    const auto& c = j.comms[s.comm];
    os << csv(c.name) << ',' << c.id << ',' << c.n_ranks << ',' << c.nnodes << ',' << csv(j.funcs[s.fn]) << ','
       << s.bytes << ',' << s.ops << ',' << s.records << ',' << s.invalid << ',' << jnum(s.busbw.p50) << ','
       << jnum(s.busbw.p90) << ',' << jnum(s.busbw.min) << ',' << jnum(s.busbw.max) << ',' << jnum(s.exec_us.p50) << ','
       << jnum(s.exec_us.p90) << ',' << jnum(s.time_us) << ',' << jnum(s.time_share) << '\n';
  }
}

void write_csv_ranks(std::ostream& os, const job& j, const analysis& a) {
  os << "comm_name,comm_id,rank,host,records,rel_busbw_in_op,rel_busbw_job,rel_exec_job,late_us,slow_ops\n";
  for (const auto& r : a.ranks) {
    const auto& c = j.comms[r.comm];
    os << csv(c.name) << ',' << c.id << ',' << r.rank << ',' << csv(j.hosts[r.host]) << ',' << r.records << ','
       << jnum(r.rel_in_op) << ',' << jnum(r.rel_busbw) << ',' << jnum(r.rel_exec) << ',' << jnum(r.late_us) << ','
       << r.slow_ops << '\n';
  }
}

void write_csv_hosts(std::ostream& os, const job& j, const analysis& a) {
  os << "host,gpus,records,rel_busbw_in_op,rel_busbw_job,rel_exec_job,late_us,slow_ops,deviation,straggler\n";
  for (const auto& h : a.hosts)
    os << csv(j.hosts[h.host]) << ',' << h.ranks << ',' << h.records << ',' << jnum(h.rel_in_op) << ','
       << jnum(h.rel_busbw) << ',' << jnum(h.rel_exec) << ',' << jnum(h.late_us) << ',' << h.slow_ops << ','
       << jnum(h.deviation) << ',' << (h.straggler ? "true" : "false") << '\n';
}

void write_json(std::ostream& os, const job& j, const analysis& a) {
  os << "{\"summary\":{\"files\":" << j.files << ",\"records\":" << j.ops.size() << ",\"hosts\":" << j.hosts.size()
     << ",\"communicators\":" << j.comms_used << ",\"matched_ops\":" << a.matched_ops
     << ",\"incomplete_ops\":" << a.incomplete_ops << ",\"dropped_total\":" << j.dropped_total
     << ",\"skew_source\":" << jstr(a.skew_source) << ",\"threshold\":" << jnum(a.threshold) << ",\"versions\":{";
  bool first = true;
  for (const auto& [v, n] : j.versions) os << (std::exchange(first, false) ? "" : ",") << jstr(v) << ':' << n;
  os << "},\"verdict\":" << jstr(verdict(j, a)) << "},\n\"stragglers\":[";
  first = true;
  for (auto* h : stragglers(a)) os << (std::exchange(first, false) ? "" : ",") << jstr(j.hosts[h->host]);
  os << "],\n\"sizes\":[";
  first = true;
  for (const auto& s : a.sizes) {
    const auto& c = j.comms[s.comm];
    os << (std::exchange(first, false) ? "\n" : ",\n") << "{\"comm_name\":" << jstr(c.name)
       << ",\"n_ranks\":" << c.n_ranks << ",\"nnodes\":" << c.nnodes << ",\"collective\":" << jstr(j.funcs[s.fn])
       << ",\"msg_size_bytes\":" << s.bytes << ",\"ops\":" << s.ops << ",\"records\":" << s.records
       << ",\"invalid\":" << s.invalid << ",\"busbw_p50_gbs\":" << jnum(s.busbw.p50)
       << ",\"busbw_p90_gbs\":" << jnum(s.busbw.p90) << ",\"busbw_min_gbs\":" << jnum(s.busbw.min)
       << ",\"exec_p50_us\":" << jnum(s.exec_us.p50) << ",\"time_us\":" << jnum(s.time_us)
       << ",\"time_share\":" << jnum(s.time_share) << "}";
  }
  os << "],\n\"hosts\":[";
  first = true;
  for (const auto& h : a.hosts)
    os << (std::exchange(first, false) ? "\n" : ",\n") << "{\"host\":" << jstr(j.hosts[h.host])
       << ",\"gpus\":" << h.ranks << ",\"records\":" << h.records << ",\"rel_busbw_in_op\":" << jnum(h.rel_in_op)
       << ",\"rel_busbw_job\":" << jnum(h.rel_busbw) << ",\"rel_exec_job\":" << jnum(h.rel_exec)
       << ",\"late_us\":" << jnum(h.late_us) << ",\"slow_ops\":" << h.slow_ops << ",\"deviation\":" << jnum(h.deviation)
       << ",\"straggler\":" << (h.straggler ? "true" : "false") << "}";
  os << "],\n\"ranks\":[";
  first = true;
  for (const auto& r : a.ranks) {
    const auto& c = j.comms[r.comm];
    os << (std::exchange(first, false) ? "\n" : ",\n") << "{\"comm_name\":" << jstr(c.name)
       << ",\"comm_id\":" << jstr(c.id) << ",\"rank\":" << r.rank << ",\"host\":" << jstr(j.hosts[r.host])
       << ",\"records\":" << r.records << ",\"rel_busbw_in_op\":" << jnum(r.rel_in_op)
       << ",\"rel_busbw_job\":" << jnum(r.rel_busbw) << ",\"rel_exec_job\":" << jnum(r.rel_exec)
       << ",\"rel_exec_in_op\":" << jnum(r.rel_exec_in_op) << ",\"late_us\":" << jnum(r.late_us)
       << ",\"slow_ops\":" << r.slow_ops << ",\"straggler\":" << (r.straggler ? "true" : "false") << "}";
  }
  os << "],\n\"straggler_ranks\":[";
  first = true;
  for (const auto& r : a.ranks)
    if (r.straggler)
      os << (std::exchange(first, false) ? "" : ",") << "{\"comm_name\":" << jstr(j.comms[r.comm].name)
         << ",\"comm_id\":" << jstr(j.comms[r.comm].id) << ",\"rank\":" << r.rank
         << ",\"host\":" << jstr(j.hosts[r.host]) << ",\"late_us\":" << jnum(r.late_us)
         << ",\"rel_exec_in_op\":" << jnum(r.rel_exec_in_op) << "}";
  const auto& t = a.time;
  os << "],\n\"timeline\":{\"bins\":" << t.bins << ",\"bin_s\":" << jnum(t.bin_s) << ",\"t0_ns\":" << t.t0_ns
     << ",\"series\":[";
  first = true;
  for (const auto& r : t.rows) {
    os << (std::exchange(first, false) ? "\n" : ",\n") << "{\"name\":" << jstr(r.name)
       << ",\"kind\":" << (r.host ? "\"host\"" : "\"comm\"") << ",\"n_nodes\":" << r.nnodes
       << ",\"baseline_gbs\":" << jnum(r.baseline) << ",\"busbw_gbs\":[";
    for (std::size_t b = 0; b < r.busbw.size(); ++b)
      os << (b ? "," : "") << (r.busbw[b] < 0 ? std::string("null") : jnum(r.busbw[b]));
    os << "]}";
  }
  os << "],\n\"incidents\":[";
  first = true;
  for (const auto& i : t.incidents) {
    os << (std::exchange(first, false) ? "\n" : ",\n")
       << "{\"start_s\":" << jnum(static_cast<double>(i.first_bin) * t.bin_s)
       << ",\"end_s\":" << jnum(static_cast<double>(i.last_bin + 1) * t.bin_s) << ",\"kind\":" << jstr(i.kind)
       << ",\"culprit\":" << jstr(i.culprit) << ",\"detail\":" << jstr(i.detail) << ",\"degraded\":[";
    for (std::size_t k = 0; k < i.degraded.size(); ++k) os << (k ? "," : "") << jstr(i.degraded[k]);
    os << "]}";
  }
  os << "]},\n\"missing_ranks\":[";
  first = true;
  for (const auto& m : a.missing_ranks) os << (std::exchange(first, false) ? "" : ",") << jstr(m);
  os << "],\n\"warnings\":[";
  first = true;
  for (const auto& [k, e] : j.warn.by_kind)
    os << (std::exchange(first, false) ? "\n" : ",\n") << "{\"kind\":" << jstr(k) << ",\"count\":" << e.count
       << ",\"first\":" << jstr(e.first) << "}";
  os << "]}\n";
}

namespace {
const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string heat(double rel, double thr) {
  // 1.0 (or better) green .. 1 - 3*threshold (or worse) red.
  double t = (rel - (1 - 3 * thr)) / (3 * thr);
  t = std::clamp(t, 0.0, 1.0);
  return "hsl(" + fmt::format("{:.0f}", t * 120) + ",70%,45%)";
}

/// busbw p50 by message size, one series per communicator class, for one collective.
void chart_sizes(std::ostream& os, const job& j, const analysis& a, std::uint32_t fn) {
  std::vector<const size_row*> rows;
  for (const auto& s : a.sizes)
    if (s.fn == fn && s.busbw.n) rows.push_back(&s);
  if (rows.empty()) return;
  std::set<std::string> names;
  for (auto* s : rows) names.insert(comm_label(j.comms[s->comm]));
  const double legend_rows = std::ceil(static_cast<double>(names.size()) / 3);
  const double W = 460, L = 56, R = 36, T = 26, B = 30 + 14 * legend_rows, H = 216 + B;
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (auto* s : rows) {
    const double x = std::log2(static_cast<double>(std::max<std::uint64_t>(s->bytes, 1)));
    xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymax = std::max(ymax, s->busbw.p90);
  }
  if (xmax - xmin < 1) xmin -= 1, xmax += 1;
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  auto X = [&](std::uint64_t b) {
    return L + (std::log2(static_cast<double>(std::max<std::uint64_t>(b, 1))) - xmin) / (xmax - xmin) * (W - L - R);
  };
  auto Y = [&](double v) { return T + (1 - v / ymax) * (H - T - B); };
  os << "<svg class=\"chart sizes\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" viewBox=\"0 0 " << W << ' ' << H << "\" role=\"img\"><title>" << html(j.funcs[fn])
     << " bus bandwidth by message size</title>";
  os << "<text x=\"" << L << "\" y=\"16\" class=\"t\">" << html(j.funcs[fn])
     << ": busbw p50 (GB/s, bar = min..p90) by size</text>";
  for (int i = 0; i <= 4; ++i) {
    const double v = ymax * i / 4;
    os << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
       << "\" class=\"grid\"/>";
    os << "<text x=\"" << L - 4 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\" class=\"ax\">"
       << fmt::format("{:.0f}", v) << "</text>";
  }
  std::set<std::uint64_t> sizes;
  for (auto* s : rows) sizes.insert(s->bytes);
  for (auto b : sizes)
    os << "<text x=\"" << X(b) << "\" y=\"" << H - B + 16 << "\" text-anchor=\"middle\" class=\"ax\">"
       << html(human_bytes(b)) << "</text>";
  std::map<std::string, std::vector<const size_row*>> series;
  for (auto* s : rows) series[comm_label(j.comms[s->comm])].push_back(s);
  int si = 0;
  for (auto& [name, v] : series) {
    const char* col = palette[si % 10];
    std::sort(v.begin(), v.end(), [](auto* x, auto* y) { return x->bytes < y->bytes; });
    os << "<polyline fill=\"none\" stroke=\"" << col << "\" stroke-width=\"2\" points=\"";
    for (auto* s : v) os << X(s->bytes) << ',' << Y(s->busbw.p50) << ' ';
    os << "\"/>";
    for (auto* s : v) {
      os << "<line x1=\"" << X(s->bytes) << "\" x2=\"" << X(s->bytes) << "\" y1=\"" << Y(s->busbw.min) << "\" y2=\""
         << Y(s->busbw.p90) << "\" stroke=\"" << col << "\" stroke-opacity=\"0.5\" stroke-width=\"6\"/>";
      os << "<circle cx=\"" << X(s->bytes) << "\" cy=\"" << Y(s->busbw.p50) << "\" r=\"4\" fill=\"" << col
         << "\"><title>" << html(name) << ' ' << html(human_bytes(s->bytes)) << ": p50 "
         << fmt::format("{:.2f}", s->busbw.p50) << " GB/s, p90 " << fmt::format("{:.2f}", s->busbw.p90) << ", min "
         << fmt::format("{:.2f}", s->busbw.min) << " (" << s->records << " records)</title></circle>";
    }
    const double ly = H - B + 26 + 14 * (si / 3);
    os << "<rect x=\"" << L + 6 + 120 * (si % 3) << "\" y=\"" << ly << "\" width=\"10\" height=\"10\" fill=\"" << col
       << "\"/>";
    os << "<text x=\"" << L + 20 + 120 * (si % 3) << "\" y=\"" << ly + 9 << "\" class=\"ax\">" << html(name)
       << "</text>";
    ++si;
  }
  os << "</svg>\n";
}

void chart_hosts(std::ostream& os, const job& j, const analysis& a) {
  const double W = 640, row = 22, T = 30, L = 150, R = 70;
  const double H = T + row * static_cast<double>(a.hosts.size()) + 20;
  double span = 2 * a.threshold;
  for (const auto& h : a.hosts) span = std::max(span, std::fabs(h.deviation) * 1.15);
  const double mid = L + (W - L - R) / 2, half = (W - L - R) / 2;
  os << "<svg class=\"chart hosts\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" viewBox=\"0 0 " << W << ' ' << H
     << "\" role=\"img\"><title>Per-host arrival: exec time of its latest rank vs. the op median</title>";
  os << "<text x=\"8\" y=\"16\" class=\"t\">exec time of each host's latest rank vs. the op median (red: straggler, below -"
     << fmt::format("{:.0f}", a.threshold * 100) << "%)</text>";
  const double thx = mid - a.threshold / span * half;
  os << "<line x1=\"" << thx << "\" x2=\"" << thx << "\" y1=\"" << T - 4 << "\" y2=\"" << H - 16
     << "\" class=\"thr\"/>";
  os << "<line x1=\"" << mid << "\" x2=\"" << mid << "\" y1=\"" << T - 4 << "\" y2=\"" << H - 16
     << "\" stroke=\"#333\"/>";
  double y = T;
  for (const auto& h : a.hosts) {
    const double w = std::fabs(h.deviation) / span * half;
    const double x = h.deviation < 0 ? mid - w : mid;
    const char* col = h.straggler ? "#d62728" : h.deviation < 0 ? "#f2a36b" : "#2ca02c";
    os << "<text x=\"" << L - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\" class=\"lbl\">"
       << html(j.hosts[h.host]) << "</text>";
    os << "<rect class=\"bar" << (h.straggler ? " straggler" : "") << "\" x=\"" << x << "\" y=\"" << y + 3
       << "\" width=\"" << std::max(w, 1.0) << "\" height=\"" << row - 6 << "\" fill=\"" << col << "\"><title>"
       << html(j.hosts[h.host]) << ": " << pct(1 + h.deviation) << (h.straggler ? " (straggler)" : "")
       << "</title></rect>";
    os << "<text x=\"" << W - R + 6 << "\" y=\"" << y + 14 << "\" class=\"ax\">" << pct(1 + h.deviation) << "</text>";
    y += row;
  }
  os << "</svg>\n";
}

void chart_ranks(std::ostream& os, const job& j, const analysis& a) {
  std::map<std::uint32_t, std::vector<const rank_row*>> by_comm;
  for (const auto& r : a.ranks)
    if (j.comms[r.comm].n_ranks > 1) by_comm[r.comm].push_back(&r);
  std::vector<std::uint32_t> comms;
  for (auto& [c, v] : by_comm) comms.push_back(c);
  std::sort(comms.begin(), comms.end(), [&](auto x, auto y) {
    return std::tie(j.comms[x].name, j.comms[x].id) < std::tie(j.comms[y].name, j.comms[y].id);
  });
  if (comms.size() > 64) comms.resize(64);
  std::size_t maxr = 1;
  for (auto c : comms) maxr = std::max(maxr, by_comm[c].size());
  const double cell = std::clamp(560.0 / static_cast<double>(maxr), 4.0, 28.0), row = 18, L = 230, T = 28;
  const double W = L + cell * static_cast<double>(maxr) + 10, H = T + row * static_cast<double>(comms.size()) + 8;
  os << "<svg class=\"chart ranks\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
     << "\" viewBox=\"0 0 " << W << ' ' << H << "\" role=\"img\"><title>Per-rank heat strip</title>";
  os << "<text x=\"8\" y=\"16\" class=\"t\">busbw per rank vs. the op median (green = at median, red = "
     << fmt::format("{:.0f}", a.threshold * 300) << "% or more below)</text>";
  double y = T;
  for (auto c : comms) {
    auto& v = by_comm[c];
    std::sort(v.begin(), v.end(), [](auto* x, auto* y2) { return x->rank < y2->rank; });
    os << "<text x=\"" << L - 6 << "\" y=\"" << y + 12 << "\" text-anchor=\"end\" class=\"ax\">"
       << html(comm_label(j.comms[c])) << ' ' << html(j.comms[c].id.substr(0, 10)) << "</text>";
    for (auto* r : v)
      os << "<rect class=\"cell\" x=\"" << L + cell * r->rank << "\" y=\"" << y << "\" width=\"" << cell - 1
         << "\" height=\"" << row - 2 << "\" fill=\"" << heat(r->rel_in_op, a.threshold) << "\"><title>"
         << html(j.comms[c].name) << " rank " << r->rank << " on " << html(j.hosts[r->host]) << ": "
         << pct(r->rel_in_op) << " vs op median, " << pct(r->rel_busbw) << " vs job</title></rect>";
    y += row;
  }
  os << "</svg>\n";
}
}  // namespace

void write_html(std::ostream& os, const job& j, const analysis& a) {
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ncclinsp report</title>\n<style>\n"
        "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#222;max-width:1200px}\n"
        "table{border-collapse:collapse;margin:8px 0 20px;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
        "th{background:#f0f0f0}td.l,th.l{text-align:left}tr.straggler td{background:#fde0dc;font-weight:bold}\n"
        ".verdict{font-size:18px;padding:10px;border-left:6px solid #d62728;background:#fff4f2}.verdict.ok{border-color:#2ca02c;background:#f2fff2}\n"
        "svg{margin:6px 12px 12px 0;background:#fafafa;border:1px solid #ddd}svg .t{font-size:13px;font-weight:bold}svg .ax{font-size:11px;fill:#444}\n"
        "svg .lbl{font-size:12px}svg .grid{stroke:#e2e2e2}svg .thr{stroke:#d62728;stroke-dasharray:4 3}\n"
        ".warn{color:#8a5300}\n</style></head><body>\n";
  os << "<h1>ncclinsp report</h1>\n<p>" << j.files << " files, " << j.ops.size() << " op records, " << j.hosts.size()
     << " hosts, " << j.comms_used << " communicators; " << a.matched_ops << " matched collectives ("
     << a.incomplete_ops << " seen on fewer ranks than n_ranks); arrival skew from " << html(a.skew_source)
     << ".</p>\n";
  const bool bad = !stragglers(a).empty();
  os << "<p class=\"verdict" << (bad ? "" : " ok") << "\" id=\"verdict\">" << html(verdict(j, a)) << "</p>\n";

  os << "<h2>Hosts</h2>\n";
  chart_hosts(os, j, a);
  os << "<table id=\"hosts\"><tr><th class=\"l\">host</th><th>gpus</th><th>records</th><th>busbw vs op</th><th>busbw vs job</th><th>exec vs "
        "job</th><th>late (µs)</th><th>late ops</th><th class=\"l\">verdict</th></tr>\n";
  for (const auto& h : a.hosts)
    os << "<tr" << (h.straggler ? " class=\"straggler\"" : "") << "><td class=\"l\">" << html(j.hosts[h.host])
       << "</td><td>" << h.ranks << "</td><td>" << h.records << "</td><td>" << pct(h.rel_in_op) << "</td><td>"
       << pct(h.rel_busbw) << "</td><td>" << pct(h.rel_exec) << "</td><td>" << fmt::format("{:.1f}", h.late_us)
       << "</td><td>" << h.slow_ops << "</td><td class=\"l\">" << (h.straggler ? "STRAGGLER" : "ok") << "</td></tr>\n";
  os << "</table>\n";
  if (a.time.bins) {
    const auto& t = a.time;
    os << "<h2>Timeline</h2>\n<p>Bus bandwidth per communicator and per host in bins of "
       << fmt::format("{:.2f}", t.bin_s) << " s (cell: GB/s; red: below "
       << fmt::format("{:.0f}", (1 - a.threshold) * 100) << "% of the series' baseline; incident bins outlined).</p>\n"
       << "<table id=\"timeline\" style=\"font-size:10px\"><tr><th class=\"l\">series</th><th>base</th>";
    std::vector<char> inc(t.bins, 0);
    for (const auto& i : t.incidents)
      for (auto b = i.first_bin; b <= i.last_bin; ++b) inc[b] = 1;
    for (std::size_t b = 0; b < t.bins; ++b)
      os << "<th" << (inc[b] ? " class=\"incident\" style=\"outline:2px solid #d62728\"" : "") << ">" << tl_time(t, b)
         << "</th>";
    os << "</tr>\n";
    for (const auto& r : t.rows) {
      os << "<tr><td class=\"l\">" << (r.host ? "host " : "") << html(r.name) << "</td><td>"
         << fmt::format("{:.1f}", r.baseline) << "</td>";
      for (double v : r.busbw)
        os << "<td" << (v >= 0 && v < (1 - a.threshold) * r.baseline ? " style=\"background:#f6b0a8\"" : "") << ">"
           << (v < 0 ? std::string() : fmt::format("{:.0f}", v)) << "</td>";
      os << "</tr>\n";
    }
    os << "</table>\n<ul id=\"incidents\">\n";
    for (const auto& i : t.incidents) os << "<li>" << html(incident_line(t, i)) << "</li>\n";
    os << "</ul>\n";
  }
  os << "<h2>Bus bandwidth by message size</h2>\n<div>";
  std::set<std::uint32_t> fns;
  for (const auto& s : a.sizes) fns.insert(s.fn);
  for (auto f : fns) chart_sizes(os, j, a, f);
  os << "</div>\n<table id=\"sizes\"><tr><th class=\"l\">comm</th><th class=\"l\">collective</th><th>size</th><th>ops</th><th>records</th><th>busbw "
        "p50</th><th>p90</th><th>min</th><th>exec p50 (µs)</th><th>time %</th><th>invalid</th></tr>\n";
  for (const auto& s : a.sizes)
    os << "<tr><td class=\"l\">" << html(comm_label(j.comms[s.comm])) << "</td><td class=\"l\">" << html(j.funcs[s.fn])
       << "</td><td>" << html(human_bytes(s.bytes)) << "</td><td>" << s.ops << "</td><td>" << s.records << "</td><td>"
       << fmt::format("{:.2f}", s.busbw.p50) << "</td><td>" << fmt::format("{:.2f}", s.busbw.p90) << "</td><td>"
       << fmt::format("{:.2f}", s.busbw.min) << "</td><td>" << fmt::format("{:.1f}", s.exec_us.p50) << "</td><td>"
       << fmt::format("{:.1f}", s.time_share * 100) << "</td><td>" << s.invalid << "</td></tr>\n";
  os << "</table>\n<h2>Ranks</h2>\n";
  chart_ranks(os, j, a);
  os << "<table id=\"ranks\"><tr><th class=\"l\">comm</th><th class=\"l\">id</th><th>rank</th><th class=\"l\">host</th><th>records</th><th>busbw vs "
        "op</th><th>busbw vs job</th><th>late (µs)</th><th>slow ops</th></tr>\n";
  for (std::size_t i = 0; i < a.ranks.size() && i < 50; ++i) {
    const auto& r = a.ranks[i];
    os << "<tr><td class=\"l\">" << html(comm_label(j.comms[r.comm])) << "</td><td class=\"l\">"
       << html(j.comms[r.comm].id) << "</td><td>" << r.rank << "</td><td class=\"l\">" << html(j.hosts[r.host])
       << "</td><td>" << r.records << "</td><td>" << pct(r.rel_in_op) << "</td><td>" << pct(r.rel_busbw) << "</td><td>"
       << fmt::format("{:.1f}", r.late_us) << "</td><td>" << r.slow_ops << "</td></tr>\n";
  }
  os << "</table>\n";
  if (!j.warn.by_kind.empty() || !a.missing_ranks.empty()) {
    os << "<h2>Warnings</h2>\n<ul class=\"warn\">\n";
    for (const auto& [k, e] : j.warn.by_kind)
      os << "<li>" << html(k) << " (" << e.count << "; first: " << html(e.first) << ")</li>\n";
    os << "</ul>\n";
  }
  os << "<p><small>Generated by ncclinsp-report. busbw vs op: a rank's bus bandwidth divided by the median over the ranks of the same op "
        "(communicator, collective, sequence number); for hosts, only ops spanning several hosts count. busbw vs job: divided by the median "
        "of all records of the same communicator name/shape, collective and size.</small></p>\n</body></html>\n";
}

}  // namespace ncclinsp::report
