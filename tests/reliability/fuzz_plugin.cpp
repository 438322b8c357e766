// libFuzzer target: bytes -> a sequence of NCCL profiler calls (the table of each of abi::versions,
// every event type and state, init/finalize interleaved, events after finalize, handles that were
// created, NULL, stale or random integers, hostile strings). Built with clang++
// -fsanitize=fuzzer,address,undefined.
//
// The plugin keeps one process-wide state, configured from the environment at its first init, and
// its communicator table holds 4096 communicators over the life of the process. So that every
// input starts from a fresh plugin, most inputs run against a private plugin_state constructed for
// that input (same code as the exported tables: exports.cpp is compiled into this file, and its
// wrappers are reproduced for the private state); 1 input in 8 goes through the real exported
// ncclProfiler_v<N> tables of the process-wide state (which eventually fills its comm table:
// that path is exercised too). The environment is re-chosen per private state.
//
// Environment (LLVMFuzzerInitialize): NCCL_INSPECTOR_ENABLE=1, dump dir under /dev/shm (or /tmp),
// 100 ms interval, both sinks, JSON rotation at 1 MiB so a long run stays bounded on disk.

// Everything from the standard library first: the access override below must only touch ours.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

// One fresh private plugin_state per input (its public constructor), beside the exported tables.
#include "../../plugin/exports.cpp"

