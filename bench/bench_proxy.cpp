// Cost of the proxy accounting (NCCLINSP_PROXY=1, docs/diagnosis.md) per collective, through the
// plugin's exported table of the newest ABI (abi::newest), next to the do-nothing plugin in the same run.
// One op = Coll start/stop, 4 channels x KernelCh start/state 22/stop and, when NCCL emits proxy
// events for it, 4 channels x 2 directions x ProxyOp (start, state 19, stop) with 8 ProxyStep
// each (start, 3 states, stop): 8 ProxyOps and 320 step callbacks per op, the many events
// NVIDIA/nccl #2355 warns about. Modes:
//  - none:      no proxy events (the plugin without NCCLINSP_PROXY: mask bits 3 and 4 off)
//  - unsampled: proxy events on, this op not sampled: 8 ProxyOp starts answered NULL, no steps
//  - sampled:   every op sampled (every step timed and accounted)
//  - mix:       sequence numbers in order, NCCLINSP_PROXY_SAMPLE=16: 1 op in 16 sampled (default)
// The null plugin in "handles" mode makes every callback of the "sampled" sequence return at once.
#include <unistd.h>

#include <array>
#include <cstring>
#include <stdexcept>

#include "bench_common.hpp"
#include "plugin_env.hpp"

namespace {
using namespace ncclinsp;
using namespace ncclinsp::bench;
namespace abi = ncclinsp::abi;

constexpr int channels = 4, steps = 8, sample = 16;

struct plugin {
  sim::plugin_library lib;
  const abi::version<abi::newest>::table* t = nullptr;
  void* ctx = nullptr;
};
plugin* g_ours = nullptr;
plugin* g_null = nullptr;

plugin* open(const std::string& path, const char* handles) {
  auto* p = new plugin;
  if (!p->lib.open(path, abi::newest)) throw std::runtime_error(p->lib.error());
  p->t = p->lib.table<abi::newest>();
  ::setenv("NCCLINSP_NULL_PLUGIN_HANDLES", handles, 1);
  static int mask = 0;  // NCCL's is process-wide, and the plugin reads it again later
  if (p->t->init(&p->ctx, 0xb0b, &mask, "bench", 2, 8, 0, nullptr) != abi::success)
    throw std::runtime_error("init failed");
  return p;
}

void setup() {
  set_plugin_env();
  ::setenv("NCCLINSP_PROXY", "1", 0);
  ::setenv("NCCLINSP_PROXY_SAMPLE", std::to_string(sample).c_str(), 1);
  g_ours = open(plugin_path(), "0");
  g_null = open(null_plugin_path(), "1");
}

enum class mode { none, unsampled, sampled, mix };

void BM_proxy(benchmark::State& st, bool ours, mode m) {
  plugin& p = *(ours ? g_ours : g_null);
  const auto* t = p.t;
  abi::version<abi::newest>::descr coll, kch, pop, pst;
  for (auto* d : {&coll, &kch, &pop, &pst}) std::memset(static_cast<void*>(d), 0, sizeof *d);
  coll.type = abi::ev_coll;
  coll.coll.func = "AllReduce";
  coll.coll.count = 4u << 20;
  coll.coll.datatype = "ncclBfloat16";
  coll.coll.nChannels = channels;
  coll.coll.algo = "RING";
  coll.coll.proto = "SIMPLE";
  kch.type = abi::ev_kernel_ch;
  pop.type = abi::ev_proxy_op;
  pop.proxyOp.pid = ::getpid();
  pop.proxyOp.nSteps = steps;
  pop.proxyOp.chunkSize = 1 << 19;
  pst.type = abi::ev_proxy_step;
  static constexpr int send_states[] = {8, 20, 9}, recv_states[] = {10, 11, 12};
  std::uint64_t seq = 0;
  auto one = [&] {
    coll.coll.seqNumber = m == mode::sampled ? seq * sample : m == mode::unsampled ? seq * sample + 1 : seq;
    ++seq;
    void* h = nullptr;
    t->startEvent(p.ctx, &h, &coll);
    if (h) t->stopEvent(h);
    if (m != mode::none) {
      for (int c = 0; c < channels; ++c)
        for (int send = 1; send >= 0; --send) {
          pop.parentObj = h;
          pop.proxyOp.channelId = static_cast<std::uint8_t>(c);
          pop.proxyOp.peer = send ? 1 : 7;
          pop.proxyOp.isSend = send;
          void* oh = nullptr;
          t->startEvent(p.ctx, &oh, &pop);
          if (!oh) continue;  // NCCL emits nothing more for this ProxyOp
          t->recordEventState(oh, static_cast<abi::event_state>(19), nullptr);
          for (int s = 0; s < steps; ++s) {
            pst.parentObj = oh;
            pst.proxyStep.step = s;
            void* sh = nullptr;
            t->startEvent(p.ctx, &sh, &pst);
            if (!sh) continue;
            abi::state_args a{};
            a.proxyStep.transSize = 1 << 17;
            for (int state : send ? send_states : recv_states)
              t->recordEventState(sh, static_cast<abi::event_state>(state), &a);
            t->stopEvent(sh);
          }
          t->stopEvent(oh);
        }
    }
    for (int c = 0; c < channels; ++c) {
      kch.parentObj = h;
      kch.kernelCh.channelId = static_cast<std::uint8_t>(c);
      kch.kernelCh.pTimer = 1'000'000 + static_cast<std::uint64_t>(c) * 100;
      void* kh = nullptr;
      t->startEvent(p.ctx, &kh, &kch);
      if (kh) {
        abi::state_args a{};
        a.kernelCh.pTimer = 1'050'000 + static_cast<std::uint64_t>(c) * 100;
        t->recordEventState(kh, abi::st_kernel_ch_stop, &a);
        t->stopEvent(kh);
      }
    }
  };
  for (int i = 0; i < 256; ++i) one();  // warm-up: shards, table entries
  const std::uint64_t a0 = thread_allocs();
  for (auto _ : st) one();
  report_allocs(st, a0);
  st.SetItemsProcessed(st.iterations());
  st.SetLabel(ours ? "ours" : "null_handles");
}

}  // namespace

int main(int argc, char** argv) {
  setup();
  benchmark::RegisterBenchmark("proxy/none", BM_proxy, true, mode::none);
  benchmark::RegisterBenchmark("proxy/unsampled", BM_proxy, true, mode::unsampled);
  benchmark::RegisterBenchmark("proxy/mix_1_in_16", BM_proxy, true, mode::mix);
  benchmark::RegisterBenchmark("proxy/sampled", BM_proxy, true, mode::sampled);
  benchmark::RegisterBenchmark("proxy/none_null_plugin", BM_proxy, false, mode::none);
  benchmark::RegisterBenchmark("proxy/sampled_null_plugin", BM_proxy, false, mode::sampled);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
