// ncclinsp-replay: feeds a recorded trace of NCCL profiler callbacks (abi/callback_text.hpp,
// docs/traces.md) through a profiler plugin's exported table, on a CPU, deterministically, and
// prints what the plugin published.
//
//   ncclinsp-replay [--plugin SO] [--abi N] [--speed X] [--hold S] [--out DIR] TRACE
//
// One thread calls the plugin in the trace's order. Handles are mapped: a start's recorded id
// names the handle the plugin returns now, and later stops, records, parents and parentGroups of
// that id get it; a NULL handle gets no stop or record (NCCL makes none). Contexts are mapped the
// same way; NCCL's activation mask is one int that lives for the whole run, passed to every init,
// as NCCL's. --speed X paces the calls at X times the recorded pace (0: as fast as possible, the
// default); --hold S waits S seconds before the first finalize and samples the plugin's .prom file
// every second (the in-flight ops and the oldest one's age: the hang rule's input).
// Without --out the plugin writes Prometheus files into a temporary directory (NCCL_INSPECTOR_*
// variables already set are kept). Exit: 0, 1 a malformed trace or no plugin, 2 usage.
#include <dlfcn.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ncclinsp/abi/versions.hpp"

namespace {

namespace abi = ncclinsp::abi;
namespace fs = std::filesystem;

struct options {
  std::string plugin, trace, out;
  int abi_version = 0;  // 0: the trace's header, else 5
  double speed = 0;
  double hold_s = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "ncclinsp-replay: %s\nusage: ncclinsp-replay [--plugin SO] [--abi 4|5|6|7] [--speed X] [--hold S] "
               "[--out DIR] TRACE\n",
               why);
  std::exit(2);
}

/// One line split into its words; key=value words looked up by key.
struct line_words {
  std::vector<std::string_view> w;
  std::unordered_map<std::string_view, std::string_view> kv;
  explicit line_words(std::string_view s) {
    for (std::size_t p = 0; p < s.size();) {
      const std::size_t e = std::min(s.find(' ', p), s.size());
      if (e > p) w.push_back(s.substr(p, e - p));
      p = e + 1;
    }
    for (auto x : w)
      if (const auto eq = x.find('='); eq != std::string_view::npos) kv[x.substr(0, eq)] = x.substr(eq + 1);
  }
};

bool to_u64(std::string_view s, std::uint64_t& v, int base = 10) {
  if (base == 16 && s.starts_with("0x")) s.remove_prefix(2);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, base);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

class replayer {
 public:
  explicit replayer(const options& o) : o_(o) {}