namespace {

using namespace ncclinsp;
using plugin::plugin_state;

std::string g_dir;
std::atomic<bool> g_detached{false};

void quiet_logger(abi::log_level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (std::strstr(buf, "detaching")) g_detached = true;
}

// ---- the private state's tables (same wrappers as exports.cpp) ------------------------------------
plugin_state* g_st = nullptr;

template <int V>
abi::result_t p_init5(void** ctx, std::uint64_t id, int* mask, const char* name, int nn, int nr, int r,
                      abi::logger_t log) {
  return g_st->init(ctx, mask, name, id, nn, nr, r, log, V);
}
abi::result_t p_init4(void** ctx, int* mask, const char* name, std::uint64_t h, int nn, int nr, int r,
                      abi::logger_t log) {
  return g_st->init(ctx, mask, name, h, nn, nr, r, log, 4);
}
template <class D>
abi::result_t p_start(void* c, void** h, D* d) {
  if (plugin::event_adapter* a = g_st->adapter()) return a->start_event(c, h, d);
  if (h) *h = nullptr;
  return abi::success;
}
abi::result_t p_stop(void* h) {
  plugin::event_adapter* a = g_st->adapter();
  return a ? a->stop_event(h) : abi::success;
}
abi::result_t p_record(void* h, abi::event_state s, abi::state_args* a) {
  plugin::event_adapter* ad = g_st->adapter();
  return ad ? ad->record_state(h, s, a) : abi::success;
}
abi::result_t p_fini(void* c) {
  const auto t = std::chrono::steady_clock::now();
  const abi::result_t r = g_st->finalize(c);
  if (std::chrono::steady_clock::now() - t >= std::chrono::milliseconds(90))
    g_detached = true;  // bound hit: exporter may be detached
  return r;
}
std::vector<plugin_state*>* const g_parked = new std::vector<
    plugin_state*>();  // never destroyed: states a detached exporter may still use (reachable: not leaks)

template <int V>
constexpr typename abi::version<V>::table priv_table() {
  using descr = typename abi::version<V>::descr;
  if constexpr (std::is_same_v<descr, abi::descr_v4>)
    return {"p", p_init4, p_start<descr>, p_stop, p_record, p_fini};
  else
    return {"p", p_init5<V>, p_start<descr>, p_stop, p_record, p_fini};
}
template <int V>
const typename abi::version<V>::table priv = priv_table<V>();

// One table pointer per entry of abi::versions, in that order.
template <std::size_t... I>
auto table_tuple(std::index_sequence<I...>) -> std::tuple<const typename abi::version<abi::versions[I]>::table*...>;
using tables = decltype(table_tuple(std::make_index_sequence<abi::versions.size()>{}));
template <int V>
constexpr std::size_t version_index() {
  std::size_t i = 0;
  while (abi::versions[i] != V) ++i;
  return i;
}
template <std::size_t... I>
tables private_tables(std::index_sequence<I...>) {
  return {&priv<abi::versions[I]>...};
}
// The exported tables have names: one per entry of abi::versions (a new version: add it here).
static_assert(abi::versions == std::array<int, 4>{4, 5, 6, 7},
              "list the ncclProfiler_v<N> table of each of abi::versions");
tables exported_tables() { return {&ncclProfiler_v4, &ncclProfiler_v5, &ncclProfiler_v6, &ncclProfiler_v7}; }

// ---- strings ----------------------------------------------------------------------------------------
const char* const k_names[] = {"AllReduce", "AllGather",   "ReduceScatter", "Broadcast",    "Reduce",
                               "Send",      "Recv",        "SendRecv",      "AlltoAll",     "Gather",
                               "Scatter",   "ncclFloat32", "ncclInt8",      "ncclBfloat16", "ncclFloat8e4m3",
                               "Ring",      "Tree",        "NVLS",          "NVLSTree",     "CollNetDirect",
                               "PAT",       "LL",          "LL128",         "Simple",       "",
                               "float",     "int64",       "half",          "double",       "fp8"};

struct string_pool {
  std::deque<std::string> owned;  // stable addresses: NCCL's strings outlive the call
  const char* pick(FuzzedDataProvider& in) {
    switch (in.ConsumeIntegralInRange<int>(0, 7)) {
      case 0:
        return nullptr;
      case 1:
      case 2:
      case 3:
        return k_names[in.ConsumeIntegralInRange<std::size_t>(0, std::size(k_names) - 1)];
      case 4: {  // very long
        std::string s(in.ConsumeIntegralInRange<std::size_t>(256, 20000), 'x');
        for (std::size_t i = 0; i < s.size(); i += 97) s[i] = static_cast<char>(in.ConsumeIntegral<std::uint8_t>() | 1);
        owned.push_back(std::move(s));
        return owned.back().c_str();
      }
      case 5: {  // hostile characters, invalid UTF-8
        static const char* const bad[] = {
            "\"", "\\", "\n", "\r", "\t",   "\xff", "\xc3\x28",         "\xe2\x82",     "}",     "{",
            "=",  ",",  "#",  " ",  "\x7f", "\x01", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "%s%n%x"};
        std::string s;
        const int n = in.ConsumeIntegralInRange<int>(0, 24);
        for (int i = 0; i < n; ++i) s += bad[in.ConsumeIntegralInRange<std::size_t>(0, std::size(bad) - 1)];
        owned.push_back(std::move(s));
        return owned.back().c_str();
      }
      default: {
        owned.push_back(in.ConsumeRandomLengthString(64));
        return owned.back().c_str();
      }
    }
  }
};

// ---- one input --------------------------------------------------------------------------------------
struct run {
  FuzzedDataProvider& in;
  tables t;  // the table of each version, in the order of abi::versions
  string_pool strs;
  std::vector<void*> contexts;  // every context init returned (live, finalized or stale)
  std::vector<void*> handles;   // every event handle startEvent returned
  int version = abi::newest;

  run(FuzzedDataProvider& input, tables ts) : in(input), t(ts) {}

  template <int V>
  const typename abi::version<V>::table* table() const {
    return std::get<version_index<V>()>(t);
  }
  /// stopEvent, recordEventState and finalize are the same function in every table.
  const abi::version<abi::newest>::table* any_table() const { return table<abi::newest>(); }

