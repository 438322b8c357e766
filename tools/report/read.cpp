// Reading JSON-lines files (ncclinsp JSON mode / NVIDIA Inspector v4.x) with simdjson.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "report.hpp"

namespace ncclinsp::report {
namespace fs = std::filesystem;

namespace {

struct reader {
  job& j;
  simdjson::dom::parser parser;
  std::unordered_map<std::string, std::uint32_t> comm_of, host_of, fn_of;
  std::map<std::tuple<std::string, std::int64_t, std::string, std::int64_t>, std::uint64_t>
      drops;                                                                 // last per comm rank
  std::map<std::pair<std::string, std::int64_t>, std::uint64_t> sink_drops;  // per process

  explicit reader(job& jj) : j(jj) {}

  std::uint32_t intern(std::unordered_map<std::string, std::uint32_t>& m, std::vector<std::string>& v,
                       std::string_view s) {
    auto [it, fresh] = m.try_emplace(std::string(s), static_cast<std::uint32_t>(v.size()));
    if (fresh) v.emplace_back(s);
    return it->second;
  }

  static std::string_view str(simdjson::dom::element e, std::string_view key, std::string_view def = {}) {
    std::string_view v;
    if (e[key].get_string().get(v)) return def;
    return v;
  }
  static bool has(simdjson::dom::element e, std::string_view key) {
    simdjson::dom::element x;
    return !e[key].get(x);
  }
  static std::int64_t integer(simdjson::dom::element e, std::string_view key, std::int64_t def) {
    simdjson::dom::element x;
    if (e[key].get(x)) return def;
    std::int64_t i;
    if (!x.get_int64().get(i)) return i;
    std::uint64_t u;
    if (!x.get_uint64().get(u)) return static_cast<std::int64_t>(u);
    double d;
    if (!x.get_double().get(d)) return static_cast<std::int64_t>(d);
    return def;
  }
  static std::uint64_t uinteger(simdjson::dom::element e, std::string_view key, std::uint64_t def) {
    simdjson::dom::element x;
    if (e[key].get(x)) return def;
    std::uint64_t u;
    if (!x.get_uint64().get(u)) return u;
    double d;
    if (!x.get_double().get(d) && d >= 0) return static_cast<std::uint64_t>(d);
    return def;
  }
  /// Numbers, or Inspector's "nan" strings (-> NaN).
  static double number(simdjson::dom::element e, std::string_view key, double def) {
    simdjson::dom::element x;
    if (e[key].get(x)) return def;
    double d;
    if (!x.get_double().get(d)) return d;
    std::string_view s;
    if (!x.get_string().get(s)) return std::nan("");
    return def;
  }

  void line(const char* p, std::size_t n, std::size_t cap, const std::string& where, bool last_unterminated) {
    simdjson::dom::element doc;
    // The buffer is a padded_string holding the whole file: the bytes after this line are readable.
    if (auto err = parser.parse(reinterpret_cast<const std::uint8_t*>(p), n, false).get(doc); err) {
      (void)cap;
      if (last_unterminated)
        j.warn.add("truncated last line (file still being written, or the writer was killed)", where);
      else
        j.warn.add("malformed JSON line", where + ": " + simdjson::error_message(err));
      return;
    }
    simdjson::dom::object obj;
    if (doc.get_object().get(obj)) {
      j.warn.add("line is not a JSON object", where);
      return;
    }
    simdjson::dom::element hdr, meta;
    if (doc["header"].get(hdr) || doc["metadata"].get(meta)) {
      j.warn.add("record without header/metadata", where);
      return;
    }
    std::string kind;
    simdjson::dom::element body;
    for (auto field : obj) {
      if (field.key == "header" || field.key == "metadata") continue;
      kind = std::string(field.key);
      body = field.value;
      break;
    }
    const std::string_view ver = str(meta, "inspector_output_format_version", "unversioned");
    ++j.versions[std::string(ver)];
    if (ver != "v4.0" && ver != "v4.1" && ver != "v4.2" && ver != "v4.3")
      j.warn.add("unknown format version '" + std::string(ver) + "' (read as v4.x)", where);
    const std::string_view id = str(hdr, "id", "");
    if (id.empty()) {
      j.warn.add("record without header.id", where);
      return;
    }
    const bool ours = str(meta, "git_rev").starts_with("ncclinsp");
    const std::string_view node = str(meta, "node", str(meta, "hostname", "unknown"));
    const std::int64_t rank = integer(hdr, "rank", -1);
    if (kind == "dump_stats") {
      ++j.dump_stats_lines;
      const std::int64_t pid = integer(meta, "pid", 0);
      if (has(body, "ring_dropped_total")) {  // ncclinsp >= 0.1 json sink: unambiguous, cumulative
        drops[{std::string(id), rank, std::string(node), pid}] = uinteger(body, "ring_dropped_total", 0);
        auto& sd = sink_drops[{std::string(node), pid}];
        sd = std::max(sd, uinteger(body, "sink_dropped_total", 0));
      } else {
        drops[{std::string(id), rank, std::string(node), pid}] = uinteger(body, "dropped_total", 0);
      }
      return;
    }
    if (kind == "proxy_stats") {
      proxy_line(id, hdr, meta, body, ours, node, rank, where);
      return;
    }
    const bool p2p = kind == "p2p_perf";
    if (kind != "coll_perf" && !p2p) {
      j.warn.add("unknown record kind '" + (kind.empty() ? std::string("<none>") : kind) + "' (skipped)", where);
      return;
    }
    if (rank < 0) {
      j.warn.add("record without header.rank", where);
      return;
    }
    op_rec r;
    const std::uint32_t ci = intern_comm(id, hdr, ours, where);
    r.comm = ci;
    r.rank = static_cast<std::uint32_t>(rank);
    r.host = intern(host_of, j.hosts, node);
    r.p2p = p2p;
    const std::string pre = p2p ? "p2p" : "coll";
    const std::string_view fname = str(body, pre, "");
    if (fname.empty()) {
      j.warn.add("record without function name", where);
      return;
    }
    r.fn = intern(fn_of, j.funcs, fname);
    r.sn = uinteger(body, pre + "_sn", 0);
    if (p2p) r.peer = static_cast<std::int32_t>(integer(body, "p2p_peer", -1));
    r.bytes = uinteger(body, pre + "_msg_size_bytes", 0);
    r.exec_us = number(body, pre + "_exec_time_us", 0);
    r.busbw = number(body, pre + "_busbw_gbs", 0);
    r.start_ns = uinteger(body, pre + "_start_ts_ns", 0);
    r.end_ns = uinteger(body, pre + "_end_ts_ns", 0);
    bool valid = true;
    simdjson::dom::element v;
    if (!body[pre + "_valid"].get(v) && v.get_bool().get(valid)) valid = true;
    if (!std::isfinite(r.busbw) || !std::isfinite(r.exec_us) || r.busbw <= 0 || r.exec_us <= 0 || r.bytes == 0)
      valid = false;
    r.valid = valid;
    j.ops.push_back(r);
  }

