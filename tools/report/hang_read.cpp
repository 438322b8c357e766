// ncclinsp-report hang: reading the state dumps (include/ncclinsp/format/state_dump.hpp) with simdjson.
#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "hang.hpp"

namespace ncclinsp::report::hang {
namespace {

namespace fs = std::filesystem;
using simdjson::dom::element;

std::string str(element e, std::string_view k) {
  std::string_view v;
  return e[k].get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
}
std::int64_t integer(element e, std::string_view k, std::int64_t def) {
  element x;
  if (e[k].get(x) != simdjson::SUCCESS) return def;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  if (x.get(i) == simdjson::SUCCESS) return i;
  if (x.get(u) == simdjson::SUCCESS) return static_cast<std::int64_t>(u);
  return def;
}
std::uint64_t uinteger(element e, std::string_view k) {
  element x;
  std::uint64_t u = 0;
  return e[k].get(x) == simdjson::SUCCESS && x.get(u) == simdjson::SUCCESS ? u : 0;
}
double number(element e, std::string_view k) {
  element x;
  double d = 0;
  if (e[k].get(x) != simdjson::SUCCESS) return 0;
  if (x.get(d) == simdjson::SUCCESS) return d;
  return static_cast<double>(integer(e, k, 0));
}
std::vector<int> ints(element e, std::string_view k) {
  std::vector<int> v;
  simdjson::dom::array a;
  if (e[k].get(a) != simdjson::SUCCESS) return v;
  for (element x : a) {
    std::int64_t i = 0;
    if (x.get(i) == simdjson::SUCCESS) v.push_back(static_cast<int>(i));
  }
  return v;
}

op read_op(element e) {
  op o;
  o.seq = uinteger(e, "seq");
  o.fn = str(e, "op");
  o.bytes = uinteger(e, "bytes");
  o.peer = static_cast<int>(integer(e, "peer", -1));
  o.state = str(e, "state");
  o.start_ns = uinteger(e, "start_ns");
  o.end_ns = uinteger(e, "end_ns");
  o.gpu_ns = uinteger(e, "gpu_ns");
  o.age_s = number(e, "age_s");
  o.channels = static_cast<std::uint32_t>(uinteger(e, "channels"));
  o.ch_started = ints(e, "channels_started");
  o.ch_ended = ints(e, "channels_ended");
  return o;
}

bool read_one(simdjson::dom::parser& p, const std::string& path, dump& d, std::string& why) {
  element doc;
  if (auto err = p.load(path).get(doc)) {
    why = simdjson::error_message(err);
    return false;
  }
  if (str(doc, "format") != "ncclinsp-state") {
    why = "not an ncclinsp state dump (no \"format\":\"ncclinsp-state\")";
    return false;
  }
  if (integer(doc, "version", 0) != 1) {
    why = "state dump version " + std::to_string(integer(doc, "version", 0)) + " (this tool reads version 1)";
    return false;
  }
  d.path = path;
  d.reason = str(doc, "reason");
  d.node = str(doc, "node");
  d.hostname = str(doc, "hostname");
  d.job_id = str(doc, "job_id");
  d.uuid = str(doc, "uuid");
  d.pid = static_cast<long>(integer(doc, "pid", 0));
  d.gpu = static_cast<int>(integer(doc, "gpu", -1));
  d.time_ns = uinteger(doc, "time_ns");
  d.warn_after_s = static_cast<std::uint32_t>(uinteger(doc, "warn_after_s"));
  d.every_s = static_cast<std::uint32_t>(uinteger(doc, "every_s"));
  simdjson::dom::array comms;
  if (doc["comms"].get(comms) != simdjson::SUCCESS) {
    why = "no \"comms\" array";
    return false;
  }
  for (element c : comms) {
    comm_view v;
    v.name = str(c, "name");
    v.hash = str(c, "hash");
    v.rank = static_cast<int>(integer(c, "rank", 0));
    v.nranks = static_cast<int>(integer(c, "nranks", 0));
    v.nnodes = static_cast<int>(integer(c, "nnodes", 0));
    simdjson::dom::object last;
    if (c["last_seq"].get(last) == simdjson::SUCCESS)
      for (auto [k, x] : last) {
        std::int64_t n = 0;
        if (x.get(n) == simdjson::SUCCESS) v.last_seq[std::string(k)] = n;
      }
    v.inflight_total = uinteger(c, "inflight_total");
    v.oldest_age_s = number(c, "oldest_age_s");
    simdjson::dom::array a;
    if (c["completed"].get(a) == simdjson::SUCCESS)
      for (element o : a) v.completed.push_back(read_op(o));
    if (c["inflight"].get(a) == simdjson::SUCCESS)
      for (element o : a) v.inflight.push_back(read_op(o));
    element px;
    if (c["proxy"].get(px) == simdjson::SUCCESS) {
      v.proxy = true;
      v.proxy_steps = uinteger(px, "steps");
      v.proxy_idle_s = number(px, "idle_s");
    }
    d.comms.push_back(std::move(v));
  }
  return true;
}

bool is_dump_name(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.size() > 11 && n.compare(n.size() - 11, 11, ".state.json") == 0;
}

}  // namespace

dumps read_dumps(const std::vector<std::string>& inputs) {
  dumps out;
  std::vector<std::string> paths;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      for (fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec), end;
           !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec) && is_dump_name(it->path())) paths.push_back(it->path().string());
    } else if (fs::is_regular_file(in, ec)) {
      paths.push_back(in);
    } else {
      out.errors.push_back(in + ": no such file or directory");
    }
  }
  std::sort(paths.begin(), paths.end());
  simdjson::dom::parser parser;
  for (const auto& p : paths) {
    dump d;
    std::string why;
    if (read_one(parser, p, d, why))
      out.files.push_back(std::move(d));
    else
      out.errors.push_back(p + ": " + why);
  }
  return out;
}

}  // namespace ncclinsp::report::hang