  void* any_handle() {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
        return nullptr;
      case 1:
        return contexts.empty() ? nullptr : contexts[in.ConsumeIntegralInRange<std::size_t>(0, contexts.size() - 1)];
      case 2: {  // a plausible forgery: a real handle with some bits flipped
        if (handles.empty()) return nullptr;
        auto v =
            reinterpret_cast<std::uintptr_t>(handles[in.ConsumeIntegralInRange<std::size_t>(0, handles.size() - 1)]);
        return reinterpret_cast<void*>(v ^ (std::uintptr_t{1} << in.ConsumeIntegralInRange<int>(0, 63)));
      }
      case 3:
        return reinterpret_cast<void*>(static_cast<std::uintptr_t>(in.ConsumeIntegral<std::uint64_t>()));
      default:
        return handles.empty() ? nullptr : handles[in.ConsumeIntegralInRange<std::size_t>(0, handles.size() - 1)];
    }
  }
  void* any_context() {
    if (!contexts.empty() && in.ConsumeIntegralInRange<int>(0, 7) != 0)
      return contexts[in.ConsumeIntegralInRange<std::size_t>(0, contexts.size() - 1)];
    return in.ConsumeBool() ? nullptr
                            : reinterpret_cast<void*>(static_cast<std::uintptr_t>(in.ConsumeIntegral<std::uint64_t>()));
  }

  void do_init() {
    void* ctx = reinterpret_cast<void*>(std::uintptr_t{0xdead});
    // NCCL passes its process-wide mask, which the plugin reads again later (a RAS override): one
    // with static storage here too.
    static int mask;
    mask = -1;
    const char* name = strs.pick(in);
    const std::uint64_t id = in.ConsumeIntegral<std::uint64_t>();
    int nnodes = in.ConsumeIntegralInRange<int>(-1, 4), nranks = in.ConsumeIntegralInRange<int>(-2, 64),
        rank = in.ConsumeIntegralInRange<int>(-1, 64);
    if (in.ConsumeBool()) {  // mostly valid
      nnodes = std::max(nnodes, 1);
      nranks = std::max(nranks, 1);
      rank = std::clamp(rank, 0, nranks - 1);
    }
    abi::logger_t lg = in.ConsumeIntegralInRange<int>(0, 15) ? quiet_logger : nullptr;
    void** pctx = in.ConsumeIntegralInRange<int>(0, 31) ? &ctx : nullptr;
    int* pmask = in.ConsumeIntegralInRange<int>(0, 31) ? &mask : nullptr;
    abi::with_abi(version, [&](auto v) {
      const auto* tb = table<decltype(v)::value>();
      if constexpr (std::is_same_v<typename abi::version<decltype(v)::value>::descr, abi::descr_v4>)
        (void)tb->init(pctx, pmask, name, id, nnodes, nranks, rank, lg);  // v4: no commId before the mask
      else
        (void)tb->init(pctx, id, pmask, name, nnodes, nranks, rank, lg);
    });
    if (pctx && ctx) contexts.push_back(ctx);
  }

  template <class D>
  void fill_common(D& d, std::uint64_t type) {
    std::memset(static_cast<void*>(&d), in.ConsumeBool() ? 0 : 0xA5, sizeof d);  // shim garbage in unset bytes
    d.type = static_cast<decltype(d.type)>(type);
    d.parentObj = any_handle();
    d.rank = in.ConsumeIntegral<int>();
  }