  /// Cumulative totals per (comm, rank, process, peer, direction): the latest line wins.
  std::map<std::tuple<std::uint32_t, std::int64_t, std::string, std::int64_t, std::int64_t, bool>, std::size_t>
      proxy_of;
  void proxy_line(std::string_view id, simdjson::dom::element hdr, simdjson::dom::element meta,
                  simdjson::dom::element body, bool ours, std::string_view node, std::int64_t rank,
                  const std::string& where) {
    simdjson::dom::array peers;
    if (rank < 0 || body["peers"].get_array().get(peers)) {
      j.warn.add("proxy_stats line without rank or peers", where);
      return;
    }
    const std::uint32_t ci = intern_comm(id, hdr, ours, where);
    const std::uint32_t host = intern(host_of, j.hosts, node);
    const std::int64_t pid = integer(meta, "pid", 0);
    for (simdjson::dom::element p : peers) {
      proxy_rec r;
      r.comm = ci, r.rank = static_cast<std::uint32_t>(rank), r.host = host;
      r.peer = static_cast<std::int32_t>(integer(p, "peer", -1));
      r.send = str(p, "direction") == "send";
      r.network_ns = uinteger(p, "network_ns", 0);
      r.bytes = uinteger(p, "bytes", 0);
      r.steps = uinteger(p, "steps", 0);
      if (r.peer < 0) continue;
      auto [it, fresh] = proxy_of.try_emplace({ci, rank, std::string(node), pid, r.peer, r.send}, j.proxy.size());
      if (fresh)
        j.proxy.push_back(r);
      else if (r.steps >= j.proxy[it->second].steps)
        j.proxy[it->second] = r;  // cumulative: the latest
    }
  }

  std::uint32_t intern_comm(std::string_view id, simdjson::dom::element hdr, bool ours, const std::string& where) {
    auto [it, fresh] = comm_of.try_emplace(std::string(id), static_cast<std::uint32_t>(j.comms.size()));
    const std::string_view name = str(hdr, "comm_name", "unknown");
    const int n = static_cast<int>(integer(hdr, "n_ranks", 0));
    const int nn = static_cast<int>(integer(hdr, "nnodes", 0));
    if (fresh) {
      comm_info c;
      c.id = std::string(id);
      c.name = std::string(name);
      c.n_ranks = n;
      c.nnodes = nn;
      c.id_truncated = !ours && id.size() == 16 && id.starts_with("0x");
      j.comms.push_back(std::move(c));
    } else {
      auto& c = j.comms[it->second];
      if (c.n_ranks != n || c.nnodes != nn) {
        j.warn.add("communicator with inconsistent n_ranks/nnodes across records", where + ": " + std::string(id));
        c.n_ranks = std::max(c.n_ranks, n);
        c.nnodes = std::max(c.nnodes, nn);
      }
      if (c.name == "unknown" && name != "unknown") c.name = std::string(name);
    }
    return it->second;
  }