  int run() {
    std::ifstream in(o_.trace);
    if (!in) return fail("cannot read " + o_.trace);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
    int v = o_.abi_version;
    for (const auto& l : lines)
      if (l.starts_with("# ncclinsp-trace")) {
        const line_words h(l);
        if (auto it = h.kv.find("abi"); it != h.kv.end() && !v) v = std::atoi(std::string(it->second).c_str());
      }
    if (!v) v = 5;
    if (!abi::is_version(v)) return fail("profiler ABI v" + std::to_string(v) + " is not one of v4..v7");
    lib_ = ::dlopen(o_.plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return fail(std::string("dlopen: ") + ::dlerror());
    int rc = 0;
    abi::with_abi(v, [&](auto ver) { rc = replay<decltype(ver)::value>(lines); });
    return rc;
  }

 private:
  int fail(const std::string& why) {
    std::fprintf(stderr, "ncclinsp-replay: %s\n", why.c_str());
    return 1;
  }

  template <int V>
  int replay(const std::vector<std::string>& lines) {
    using table_t = typename abi::version<V>::table;
    const std::string sym = "ncclProfiler_v" + std::to_string(V);
    const auto* t = static_cast<const table_t*>(::dlsym(lib_, sym.c_str()));
    if (!t) return fail(o_.plugin + " exports no " + sym);
    std::printf("replaying %s through %s (%s)\n", o_.trace.c_str(), o_.plugin.c_str(), sym.c_str());
    const auto wall0 = std::chrono::steady_clock::now();
    std::uint64_t t0 = 0;
    bool held = o_.hold_s <= 0;
    for (std::size_t n = 0; n < lines.size(); ++n) {
      const std::string& l = lines[n];
      if (l.empty() || l[0] == '#') continue;
      const line_words w(l);
      std::uint64_t ts = 0;
      if (w.w.size() < 4 || w.w[0].size() != 1 || !to_u64(w.w[1], ts))
        return fail("line " + std::to_string(n + 1) + ": not a callback: " + l);
      if (!t0) t0 = ts;
      pace(wall0, ts - t0);
      const char kind = w.w[0][0];
      if (kind == 'F' && !held) {
        hold();
        held = true;
      }
      if (!call<V>(*t, kind, w)) return fail("line " + std::to_string(n + 1) + ": malformed: " + l);
      ++calls_;
    }
    if (!held) hold();
    std::printf("replayed %llu callbacks (%llu starts, %llu stops, %llu records; %llu without a handle)\n",
                (unsigned long long)calls_, (unsigned long long)starts_, (unsigned long long)stops_,
                (unsigned long long)records_, (unsigned long long)skipped_);
    return 0;
  }

  void pace(std::chrono::steady_clock::time_point wall0, std::uint64_t trace_ns) const {
    if (o_.speed <= 0) return;
    std::this_thread::sleep_until(wall0 + std::chrono::nanoseconds(static_cast<std::int64_t>(trace_ns / o_.speed)));
  }

  /// Samples the plugin's .prom files every second while NCCL would be idle before its finalize.
  void hold() const {
    if (o_.hold_s <= 0) return;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(o_.hold_s);
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double inflight = 0, age = 0;
      for (const auto& f : prom_files()) {
        std::ifstream in(f);
        for (std::string l; std::getline(in, l);) {
          if (l.starts_with("ncclinsp_inflight_ops{")) inflight += value_of(l);
          if (l.starts_with("ncclinsp_oldest_inflight_age_seconds{")) age = std::max(age, value_of(l));
        }
      }
      std::printf("hold %.1f s: ncclinsp_inflight_ops %g, ncclinsp_oldest_inflight_age_seconds %g\n", at, inflight,
                  age);
      std::fflush(stdout);
    }
  }