  template <class D>
  void fill_event(D& d) {
    static constexpr std::uint64_t types[] = {
        abi::ev_group,      abi::ev_coll,       abi::ev_p2p,       abi::ev_proxy_op,
        abi::ev_proxy_step, abi::ev_proxy_ctrl, abi::ev_kernel_ch, abi::ev_net_plugin,
        abi::ev_group_api,  abi::ev_coll_api,   abi::ev_p2p_api,   abi::ev_kernel_launch,
        abi::ev_ce_coll,    abi::ev_ce_sync,    abi::ev_ce_batch,  abi::ev_kernel_phase};
    std::uint64_t type = in.ConsumeIntegralInRange<int>(0, 9)
                             ? types[in.ConsumeIntegralInRange<std::size_t>(0, std::size(types) - 1)]
                             : in.ConsumeIntegral<std::uint64_t>();
    // Weight towards the events the plugin handles.
    if (in.ConsumeIntegralInRange<int>(0, 3) == 0) type = in.ConsumeBool() ? abi::ev_coll : abi::ev_kernel_ch;
    fill_common(d, type);
    type = d.type;  // v4's type is a uint8_t: what the plugin sees after truncation
    if (type == abi::ev_coll) {
      d.coll.seqNumber = in.ConsumeIntegral<std::uint64_t>();
      d.coll.func = strs.pick(in);
      d.coll.count =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, 1 << 24) : in.ConsumeIntegral<std::size_t>();
      d.coll.root = in.ConsumeIntegral<int>();
      d.coll.datatype = strs.pick(in);
      d.coll.nChannels =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint8_t>(0, 4) : in.ConsumeIntegral<std::uint8_t>();
      d.coll.nWarps = in.ConsumeIntegral<std::uint8_t>();
      d.coll.algo = strs.pick(in);
      d.coll.proto = strs.pick(in);
      if constexpr (requires { d.coll.parentGroup; }) d.coll.parentGroup = any_handle();
      if constexpr (requires { d.coll.userTag; }) {
        d.coll.kernelVariant = strs.pick(in);
        d.coll.isSymColl = in.ConsumeBool();
        d.coll.userTag = in.ConsumeIntegral<std::uint64_t>();
      }
    } else if (type == abi::ev_p2p) {
      d.p2p.func = strs.pick(in);
      d.p2p.datatype = strs.pick(in);
      d.p2p.count = in.ConsumeIntegral<std::size_t>();
      d.p2p.peer = in.ConsumeIntegral<int>();
      d.p2p.nChannels = in.ConsumeIntegralInRange<std::uint8_t>(0, 8);
      if constexpr (requires { d.p2p.userTag; }) d.p2p.userTag = in.ConsumeIntegral<std::uint64_t>();
    } else if (type == abi::ev_kernel_ch) {
      d.kernelCh.channelId = in.ConsumeIntegral<std::uint8_t>();
      d.kernelCh.pTimer = in.ConsumeBool()
                              ? 1'800'000'000'000'000'000ull + in.ConsumeIntegralInRange<std::uint64_t>(0, 1u << 30)
                              : in.ConsumeIntegral<std::uint64_t>();
    } else if (type == abi::ev_proxy_op) {
      d.proxyOp.pid =
          in.ConsumeIntegralInRange<int>(0, 3) ? ::getpid() : in.ConsumeIntegral<pid_t>();  // mostly ours (PXN: not)
      d.proxyOp.channelId = in.ConsumeIntegral<std::uint8_t>();
      d.proxyOp.peer = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(0, 200) : in.ConsumeIntegral<int>();
      d.proxyOp.nSteps = in.ConsumeIntegral<int>();
      d.proxyOp.isSend = in.ConsumeIntegral<int>();
    } else if (type == abi::ev_proxy_step) {
      d.proxyStep.step = in.ConsumeIntegral<int>();
    } else if constexpr (requires { d.ceColl; }) {
      if (type == abi::ev_ce_coll) {
        d.ceColl.seqNumber = in.ConsumeIntegral<std::uint64_t>();
        d.ceColl.func = strs.pick(in);
        d.ceColl.count = in.ConsumeIntegral<std::size_t>();
        d.ceColl.datatype = strs.pick(in);
        d.ceColl.syncStrategy = strs.pick(in);
        d.ceColl.batchSize = in.ConsumeIntegral<std::uint32_t>();
      }
    }
    if constexpr (requires { d.collApi; }) {
      if (type == abi::ev_coll_api || type == abi::ev_p2p_api) {
        d.collApi.func = strs.pick(in);
        d.collApi.datatype = strs.pick(in);
        d.collApi.count = in.ConsumeIntegral<std::size_t>();
        // A C bool from NCCL is 0 or 1 (p2pApi's overlaps collApi's stream: set last).
        (type == abi::ev_coll_api ? d.collApi.graphCaptured : d.p2pApi.graphCaptured) = in.ConsumeBool();
      }
    }
    if constexpr (requires { d.kernelPhase; }) {
      if (type == abi::ev_kernel_phase) d.kernelPhase.phaseName = strs.pick(in);
    }
  }

  void do_start() {
    void* h = reinterpret_cast<void*>(std::uintptr_t{0xbad});
    void** ph = in.ConsumeIntegralInRange<int>(0, 31) ? &h : nullptr;
    void* ctx = any_context();
    const bool null_descr = in.ConsumeIntegralInRange<int>(0, 63) == 0;
    abi::with_abi(version, [&](auto v) {
      typename abi::version<decltype(v)::value>::descr d;
      fill_event(d);
      table<decltype(v)::value>()->startEvent(ctx, ph, null_descr ? nullptr : &d);
    });
    if (ph && h) handles.push_back(h);
  }

  void do_record() {
    static constexpr int states[] = {abi::st_proxy_op_in_progress_v4,
                                     abi::st_proxy_step_send_peer_wait_v4,
                                     8,
                                     9,
                                     10,
                                     11,
                                     12,
                                     abi::st_net_plugin_update,
                                     abi::st_kernel_ch_stop,
                                     abi::st_group_start_api_stop,
                                     abi::st_group_end_api_start,
                                     abi::st_ce_coll_start,
                                     abi::st_ce_batch_complete,
                                     abi::st_kernel_phase_stop};
    const int st = in.ConsumeIntegralInRange<int>(0, 7)
                       ? states[in.ConsumeIntegralInRange<std::size_t>(0, std::size(states) - 1)]
                       : in.ConsumeIntegral<int>();
    abi::state_args a;  // one union: also ProxyStep's transSize
    a.kernelCh.pTimer = in.ConsumeBool()
                            ? 1'800'000'000'000'000'000ull + in.ConsumeIntegralInRange<std::uint64_t>(0, 1u << 30)
                            : in.ConsumeIntegral<std::uint64_t>();
    abi::state_args* pa = in.ConsumeIntegralInRange<int>(0, 15) ? &a : nullptr;
    any_table()->recordEventState(any_handle(), static_cast<abi::event_state>(st), pa);
  }

  void go() {
    while (in.remaining_bytes() > 0) {
      switch (in.ConsumeIntegralInRange<int>(0, 15)) {
        case 0:
          do_init();
          break;
        case 1:
          if (in.ConsumeIntegralInRange<int>(0, 3) == 0) any_table()->finalize(any_context());
          break;
        case 2:
          version = abi::versions[in.ConsumeIntegralInRange<std::size_t>(0, abi::versions.size() - 1)];
          break;  // NCCL uses one table; the state does not care
        case 3:
        case 4:
        case 5:
        case 6:
        case 7:
          do_start();
          break;
        case 8:
        case 9:
        case 10:
        case 11:
          any_table()->stopEvent(any_handle());
          break;
        case 12:
        case 13:
          do_record();
          break;
        case 14:  // complete a whole op the way NCCL does: channels start/stop, then the op's stop
          if (!handles.empty()) {
            void* op = handles[in.ConsumeIntegralInRange<std::size_t>(0, handles.size() - 1)];
            const int nch = in.ConsumeIntegralInRange<int>(0, 4);
            for (int c = 0; c < nch; ++c) {
              abi::version<abi::newest>::descr d{};
              d.type = abi::ev_kernel_ch;
              d.parentObj = op;
              d.kernelCh.channelId = static_cast<std::uint8_t>(c);
              d.kernelCh.pTimer = 1'800'000'000'000'000'000ull + 1000u * c;
              void* ch = nullptr;
              any_table()->startEvent(nullptr, &ch, &d);
              abi::state_args a;
              a.kernelCh.pTimer = d.kernelCh.pTimer + 5000;
              any_table()->recordEventState(ch, abi::st_kernel_ch_stop, &a);
              any_table()->stopEvent(ch);
            }
            any_table()->stopEvent(op);
          }
          break;
        default:
          if (in.ConsumeIntegralInRange<int>(0, 7) == 0 && g_st) g_st->flush();
          break;
      }
    }
  }
};