  void buffer(const simdjson::padded_string& data, const std::string& where) {
    const char* b = data.data();
    const std::size_t size = data.size();
    std::size_t pos = 0, lineno = 0;
    while (pos < size) {
      ++lineno;
      const char* nl = static_cast<const char*>(std::memchr(b + pos, '\n', size - pos));
      const std::size_t end = nl ? static_cast<std::size_t>(nl - b) : size;
      std::size_t len = end - pos;
      while (len && (b[pos + len - 1] == '\r' || b[pos + len - 1] == ' ')) --len;
      if (len) {
        ++j.lines;
        line(b + pos, len, size - pos + simdjson::SIMDJSON_PADDING, where + ":" + std::to_string(lineno),
             nl == nullptr);
      }
      pos = end + 1;
    }
  }
};

bool is_log_name(const std::string& name) {
  static const std::regex re(R"(.*\.(log|jsonl)(\.[0-9]+)?)");
  return std::regex_match(name, re);
}

}  // namespace

static void finish_reader(job& j, reader& r) {
  for (const auto& [k, v] : r.drops) j.dropped_total += v;
  for (const auto& [k, v] : r.sink_drops) j.dropped_total += v;
}

job read_job(const std::vector<std::string>& inputs) {
  job j;
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      for (auto it = fs::recursive_directory_iterator(in, fs::directory_options::skip_permission_denied, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        const std::string name = it->path().filename().string();
        if (is_log_name(name))
          files.push_back(it->path().string());
        else if (name.ends_with(".gz"))
          j.warn.add("compressed file skipped (gunzip it first)", it->path().string());
      }
    } else if (fs::exists(in, ec)) {
      files.push_back(in);
    } else {
      j.warn.add("input not found", in);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  reader r(j);
  for (const auto& f : files) {
    simdjson::padded_string data;
    if (auto err = simdjson::padded_string::load(f).get(data); err) {
      j.warn.add("cannot read file", f + ": " + simdjson::error_message(err));
      continue;
    }
    ++j.files;
    r.buffer(data, f);
  }
  finish_reader(j, r);
  finish_job(j);
  return j;
}

void finish_job(job& j) {
  // Inspector (v4.0..v4.2) prints the communicator id truncated to 14 hex digits. Map such an id onto
  // the one full id (from ncclinsp files of the same job) it is a prefix of; else keep it, warned.
  std::vector<std::uint32_t> remap(j.comms.size());
  for (std::uint32_t i = 0; i < j.comms.size(); ++i) {
    remap[i] = i;
    if (!j.comms[i].id_truncated) continue;
    std::uint32_t found = UINT32_MAX, n = 0;
    for (std::uint32_t k = 0; k < j.comms.size(); ++k)
      if (!j.comms[k].id_truncated && j.comms[k].id.size() == 18 && j.comms[k].id.starts_with(j.comms[i].id))
        found = k, ++n;
    if (n == 1) {
      remap[i] = found;
      j.warn.add("truncated 14-digit communicator id mapped onto the full id",
                 j.comms[i].id + " -> " + j.comms[found].id);
    } else {
      j.warn.add("truncated 14-digit communicator id (Inspector format; distinct communicators may merge)",
                 j.comms[i].id);
    }
  }
  for (auto& o : j.ops) o.comm = remap[o.comm];
  for (auto& p : j.proxy) p.comm = remap[p.comm];
  if (j.versions.size() > 1) {
    std::string s;
    for (const auto& [v, n] : j.versions) s += (s.empty() ? "" : ", ") + v + " (" + std::to_string(n) + " lines)";
    j.warn.add("mixed format versions", s);
  }
  // Duplicates (the same file given twice, overlapping copies): keep the first.
  std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint64_t, std::int32_t, std::uint32_t>> seen;
  std::vector<op_rec> kept;
  kept.reserve(j.ops.size());
  for (const auto& o : j.ops) {
    if (!seen.emplace(o.comm, o.rank, o.fn, o.sn, o.peer, o.host).second) {
      j.warn.add(
          "duplicate record (same comm, rank, function, sequence number) skipped",
          j.comms[o.comm].id + " rank " + std::to_string(o.rank) + " " + j.funcs[o.fn] + " sn " + std::to_string(o.sn));
      continue;
    }
    kept.push_back(o);
  }
  j.ops.swap(kept);
  std::set<std::uint32_t> used;
  for (const auto& o : j.ops) used.insert(o.comm);
  j.comms_used = used.size();
  if (j.dropped_total)
    j.warn.add("records dropped by the writer (dump_stats.dropped_total; ring or file rotation)",
               "sum of the last dump_stats of each rank", j.dropped_total);
  std::uint64_t invalid = 0;
  for (const auto& o : j.ops) invalid += !o.valid;
  if (invalid)
    j.warn.add("records without a valid bandwidth (unknown size, zero time or NaN), excluded from bandwidth statistics",
               "see the 'invalid' column", invalid);
}

}  // namespace ncclinsp::report