  std::vector<fs::path> prom_files() const {
    std::vector<fs::path> v;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(o_.out, ec))
      if (e.path().extension() == ".prom") v.push_back(e.path());
    return v;
  }
  static double value_of(const std::string& l) {
    const auto sp = l.rfind(' ');
    return sp == std::string::npos ? 0 : std::atof(l.c_str() + sp + 1);
  }

  // ---- one callback ----------------------------------------------------------------------------
  template <int V>
  bool call(const typename abi::version<V>::table& t, char kind, const line_words& w) {
    std::uint64_t a = 0, b = 0;
    switch (kind) {
      case 'I': {  // I t tid ctx commId name nNodes nranks rank mask=M
        if (w.w.size() < 9 || !to_u64(w.w[3], a) || !to_u64(w.w[4], b, 16)) return false;
        const int nnodes = std::atoi(std::string(w.w[6]).c_str()), nranks = std::atoi(std::string(w.w[7]).c_str()),
                  rank = std::atoi(std::string(w.w[8]).c_str());
        void* ctx = nullptr;
        const char* name = text(w.w[5]);
        if constexpr (V == 4)
          t.init(&ctx, &mask_, name, b, nnodes, nranks, rank, logger);
        else
          t.init(&ctx, b, &mask_, name, nnodes, nranks, rank, logger);
        contexts_[a] = ctx;
        return true;
      }
      case 'F':  // F t tid ctx
        if (!to_u64(w.w[3], a)) return false;
        t.finalize(contexts_[a]);
        return true;
      case 'E':  // E t tid id
        if (!to_u64(w.w[3], a)) return false;
        if (void* h = handle(a)) {
          t.stopEvent(h);
          ++stops_;
        } else {
          ++skipped_;
        }
        return true;
      case 'R': {  // R t tid id state [key=value]
        if (w.w.size() < 5 || !to_u64(w.w[3], a)) return false;
        const int state = std::atoi(std::string(w.w[4]).c_str());
        abi::state_args args{};
        bool with_args = false;
        for (const char* k : {"trans", "appended", "ptimer", "data", "raw"})
          if (auto it = w.kv.find(k); it != w.kv.end()) {
            std::uint64_t v = 0;
            if (!to_u64(it->second, v, it->second.starts_with("0x") ? 16 : 10)) return false;
            if (std::string_view(k) == "appended")
              args.proxyCtrl.appendedProxyOps = static_cast<int>(v);
            else
              std::memcpy(&args, &v, sizeof v);
            with_args = true;
          }
        if (void* h = handle(a)) {
          t.recordEventState(h, static_cast<abi::event_state>(state), with_args ? &args : nullptr);
          ++records_;
        } else {
          ++skipped_;
        }
        return true;
      }
      case 'S':
        return start<V>(t, w);
      default:
        return false;
    }
  }

  /// S t tid ctx id type parent rank key=value...
  template <int V>
  bool start(const typename abi::version<V>::table& t, const line_words& w) {
    using descr_t = typename abi::version<V>::descr;
    std::uint64_t ctx = 0, id = 0, type = 0, parent = 0;
    if (w.w.size() < 8 || !to_u64(w.w[3], ctx) || !to_u64(w.w[4], id) || !to_u64(w.w[5], type) ||
        !to_u64(w.w[6], parent))
      return false;
    descr_t d{};
    if constexpr (V == 4) {
      if (type > 0xFF) return true;  // an API event: NCCL 2.27 (ABI v4) has none
      d.type = static_cast<std::uint8_t>(type);
    } else {
      d.type = type;
    }
    d.parentObj = handle(parent);
    d.rank = std::atoi(std::string(w.w[7]).c_str());
    fill(d, type, w);
    void* h = nullptr;
    t.startEvent(contexts_[ctx], &h, &d);
    ++starts_;
    if (id) handles_[id] = h;
    return true;
  }

  /// The fields a Coll and a CeColl share.
  template <class C>
  void fill_shared(C& c, const line_words& w) {
    c.seqNumber = u("seq", w);
    c.func = s("func", w);
    c.sendBuff = p("send", w);
    c.recvBuff = p("recv", w);
    c.count = u("count", w);
    c.root = static_cast<int>(i("root", w));
    c.datatype = s("dt", w);
  }

  template <class D>
  void fill(D& d, std::uint64_t type, const line_words& w) {
    if (type == abi::ev_coll) {
      auto& c = d.coll;
      fill_shared(c, w);
      c.nChannels = static_cast<std::uint8_t>(u("nch", w));
      c.nWarps = static_cast<std::uint8_t>(u("nwarps", w));
      c.algo = s("algo", w);
      c.proto = s("proto", w);
      if constexpr (requires { c.parentGroup; }) c.parentGroup = handle(u("pgroup", w));
      if constexpr (requires { c.isSymColl; }) {
        c.kernelVariant = s("variant", w);
        c.isSymColl = u("sym", w) != 0;
        c.userTag = u("tag", w);
      }
    } else if (type == abi::ev_p2p) {
      auto& q = d.p2p;
      q.func = s("func", w);
      q.buff = p("buff", w);
      q.datatype = s("dt", w);
      q.count = u("count", w);
      q.peer = static_cast<int>(i("peer", w));
      q.nChannels = static_cast<std::uint8_t>(u("nch", w));
      if constexpr (requires { q.parentGroup; }) q.parentGroup = handle(u("pgroup", w));
      if constexpr (requires { q.userTag; }) q.userTag = u("tag", w);
    } else if (type == abi::ev_proxy_op) {
      auto& q = d.proxyOp;
      q.pid = static_cast<pid_t>(i("pid", w));
      q.channelId = static_cast<std::uint8_t>(u("ch", w));
      q.peer = static_cast<int>(i("peer", w));
      q.nSteps = static_cast<int>(i("nsteps", w));
      q.chunkSize = static_cast<int>(i("chunk", w));
      q.isSend = static_cast<int>(i("send", w));
    } else if (type == abi::ev_proxy_step) {
      d.proxyStep.step = static_cast<int>(i("step", w));
    } else if (type == abi::ev_kernel_ch) {
      d.kernelCh.channelId = static_cast<std::uint8_t>(u("ch", w));
      d.kernelCh.pTimer = u("ptimer", w);
    } else if (type == abi::ev_net_plugin) {
      d.netPlugin.id = i("netid", w);
    }
    if constexpr (requires { d.groupApi; }) {
      if (type == abi::ev_group_api) {
        d.groupApi.graphCaptured = u("graph", w) != 0;
        d.groupApi.groupDepth = static_cast<int>(i("depth", w));
      } else if (type == abi::ev_coll_api) {
        auto& c = d.collApi;
        c.func = s("func", w);
        c.count = u("count", w);
        c.datatype = s("dt", w);
        c.root = static_cast<int>(i("root", w));
        c.stream = p("stream", w);
        c.graphCaptured = u("graph", w) != 0;
        if constexpr (requires { c.userTag; }) c.userTag = u("tag", w);
      } else if (type == abi::ev_p2p_api) {
        auto& q = d.p2pApi;
        q.func = s("func", w);
        q.count = u("count", w);
        q.datatype = s("dt", w);
        q.stream = p("stream", w);
        q.graphCaptured = u("graph", w) != 0;
        if constexpr (requires { q.userTag; }) q.userTag = u("tag", w);
      } else if (type == abi::ev_kernel_launch) {
        d.kernelLaunch.stream = p("stream", w);
      }
    }
    if constexpr (requires { d.ceColl; }) {
      if (type == abi::ev_ce_coll) {
        auto& c = d.ceColl;
        fill_shared(c, w);
        c.syncStrategy = s("sync", w);
        c.intraBatchSync = u("intra", w) != 0;
        c.batchSize = static_cast<std::uint32_t>(u("batch", w));
        c.numBatches = static_cast<std::uint32_t>(u("nbatches", w));
        c.ceSeqNum = static_cast<std::uint32_t>(u("ceseq", w));
        c.stream = p("stream", w);
        if constexpr (requires { c.userTag; }) c.userTag = u("tag", w);
      } else if (type == abi::ev_ce_sync) {
        d.ceCollSync.isComplete = u("complete", w) != 0;
        d.ceCollSync.nRanks = static_cast<int>(i("nranks", w));
      } else if (type == abi::ev_ce_batch) {
        d.ceCollBatch.numOps = static_cast<int>(i("nops", w));
        d.ceCollBatch.totalBytes = u("bytes", w);
        d.ceCollBatch.useIntraSync = u("intra", w) != 0;
      }
    }
    if constexpr (requires { d.kernelPhase; }) {
      if (type == abi::ev_kernel_phase) {
        d.kernelPhase.channelId = static_cast<std::uint8_t>(u("ch", w));
        d.kernelPhase.phaseId = static_cast<std::uint8_t>(u("phase", w));
        d.kernelPhase.phaseName = s("name", w);
        d.kernelPhase.pTimer = u("ptimer", w);
      }
    }
  }

  // Field readers: a missing or malformed value reads as 0 / NULL.
  static std::uint64_t u(const char* k, const line_words& w) {
    std::uint64_t v = 0;
    if (auto it = w.kv.find(k); it != w.kv.end()) to_u64(it->second, v, it->second.starts_with("0x") ? 16 : 10);
    return v;
  }
  static std::int64_t i(const char* k, const line_words& w) {
    std::int64_t v = 0;
    if (auto it = w.kv.find(k); it != w.kv.end())
      std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    return v;
  }
  static void* p(const char* k, const line_words& w) {
    std::uint64_t v = 0;
    if (auto it = w.kv.find(k); it != w.kv.end()) to_u64(it->second, v, 16);
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));
  }
  const char* s(const char* k, const line_words& w) {
    auto it = w.kv.find(k);
    return it == w.kv.end() ? nullptr : text(it->second);
  }
  /// An escaped string field, kept alive for the whole run (NCCL's strings are static).
  const char* text(std::string_view e) {
    if (e == "-") return nullptr;
    std::string out;
    if (e != "''")
      for (std::size_t n = 0; n < e.size(); ++n) {
        unsigned v = 0;
        if (e[n] == '%' && n + 2 < e.size() &&
            std::from_chars(e.data() + n + 1, e.data() + n + 3, v, 16).ec == std::errc()) {
          out += static_cast<char>(v);
          n += 2;
        } else {
          out += e[n];
        }
      }
    auto [it, added] = strings_.try_emplace(out);
    return it->first.c_str();
  }
  void* handle(std::uint64_t id) const {
    if (!id) return nullptr;
    auto it = handles_.find(id);
    return it == handles_.end() ? nullptr : it->second;
  }
  static void logger(abi::log_level, unsigned long, const char*, int, const char* fmt, ...) {
    (void)fmt;  // the plugin's messages: see NCCL_DEBUG in a real run; the replay prints its output instead
  }

  const options& o_;
  void* lib_ = nullptr;
  int mask_ = 0;  // NCCL's process-wide activation mask: alive for the whole run
  std::unordered_map<std::uint64_t, void*> handles_, contexts_;
  std::map<std::string, int> strings_;
  std::uint64_t calls_ = 0, starts_ = 0, stops_ = 0, records_ = 0, skipped_ = 0;
};