void choose_env(FuzzedDataProvider& in) {
  auto set = [](const char* k, const char* v) { ::setenv(k, v, 1); };
  set("NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", in.ConsumeBool() ? "0" : "8192");
  set("NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", in.ConsumeBool() ? "0" : "1");
  set("NCCL_INSPECTOR_ENABLE_P2P", in.ConsumeIntegralInRange<int>(0, 3) ? "1" : "0");
  static const char* const sinks[] = {"prom", "json", "prom,json", "json,trace"};
  set("NCCLINSP_SINKS", sinks[in.ConsumeIntegralInRange<int>(0, 3)]);
  set("NCCL_INSPECTOR_DUMP_VERBOSE", in.ConsumeBool() ? "1" : "0");  // per-op callback traces
  // Finalized communicators: mostly dropped at once (the final export of an input with many
  // hostile 10 KB names otherwise dominates the run time), sometimes kept to the end.
  set("NCCLINSP_RETAIN_FINALIZED_S", in.ConsumeIntegralInRange<int>(0, 7) ? "0" : "1");
  set("NCCLINSP_USER_TAG_LABEL", in.ConsumeBool() ? "1" : "0");
  set("NCCL_INSPECTOR_COLL_POOL_SIZE", in.ConsumeBool() ? "10" : "64");
  set("NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", in.ConsumeBool() ? "8" : "1024");
  set("NCCLINSP_PROXY", in.ConsumeBool() ? "1" : "0");  // sampled ProxyOp/ProxyStep accounting
  set("NCCLINSP_PROXY_SAMPLE", in.ConsumeBool() ? "1" : "3");
}

}  // namespace

