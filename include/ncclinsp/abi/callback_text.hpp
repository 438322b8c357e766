#pragma once
/// The text form of NCCL profiler callbacks: one line per init, startEvent, stopEvent,
/// recordEventState and finalize, as the recorder (plugin/callback_recorder.hpp) writes it and
/// ncclinsp-replay (tools/replay) reads it. The format is the one our first real NCCL traces were
/// recorded in (docs/traces.md):
///
///   I t tid ctx commId(hex) commName nNodes nranks rank mask=M
///   S t tid ctx id type parent rank key=value...
///   E t tid id
///   R t tid id state [trans=N | appended=N | ptimer=N | data=P | raw=N]
///   F t tid ctx
///   # comment (the first one: `# ncclinsp-trace abi=V nccl=N source=...`)
///
/// t is CLOCK_REALTIME ns; id is the handle the plugin returned (0: NULL), parent and pgroup are the
/// handles NCCL passed, ctx is the plugin's context: any value that names one live event or context.
/// Strings are NCCL's (`-` = NULL), escaped (%XX for bytes outside '!'..'~' and for '%'; `''` = empty).
/// Thread-safety: pure functions. Hot enough for the recorder: no allocation, no locale, no libc
/// formatting; a line is at most max_line chars (strings are cut at max_string).

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ncclinsp/abi/nccl_profiler.hpp"

namespace ncclinsp::abi::callback_text {

inline constexpr std::size_t max_line = 640;   ///< longest line, newline included
inline constexpr std::size_t max_string = 64;  ///< longest string field, before escaping
inline constexpr int format_version = 1;

/// A bounded line under construction. Writes past the end are dropped (never happens within
/// max_line: every field is bounded); `done` appends the newline and returns the length.
class line {
 public:
  explicit line(char* out) noexcept : begin_(out), p_(out), end_(out + max_line - 1) {}

  line& lit(const char* s) noexcept {
    while (*s && p_ < end_) *p_++ = *s++;
    return *this;
  }
  line& ch(char c) noexcept {
    if (p_ < end_) *p_++ = c;
    return *this;
  }
  line& u(std::uint64_t v) noexcept { return ch(' ').num(v); }
  line& i(std::int64_t v) noexcept { return ch(' ').num(v); }
  line& hex(std::uint64_t v) noexcept {
    ch(' ');
    if (end_ - p_ >= 16) p_ = std::to_chars(p_, end_, v, 16).ptr;
    return *this;
  }
  /// ` key=value` forms.
  line& key(const char* k) noexcept { return ch(' ').lit(k).ch('='); }
  line& ku(const char* k, std::uint64_t v) noexcept { return key(k).num(v); }
  line& ki(const char* k, std::int64_t v) noexcept { return key(k).num(v); }
  line& kp(const char* k, const void* v) noexcept { return key(k).ptr(v); }
  line& ks(const char* k, const char* s) noexcept { return key(k).str(s); }

  line& ptr(const void* v) noexcept {
    if (!v) return lit("(nil)");
    lit("0x");
    if (end_ - p_ >= 16) p_ = std::to_chars(p_, end_, reinterpret_cast<std::uintptr_t>(v), 16).ptr;
    return *this;
  }
  /// A string field: `-` for NULL, `''` for empty, else escaped and cut at max_string bytes.
  line& str(const char* s) noexcept {
    if (!s) return ch('-');
    if (!*s) return lit("''");
    static constexpr char digits[] = "0123456789ABCDEF";
    for (std::size_t n = 0; s[n] && n < max_string; ++n) {
      const auto c = static_cast<unsigned char>(s[n]);
      if (c > ' ' && c <= '~' && c != '%') {
        ch(static_cast<char>(c));
      } else {
        ch('%').ch(digits[c >> 4]).ch(digits[c & 15]);
      }
    }
    return *this;
  }
  std::size_t done() noexcept {
    *p_++ = '\n';  // end_ keeps one char for it
    return static_cast<std::size_t>(p_ - begin_);
  }