/// What the plugin published: the final .prom file's ncclinsp_* series of interest.
void print_published(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.path().extension() != ".prom") continue;
    std::printf("== %s\n", e.path().c_str());
    std::ifstream in(e.path());
    for (std::string l; std::getline(in, l);) {
      for (const char* m : {"ncclinsp_ops_total", "ncclinsp_filtered_ops_total", "ncclinsp_invalid_ops_total",
                            "ncclinsp_dropped_events_total", "ncclinsp_abandoned_ops_total", "ncclinsp_inflight_ops",
                            "ncclinsp_oldest_inflight_age", "ncclinsp_bus_bytes_total", "ncclinsp_busy_seconds_total"})
        if (l.starts_with(m) && !l.ends_with(" 0")) {
          std::printf("%s\n", l.c_str());
          break;
        }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int k = 1; k < argc; ++k) {
    const std::string_view a = argv[k];
    auto next = [&]() -> const char* {
      if (k + 1 >= argc) usage("a value is missing");
      return argv[++k];
    };
    if (a == "--plugin")
      o.plugin = next();
    else if (a == "--abi")
      o.abi_version = std::atoi(next());
    else if (a == "--speed")
      o.speed = std::atof(next());
    else if (a == "--hold")
      o.hold_s = std::atof(next());
    else if (a == "--out")
      o.out = next();
    else if (a.starts_with("-"))
      usage("unknown option");
    else if (o.trace.empty())
      o.trace = a;
    else
      usage("one trace at a time");
  }
  if (o.trace.empty()) usage("no trace given");
  if (o.plugin.empty()) {  // the plugin built next to this tool
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    o.plugin = (self.parent_path().parent_path() / "lib" / "libnccl-profiler-ncclinsp.so").string();
  }
  if (o.out.empty()) {
    char tmpl[] = "/tmp/ncclinsp-replay.XXXXXX";
    if (!::mkdtemp(tmpl)) usage("cannot create a temporary directory");
    o.out = tmpl;
  }
  ::setenv("NCCL_INSPECTOR_ENABLE", "1", 0);
  ::setenv("NCCL_INSPECTOR_PROM_DUMP", "1", 0);
  ::setenv("NCCL_INSPECTOR_DUMP_DIR", o.out.c_str(), 0);
  ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1000000", 0);
  ::setenv("NCCLINSP_PROM_KEEP_FILES", "1", 0);
  replayer r(o);
  const int rc = r.run();
  if (rc == 0) print_published(o.out);
  return rc;
}