/// Best effort: the dump directory of this run is removed at exit.
void remove_dump_dir() {
  if (DIR* d = ::opendir(g_dir.c_str())) {
    while (auto* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) ::unlink((g_dir + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  ::rmdir(g_dir.c_str());
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  g_dir = std::string(base) + "/ncclinsp-fuzz-" + std::to_string(::getpid());
  std::atexit(remove_dump_dir);
  ::setenv("NCCL_INSPECTOR_ENABLE", "1", 1);
  ::setenv("NCCL_INSPECTOR_DUMP_DIR", g_dir.c_str(), 1);
  ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "100000", 1);
  ::setenv("NCCLINSP_SINKS", "prom,json", 1);
  ::setenv("NCCLINSP_JSON_MAX_BYTES", "1048576", 1);
  ::setenv("NCCLINSP_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  ::setenv("NCCL_INSPECTOR_COLL_POOL_SIZE", "16", 1);
  ::setenv("NCCL_INSPECTOR_P2P_POOL_SIZE", "10", 1);
  ::setenv("NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", "8", 1);
  ::setenv("NCCLINSP_PROXY", "1", 1);
  ::setenv("NCCLINSP_PROXY_SAMPLE", "2", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const bool global = in.ConsumeIntegralInRange<int>(0, 7) == 0;
  if (global) {
    run r(in, exported_tables());
    r.go();
    for (void* c : r.contexts) r.any_table()->finalize(c);  // NCCL finalizes what it created
    return 0;
  }
  choose_env(in);
  g_detached = false;
  g_st = new plugin_state();
  {
    run r(in, private_tables(std::make_index_sequence<abi::versions.size()>{}));
    r.go();
    for (void* c : r.contexts) r.any_table()->finalize(c);
  }
  // A detached exporter (final flush slower than the 100 ms teardown bound) still uses the state:
  // the plugin never frees its state, so neither do we in that case.
  if (!g_detached)
    delete g_st;
  else
    g_parked->push_back(g_st);
  g_st = nullptr;
  return 0;
}