 private:
  template <class T>
  line& num(T v) noexcept {
    if (end_ - p_ >= 21) p_ = std::to_chars(p_, end_, v).ptr;
    return *this;
  }
  char* begin_;
  char* p_;
  char* end_;
};

inline std::uint64_t id_of(const void* p) noexcept { return reinterpret_cast<std::uintptr_t>(p); }

/// `# ncclinsp-trace abi=V nccl=N source=S format=1`: the first line of a recorded trace.
inline std::size_t header_line(char* out, int abi_version, int nccl_version, const char* source) noexcept {
  line l(out);
  l.lit("# ncclinsp-trace").ki("abi", abi_version).ki("nccl", nccl_version).ks("source", source);
  return l.ki("format", format_version).done();
}

inline std::size_t init_line(char* out, std::uint64_t t, long tid, std::uint64_t ctx, std::uint64_t comm_id,
                             const char* name, int nnodes, int nranks, int rank, int mask) noexcept {
  line l(out);
  l.ch('I').u(t).i(tid).u(ctx).hex(comm_id).ch(' ').str(name).i(nnodes).i(nranks).i(rank);
  return l.ki("mask", mask).done();
}

/// startEvent: `id` is the handle the plugin returned, the descriptor's fields by type.
template <class Descr>
std::size_t start_line(char* out, std::uint64_t t, long tid, std::uint64_t ctx, std::uint64_t id,
                       const Descr& d) noexcept {
  line l(out);
  const std::uint64_t type = d.type;
  l.ch('S').u(t).i(tid).u(ctx).u(id).u(type).u(id_of(d.parentObj)).i(d.rank);
  if (type == ev_coll) {
    const auto& c = d.coll;
    l.ku("seq", c.seqNumber).ks("func", c.func).kp("send", c.sendBuff).kp("recv", c.recvBuff).ku("count", c.count);
    l.ki("root", c.root).ks("dt", c.datatype).ku("nch", c.nChannels).ku("nwarps", c.nWarps);
    l.ks("algo", c.algo).ks("proto", c.proto);
    if constexpr (requires { c.parentGroup; }) l.ku("pgroup", id_of(c.parentGroup));
    if constexpr (requires { c.isSymColl; })
      l.ks("variant", c.kernelVariant).ku("sym", c.isSymColl ? 1 : 0).ku("tag", c.userTag);
  } else if (type == ev_p2p) {
    const auto& p = d.p2p;
    l.ks("func", p.func).kp("buff", p.buff).ks("dt", p.datatype).ku("count", p.count).ki("peer", p.peer);
    l.ku("nch", p.nChannels);
    if constexpr (requires { p.parentGroup; }) l.ku("pgroup", id_of(p.parentGroup));
    if constexpr (requires { p.userTag; }) l.ku("tag", p.userTag);
  } else if (type == ev_proxy_op) {
    const auto& p = d.proxyOp;
    l.ki("pid", p.pid).ku("ch", p.channelId).ki("peer", p.peer).ki("nsteps", p.nSteps).ki("chunk", p.chunkSize);
    l.ki("send", p.isSend);
  } else if (type == ev_proxy_step) {
    l.ki("step", d.proxyStep.step);
  } else if (type == ev_kernel_ch) {
    l.ku("ch", d.kernelCh.channelId).ku("ptimer", d.kernelCh.pTimer);
  } else if (type == ev_net_plugin) {
    l.ki("netid", d.netPlugin.id);
  }
  if constexpr (requires { d.groupApi; }) {
    if (type == ev_group_api) {
      l.ku("graph", d.groupApi.graphCaptured ? 1 : 0).ki("depth", d.groupApi.groupDepth);
    } else if (type == ev_coll_api) {
      const auto& c = d.collApi;
      l.ks("func", c.func).ku("count", c.count).ks("dt", c.datatype).ki("root", c.root).kp("stream", c.stream);
      l.ku("graph", c.graphCaptured ? 1 : 0);
      if constexpr (requires { c.userTag; }) l.ku("tag", c.userTag);
    } else if (type == ev_p2p_api) {
      const auto& p = d.p2pApi;
      l.ks("func", p.func).ku("count", p.count).ks("dt", p.datatype).kp("stream", p.stream);
      l.ku("graph", p.graphCaptured ? 1 : 0);
      if constexpr (requires { p.userTag; }) l.ku("tag", p.userTag);
    } else if (type == ev_kernel_launch) {
      l.kp("stream", d.kernelLaunch.stream);
    }
  }
  if constexpr (requires { d.ceColl; }) {
    if (type == ev_ce_coll) {
      const auto& c = d.ceColl;
      l.ku("seq", c.seqNumber).ks("func", c.func).kp("send", c.sendBuff).kp("recv", c.recvBuff).ku("count", c.count);
      l.ki("root", c.root).ks("dt", c.datatype).ks("sync", c.syncStrategy).ku("intra", c.intraBatchSync ? 1 : 0);
      l.ku("batch", c.batchSize).ku("nbatches", c.numBatches).ku("ceseq", c.ceSeqNum).kp("stream", c.stream);
      if constexpr (requires { c.userTag; }) l.ku("tag", c.userTag);
    } else if (type == ev_ce_sync) {
      l.ku("complete", d.ceCollSync.isComplete ? 1 : 0).ki("nranks", d.ceCollSync.nRanks);
    } else if (type == ev_ce_batch) {
      const auto& b = d.ceCollBatch;
      l.ki("nops", b.numOps).ku("bytes", b.totalBytes).ku("intra", b.useIntraSync ? 1 : 0);
    }
  }
  if constexpr (requires { d.kernelPhase; }) {
    if (type == ev_kernel_phase) {
      const auto& k = d.kernelPhase;
      l.ku("ch", k.channelId).ku("phase", k.phaseId).ks("name", k.phaseName).ku("ptimer", k.pTimer);
    }
  }
  return l.done();
}

inline std::size_t stop_line(char* out, std::uint64_t t, long tid, std::uint64_t id) noexcept {
  line l(out);
  return l.ch('E').u(t).i(tid).u(id).done();
}

/// recordEventState: the argument NCCL passes with this state, when it passes one.
inline std::size_t record_line(char* out, std::uint64_t t, long tid, std::uint64_t id, int state,
                               const state_args* a) noexcept {
  line l(out);
  l.ch('R').u(t).i(tid).u(id).i(state);
  if (a) {
    if ((state >= 8 && state <= 12) || state == 20) {
      l.ku("trans", a->proxyStep.transSize);  // ProxyStep states
    } else if (state >= 13 && state <= 18) {
      l.ki("appended", a->proxyCtrl.appendedProxyOps);  // ProxyCtrl states
    } else if (state == st_net_plugin_update) {
      l.kp("data", a->netPlugin.data);
    } else if (state == st_kernel_ch_stop || state == st_kernel_phase_stop) {
      l.ku("ptimer", a->kernelCh.pTimer);
    } else {
      std::uint64_t raw;
      std::memcpy(&raw, a, sizeof raw);
      l.ku("raw", raw);
    }
  }
  return l.done();
}

inline std::size_t finalize_line(char* out, std::uint64_t t, long tid, std::uint64_t ctx) noexcept {
  line l(out);
  return l.ch('F').u(t).i(tid).u(ctx).done();
}

}  // namespace ncclinsp::abi::callback_text
