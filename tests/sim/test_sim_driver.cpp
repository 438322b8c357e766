// Call-sequence tests of sim/nccl_driver.hpp against the recording plugin, per profiler ABI version.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "nccl_driver.hpp"
#include "recording_plugin.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace ncclinsp::sim;
namespace abi = ncclinsp::abi;

namespace {

struct recorder {
  plugin_library lib;
  rec_reset_fn reset = nullptr;
  rec_count_fn count = nullptr;
  rec_get_fn get = nullptr;
  rec_set_u64_fn set_null = nullptr;
  rec_set_int_fn set_mask = nullptr;

  explicit recorder(int version) : lib(NCCLINSP_RECORDING_PLUGIN, version) {
    REQUIRE(lib.ok());
    reset = reinterpret_cast<rec_reset_fn>(::dlsym(lib.dl_handle(), "rec_reset"));
    count = reinterpret_cast<rec_count_fn>(::dlsym(lib.dl_handle(), "rec_count"));
    get = reinterpret_cast<rec_get_fn>(::dlsym(lib.dl_handle(), "rec_get"));
    set_null = reinterpret_cast<rec_set_u64_fn>(::dlsym(lib.dl_handle(), "rec_set_null_types"));
    set_mask = reinterpret_cast<rec_set_int_fn>(::dlsym(lib.dl_handle(), "rec_set_init_mask"));
    REQUIRE((reset && count && get && set_null && set_mask));
    reset();
    store_mask(0);
  }
  std::vector<rec_event> log() const {
    std::vector<rec_event> v(count());
    for (std::size_t i = 0; i < v.size(); ++i) get(i, &v[i]);
    return v;
  }
  /// Everything after the last init (i.e. the callbacks of interest).
  std::vector<rec_event> events() const {
    auto v = log();
    std::vector<rec_event> out;
    for (const auto& e : v)
      if (e.call != rec_call_init) out.push_back(e);
    return out;
  }
};

comm_config cfg(int n_nodes = 1, int n_ranks = 4, int rank = 1) {
  comm_config c;
  c.comm_hash = 0x1234abcdull;
  c.name = "tp";
  c.n_nodes = n_nodes;
  c.n_ranks = n_ranks;
  c.rank = rank;
  return c;
}

std::string sig(const rec_event& e) {
  static const char* calls[] = {"init", "start", "stop", "record", "finalize"};
  std::ostringstream s;
  s << calls[e.call] << ":" << e.type;
  if (e.call == rec_call_record) s << ":" << e.state;
  return s.str();
}
std::vector<std::string> sigs(const std::vector<rec_event>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(sig(e));
  return out;
}
std::string S(int call, std::uint64_t type, int state = -1) {
  rec_event e{};
  e.call = call;
  e.type = type;
  e.state = state;
  return sig(e);
}
const rec_event* find_start(const std::vector<rec_event>& v, std::uint64_t type, int nth = 0) {
  for (const auto& e : v)
    if (e.call == rec_call_start && e.type == type && nth-- == 0) return &e;
  return nullptr;
}
std::size_t count_of(const std::vector<rec_event>& v, int call, std::uint64_t type) {
  std::size_t n = 0;
  for (const auto& e : v) n += e.call == call && e.type == type;
  return n;
}

op_desc allreduce(std::size_t count = 1 << 20, std::uint8_t nch = 2) {
  op_desc d;
  d.func = nccl_func::all_reduce;
  d.dtype = nccl_dtype::float32;
  d.count = count;
  d.n_channels = nch;
  d.algo = "RING";
  d.proto = "LL128";
  return d;
}

}  // namespace

TEST_CASE("plugin_library picks the newest table and reports errors", "[sim][library]") {
  plugin_library newest(NCCLINSP_RECORDING_PLUGIN);
  REQUIRE(newest.ok());
  CHECK(newest.abi() == abi::newest);
  CHECK(std::string(newest.name()) == "recording-v" + std::to_string(abi::newest));
  for (int v : abi::versions) {
    plugin_library l(NCCLINSP_RECORDING_PLUGIN, v);
    REQUIRE(l.ok());
    CHECK(l.abi() == v);
    CHECK(std::string(l.name()) == "recording-v" + std::to_string(v));
  }
  plugin_library missing("/nonexistent/libnope.so");
  CHECK_FALSE(missing.ok());
  CHECK(missing.error().find("dlopen") != std::string::npos);
  plugin_library bad(NCCLINSP_RECORDING_PLUGIN, 3);
  CHECK_FALSE(bad.ok());
  plugin_library nosym(NCCLINSP_SIMCUDA_LIB);
  CHECK_FALSE(nosym.ok());
  CHECK(nosym.error().find("ncclProfiler_v" + std::to_string(abi::newest)) != std::string::npos);
}

TEST_CASE("init passes the version's argument order and one global mask", "[sim][init]") {
  for (int v : abi::versions) {
    recorder r(v);
    {
      comm_driver a(r.lib, cfg(2, 8, 3));
      comm_config cb = cfg();
      cb.null_name = true;
      comm_driver b(r.lib, cb);
      CHECK(a.init_result() == abi::success);
      CHECK(a.context() != nullptr);
      CHECK(a.mask() == 0x46);
    }
    const auto log = r.log();
    REQUIRE(log.size() == 4);  // 2 init + 2 finalize
    CHECK(log[0].call == rec_call_init);
    CHECK(log[0].comm_hash == 0x1234abcdull);
    CHECK(log[0].n_nodes == 2);
    CHECK(log[0].n_ranks == 8);
    CHECK(log[0].rank == 3);
    CHECK(std::string(log[0].comm_name) == "tp");
    CHECK(std::string(log[1].comm_name) == "(null)");
    CHECK(log[0].mask_ptr == &global_mask());
    CHECK(log[1].mask_ptr == log[0].mask_ptr);
    CHECK(log[2].call == rec_call_finalize);
    CHECK(log[3].call == rec_call_finalize);
  }
}

TEST_CASE("v5+ single AllReduce: API events, plan events, KernelCh", "[sim][v5]") {
  for (int v = 5; v <= abi::newest; ++v) {
    CAPTURE(v);
    recorder r(v);
    comm_driver c(r.lib, cfg());
    r.reset();
    const pending_op p = c.enqueue(allreduce(1000, 2));
    c.complete(p, 1'000'000, 2'000'000);
    const auto ev = r.events();
    using namespace abi;
    const std::vector<std::string> want = {
        S(1, ev_group_api),     S(3, ev_group_api, 23), S(1, ev_coll_api),      S(2, ev_coll_api),
        S(3, ev_group_api, 24), S(1, ev_group),         S(1, ev_coll),          S(2, ev_coll),
        S(2, ev_group),         S(2, ev_group_api),     S(1, ev_kernel_ch),     S(3, ev_kernel_ch, 22),
        S(2, ev_kernel_ch),     S(1, ev_kernel_ch),     S(3, ev_kernel_ch, 22), S(2, ev_kernel_ch)};
    CHECK(sigs(ev) == want);
    REQUIRE(ev.size() == want.size());
    const auto& gapi = ev[0];
    CHECK(gapi.group_depth == 1);
    CHECK(gapi.parent == nullptr);
    CHECK(gapi.rank == 0);
    CHECK(ev[1].args_null);  // native: NULL args for 23/24
    CHECK(ev[4].args_null);
    const auto& capi = ev[2];
    CHECK(capi.parent == gapi.handle);
    CHECK(std::string(capi.func) == "AllReduce");
    CHECK(capi.count == 1000);
    const auto& group = ev[5];
    const auto& coll = ev[6];
    CHECK(coll.parent == capi.handle);
    CHECK(coll.parent_group == group.handle);
    CHECK(coll.rank == 1);
    CHECK(coll.seq == 0);
    CHECK(coll.count == 1000);
    CHECK(std::string(coll.datatype) == "ncclFloat32");
    CHECK(std::string(coll.algo) == "RING");
    CHECK(std::string(coll.proto) == "LL128");
    CHECK(coll.n_channels == 2);
    CHECK(coll.context == c.context());
    CHECK(ev[7].handle == coll.handle);
    CHECK(ev[10].parent == coll.handle);
    CHECK(ev[10].channel_id == 0);
    CHECK(ev[10].ptimer == 1'000'000);
    CHECK(ev[10].rank == 0);
    CHECK(ev[11].arg == 2'000'000);
    CHECK(ev[11].handle == ev[10].handle);
    CHECK(ev[13].channel_id == 1);
    // seqNumber is per communicator and per function
    r.reset();
    c.enqueue(allreduce());
    op_desc ag = allreduce();
    ag.func = nccl_func::all_gather;
    c.enqueue(ag);
    c.enqueue(allreduce());
    const auto ev2 = r.events();
    CHECK(find_start(ev2, ev_coll, 0)->seq == 1);
    CHECK(find_start(ev2, ev_coll, 1)->seq == 0);
    CHECK(find_start(ev2, ev_coll, 2)->seq == 2);
  }
}

TEST_CASE("v4: no API events, uint8 type, Coll parent is the Group", "[sim][v4]") {
  recorder r(4);
  comm_driver c(r.lib, cfg());
  r.reset();
  const pending_op p = c.enqueue(allreduce(10, 1));
  c.complete(p, 5, 9);
  const auto ev = r.events();
  using namespace abi;
  CHECK(sigs(ev) == std::vector<std::string>{S(1, ev_group), S(1, ev_coll), S(2, ev_coll), S(2, ev_group),
                                             S(1, ev_kernel_ch), S(3, ev_kernel_ch, 22), S(2, ev_kernel_ch)});
  REQUIRE(ev.size() == 7);
  CHECK(ev[1].type == 2);  // uint8 ncclProfileColl
  CHECK(ev[1].parent == ev[0].handle);
  CHECK(ev[4].parent == ev[1].handle);

  SECTION("native v4 starts no Coll under a NULL Group; KernelCh still starts with parent NULL") {
    r.reset();
    r.set_null(ev_group);
    const pending_op q = c.enqueue(allreduce(10, 1));
    c.complete(q, 5, 9);
    const auto e2 = r.events();
    CHECK(sigs(e2) ==
          std::vector<std::string>{S(1, ev_group), S(1, ev_kernel_ch), S(3, ev_kernel_ch, 22), S(2, ev_kernel_ch)});
    CHECK(e2[1].parent == nullptr);
  }
  SECTION("P2P nChannels: set natively, garbage through the shim") {
    r.reset();
    op_desc s;
    s.kind = op_kind::p2p;
    s.func = nccl_func::send;
    s.count = 100;
    s.peer = 3;
    s.n_channels = 2;
    s.channel_lo = 4;
    c.enqueue(s);
    CHECK(find_start(r.events(), ev_p2p)->n_channels == 2);
    comm_config q = cfg();
    q.shim_quirks = true;
    comm_driver shim(r.lib, q);
    r.reset();
    shim.enqueue(s);
    CHECK(find_start(r.events(), ev_p2p)->n_channels == 0xA5);
  }
}

TEST_CASE("grouped collectives: channel cursor, AllGather bytes, Uint8 'Unknown', groupDepth", "[sim][group]") {
  recorder r(6);
  comm_driver c(r.lib, cfg(2, 8, 5));
  r.reset();
  op_desc ops[3];
  ops[0] = allreduce(4096, 4);
  ops[0].func = nccl_func::all_gather;
  ops[0].dtype = nccl_dtype::bfloat16;
  ops[1] = allreduce(4096, 8);
  ops[1].func = nccl_func::all_gather;
  ops[1].dtype = nccl_dtype::bfloat16;
  ops[2] = allreduce(777, 2);
  ops[2].dtype = nccl_dtype::uint8;
  pending_op out[3];
  c.enqueue(ops, out);
  CHECK(out[0].channel_lo == 0);
  CHECK(out[1].channel_lo == 4);
  CHECK(out[2].channel_lo == 12);
  const auto ev = r.events();
  using namespace abi;
  CHECK(find_start(ev, ev_group_api)->group_depth == 2);
  CHECK(count_of(ev, rec_call_start, ev_group) == 1);
  CHECK(count_of(ev, rec_call_start, ev_group_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll_api) == 3);
  const auto* ag0 = find_start(ev, ev_coll, 0);
  CHECK(ag0->count == 4096 * 2);
  CHECK(std::string(ag0->datatype) == "ncclInt8");
  CHECK(find_start(ev, ev_coll_api, 0)->count == 4096);
  CHECK(std::string(find_start(ev, ev_coll_api, 0)->datatype) == "ncclBfloat16");
  CHECK(find_start(ev, ev_coll, 1)->seq == 1);
  CHECK(std::string(find_start(ev, ev_coll, 2)->datatype) == "Unknown");
  // All Coll starts precede all Coll stops (hostStreamPlanTask order)
  std::size_t last_start = 0, first_stop = ev.size();
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].type != ev_coll) continue;
    if (ev[i].call == rec_call_start) last_start = i;
    if (ev[i].call == rec_call_stop && i < first_stop) first_stop = i;
  }
  CHECK(last_start < first_stop);
  r.reset();
  c.complete(out[1], 10, 20);
  const auto kc = r.events();
  CHECK(count_of(kc, rec_call_start, ev_kernel_ch) == 8);
  CHECK(find_start(kc, ev_kernel_ch, 0)->channel_id == 4);
  CHECK(find_start(kc, ev_kernel_ch, 7)->channel_id == 11);
}

TEST_CASE("P2P: channels not 0-based, parents, peer", "[sim][p2p]") {
  recorder r(5);
  comm_driver c(r.lib, cfg(2, 2, 0));
  r.reset();
  op_desc ops[2];
  ops[0].kind = op_kind::p2p;
  ops[0].func = nccl_func::send;
  ops[0].count = 1 << 20;
  ops[0].peer = 1;
  ops[0].n_channels = 2;
  ops[1] = ops[0];
  ops[1].func = nccl_func::recv;
  pending_op out[2];
  c.enqueue(ops, out);
  CHECK(out[0].channel_lo != 0);
  c.complete(out[0], 1, 2);
  const auto ev = r.events();
  using namespace abi;
  const auto* api = find_start(ev, ev_p2p_api);
  const auto* p2p = find_start(ev, ev_p2p);
  REQUIRE((api && p2p));
  CHECK(std::string(p2p->func) == "Send");
  CHECK(std::string(find_start(ev, ev_p2p, 1)->func) == "Recv");
  CHECK(p2p->parent == api->handle);
  CHECK(p2p->parent_group == find_start(ev, ev_group)->handle);
  CHECK(p2p->peer == 1);
  CHECK(p2p->n_channels == 2);
  CHECK(find_start(ev, ev_kernel_ch)->channel_id == out[0].channel_lo);
  CHECK(find_start(ev, ev_kernel_ch)->parent == p2p->handle);
}

TEST_CASE("NULL handles: children get parentObj NULL, no record/stop on NULL", "[sim][null]") {
  recorder r(7);
  comm_driver c(r.lib, cfg());
  r.reset();
  r.set_null(abi::ev_coll | abi::ev_group_api);
  const pending_op p = c.enqueue(allreduce(10, 1));
  CHECK(p.task_handle == nullptr);
  c.complete(p, 1, 2);
  auto ev = r.events();
  using namespace abi;
  CHECK(count_of(ev, rec_call_record, 0) == 0);  // no record on NULL handle
  CHECK(count_of(ev, rec_call_stop, 0) == 0);
  CHECK(find_start(ev, ev_coll_api)->parent == nullptr);
  CHECK(find_start(ev, ev_kernel_ch)->parent == nullptr);
  CHECK(count_of(ev, rec_call_stop, ev_kernel_ch) == 1);

  r.reset();
  r.set_null(ev_kernel_ch);
  c.complete(c.enqueue(allreduce(10, 1)), 1, 2);
  ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 1);
  CHECK(count_of(ev, rec_call_record, 0) == 0);
  CHECK(count_of(ev, rec_call_stop, 0) == 0);
}

TEST_CASE("activation mask: ancestors, snapshot at the API call, shim clearing", "[sim][mask]") {
  using namespace abi;
  recorder r(7);
  r.set_mask(0);
  comm_driver c(r.lib, cfg());
  r.reset();
  c.complete(c.enqueue(allreduce()), 1, 2);
  CHECK(r.events().empty());

  comm_driver::set_mask(ev_kernel_ch);
  r.reset();
  c.complete(c.enqueue(allreduce(10, 1)), 1, 2);
  auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_group_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_group) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll) == 1);
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 1);

  // Mask changes apply to ops enqueued afterwards, not to in-flight ones.
  comm_driver::set_mask(ev_coll);
  r.reset();
  const pending_op p = c.enqueue(allreduce(10, 1));
  comm_driver::set_mask(ev_kernel_ch);
  c.complete(p, 1, 2);
  CHECK(count_of(r.events(), rec_call_start, ev_kernel_ch) == 0);

  // P2P ancestors do not include CollApi
  comm_driver::set_mask(ev_coll_api);
  r.reset();
  op_desc s;
  s.kind = op_kind::p2p;
  s.func = nccl_func::send;
  s.count = 10;
  s.peer = 0;
  c.enqueue(s);
  ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_group_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_p2p_api) == 0);
  CHECK(count_of(ev, rec_call_start, ev_group) == 0);

  // v5 shim clears CE bits and KernelPhase; v6 clears KernelPhase
  recorder r5(5);
  r5.set_mask(0xFFFF);
  comm_driver c5(r5.lib, cfg());
  CHECK(c5.mask() == (0xFFFF & ~(ev_ce_coll | ev_ce_sync | ev_ce_batch | ev_kernel_phase)));
  recorder r6(6);
  r6.set_mask(0xFFFF);
  comm_driver c6(r6.lib, cfg());
  CHECK(c6.mask() == (0xFFFF & ~ev_kernel_phase));
  // v7: KernelPhase implies KernelCh
  recorder r7(7);
  r7.set_mask(ev_kernel_phase);
  comm_driver c7(r7.lib, cfg());
  CHECK(c7.mask() == (ev_kernel_phase | ev_kernel_ch));
}

TEST_CASE("v7: user tags, symmetric kernels and kernel phases", "[sim][v7]") {
  using namespace abi;
  recorder r(7);
  r.set_mask(ev_coll | ev_kernel_ch | ev_kernel_phase);
  comm_driver c(r.lib, cfg());
  r.reset();
  op_desc d = allreduce(1 << 18, 2);
  d.user_tag = 0xABCDEF0123ull;
  d.kernel_variant = "AllReduce_AGxLL_R";
  const pending_op p = c.enqueue(d);
  c.complete(p, 1000, 3000);
  const auto ev = r.events();
  const auto* coll = find_start(ev, ev_coll);
  REQUIRE(coll);
  CHECK(coll->user_tag == 0xABCDEF0123ull);
  CHECK(coll->is_sym);
  CHECK(std::string(coll->kernel_variant) == "AllReduce_AGxLL_R");
  CHECK(std::string(coll->algo) == "AGxLL_R");
  CHECK(std::string(coll->proto).empty());
  CHECK(find_start(ev, ev_coll_api)->user_tag == 0xABCDEF0123ull);
  CHECK(count_of(ev, rec_call_start, ev_kernel_phase) == 6);
  // channel 0: KernelCh start, 3 x (phase start, record 31, stop), record 22, stop
  std::vector<std::string> ch0;
  const void* kh = find_start(ev, ev_kernel_ch, 0)->handle;
  bool in = false;
  for (const auto& e : ev) {
    if (e.call == rec_call_start && e.type == ev_kernel_ch) in = e.handle == kh;
    if (in) ch0.push_back(sig(e));
    if (in && e.call == rec_call_stop && e.type == ev_kernel_ch) break;
  }
  const std::vector<std::string> want = {S(1, ev_kernel_ch),    S(1, ev_kernel_phase),  S(3, ev_kernel_phase, 31),
                                         S(2, ev_kernel_phase), S(1, ev_kernel_phase),  S(3, ev_kernel_phase, 31),
                                         S(2, ev_kernel_phase), S(1, ev_kernel_phase),  S(3, ev_kernel_phase, 31),
                                         S(2, ev_kernel_phase), S(3, ev_kernel_ch, 22), S(2, ev_kernel_ch)};
  CHECK(ch0 == want);
  const auto* ph0 = find_start(ev, ev_kernel_phase, 0);
  CHECK(ph0->parent == kh);
  CHECK(ph0->phase_id == 0);
  CHECK(std::string(ph0->func) == "initial_sync");
  CHECK(ph0->ptimer == 1000);
  CHECK(find_start(ev, ev_kernel_phase, 2)->phase_id == 2);
  // P2P tag
  r.reset();
  op_desc s;
  s.kind = op_kind::p2p;
  s.func = nccl_func::send;
  s.count = 1;
  s.peer = 2;
  s.user_tag = 77;
  c.enqueue(s);
  CHECK(find_start(r.events(), ev_p2p)->user_tag == 77);
}

TEST_CASE("CE collectives (v6+) and Broadcast visibility", "[sim][ce]") {
  using namespace abi;
  recorder r(6);
  r.set_mask(ev_ce_coll | ev_ce_sync | ev_ce_batch | ev_coll | ev_kernel_ch);
  comm_driver c(r.lib, cfg());
  r.reset();
  op_desc d = allreduce(1 << 20, 0);
  d.kind = op_kind::ce_coll;
  d.func = nccl_func::all_gather;
  const pending_op p = c.enqueue(d);
  c.complete(p, 1, 2);
  auto ev = r.events();
  CHECK(sigs(ev) == std::vector<std::string>{S(1, ev_group_api), S(3, ev_group_api, 23), S(1, ev_coll_api),
                                             S(2, ev_coll_api), S(3, ev_group_api, 24), S(1, ev_ce_coll),
                                             S(1, ev_ce_sync), S(2, ev_ce_sync), S(1, ev_ce_batch), S(2, ev_ce_batch),
                                             S(2, ev_ce_coll), S(2, ev_group_api)});
  CHECK(find_start(ev, ev_ce_coll)->parent == find_start(ev, ev_coll_api)->handle);
  CHECK(find_start(ev, ev_ce_sync)->parent == find_start(ev, ev_ce_coll)->handle);

  // Broadcast: v6+ emits CollApi only (NVIDIA/nccl #2278); v5 emits Coll with bytes / ncclInt8
  r.reset();
  op_desc b = allreduce(100, 1);
  b.func = nccl_func::broadcast;
  b.dtype = nccl_dtype::float32;
  c.complete(c.enqueue(b), 1, 2);
  ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_coll_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll) == 0);
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 0);
  recorder r5(5);
  comm_driver c5(r5.lib, cfg());
  r5.reset();
  c5.complete(c5.enqueue(b), 1, 2);
  ev = r5.events();
  REQUIRE(find_start(ev, ev_coll));
  CHECK(find_start(ev, ev_coll)->count == 400);
  CHECK(std::string(find_start(ev, ev_coll)->datatype) == "ncclInt8");
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 1);
}

TEST_CASE("RAS mask override: proxy events, foreign PXN ProxyOp, start-only", "[sim][proxy]") {
  using namespace abi;
  recorder r(7);
  comm_config cc = cfg(2, 8, 2);
  cc.mask_override = 0xFFFF;
  comm_driver c(r.lib, cc);
  CHECK(c.mask() == 0xFFFF);
  r.reset();
  c.complete(c.enqueue(allreduce(1 << 20, 1)), 1, 2);
  auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_proxy_op) == 2);
  CHECK(count_of(ev, rec_call_start, ev_proxy_step) == 4);
  CHECK(count_of(ev, rec_call_start, ev_net_plugin) == 4);
  CHECK(count_of(ev, rec_call_start, ev_proxy_ctrl) == 1);
  CHECK(count_of(ev, rec_call_start, ev_kernel_launch) == 1);
  const auto* op = find_start(ev, ev_proxy_op);
  CHECK(op->pid == int(::getpid()));
  CHECK(op->parent == find_start(ev, ev_coll)->handle);
  CHECK(op->rank == 2);
  CHECK(find_start(ev, ev_proxy_step)->parent == op->handle);

  r.reset();
  c.foreign_proxy_op(pid_t(::getpid() + 1), 3, 1, 5);
  ev = r.events();
  REQUIRE(find_start(ev, ev_proxy_op));
  CHECK(find_start(ev, ev_proxy_op)->pid == int(::getpid()) + 1);
  CHECK(find_start(ev, ev_proxy_op)->parent == reinterpret_cast<void*>(0x10));
  CHECK(find_start(ev, ev_proxy_op)->context == reinterpret_cast<void*>(0x20));
  CHECK(find_start(ev, ev_proxy_op)->channel_id == 3);

  r.reset();
  c.start_only(c.enqueue(allreduce(1 << 20, 3)), 42);
  ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 3);
  CHECK(count_of(ev, rec_call_stop, ev_kernel_ch) == 0);
  CHECK(count_of(ev, rec_call_record, ev_kernel_ch) == 0);
  CHECK(count_of(ev, rec_call_start, ev_proxy_op) == 0);
}

TEST_CASE("complete_timed: NCCL's proxy state order, time order across channels, mask gating", "[sim][proxy][timed]") {
  using namespace abi;
  for (int v : abi::versions) {
    CAPTURE(v);
    recorder r(v);
    comm_config cc = cfg(2, 8, 2);
    cc.mask_override = ev_coll | ev_group | ev_proxy_op | ev_proxy_step | ev_kernel_ch;
    comm_driver c(r.lib, cc);
    r.reset();
    const pending_op p = c.enqueue(allreduce(1 << 20, 2));
    // Channel 0: a send whose receiver is late (PeerWait), channel 1: a recv; kernel 100..900 on both.
    const kernel_time kt[2] = {{100, 900}, {100, 880}};
    proxy_plan pl[2];
    pl[0].channel = 0;
    pl[0].is_send = true;
    pl[0].peer = 3;
    pl[0].start = 100;
    pl[0].step_bytes = 4096;
    pl[0].n_steps = 2;
    pl[0].steps[0] = {100, 100, 400, 500};
    pl[0].steps[1] = {100, 600, 600, 700};
    pl[1].channel = 1;
    pl[1].is_send = false;
    pl[1].peer = 1;
    pl[1].start = 100;
    pl[1].step_bytes = 4096;
    pl[1].n_steps = 1;
    pl[1].steps[0] = {100, 450, 450, 460};
    const timed_op ops[1] = {{&p, std::span<const kernel_time>(kt, 2), std::span<const proxy_plan>(pl, 2)}};
    std::vector<std::uint64_t> waits;
    std::vector<std::pair<std::size_t, bool>> next_is_step;  // (log position of the next event, step flag)
    c.complete_timed(std::span<const timed_op>(ops, 1), [&](std::uint64_t t, bool step) {
      waits.push_back(t);
      next_is_step.emplace_back(r.count(), step);
    });
    CHECK(std::is_sorted(waits.begin(), waits.end()));
    CHECK(waits.front() == 100);
    CHECK(waits.back() == 900);
    // The step flag announces exactly the ProxyStep events (start, 3 states, stop: the plugin times
    // proxy states in those calls; the simulated proxy clock at --speed 0 covers those only).
    const auto log = r.log();
    std::size_t flagged = 0;
    for (std::size_t i = 0; i < next_is_step.size(); ++i) {
      const auto [pos, step] = next_is_step[i];
      const std::size_t end = i + 1 < next_is_step.size() ? next_is_step[i + 1].first : log.size();
      for (std::size_t k = pos; k < end; ++k) {
        CAPTURE(i, k, log[k].type, log[k].call);
        CHECK((log[k].type == ev_proxy_step || log[k].type == ev_net_plugin) == step);
      }
      flagged += step;
    }
    CHECK(flagged == 3 * 4);  // 3 steps x (post, ready, sent, done)
    const auto ev = r.events();
    CHECK(count_of(ev, rec_call_start, ev_proxy_op) == 2);
    CHECK(count_of(ev, rec_call_start, ev_proxy_step) == 3);
    CHECK(count_of(ev, rec_call_stop, ev_proxy_step) == 3);
    CHECK(count_of(ev, rec_call_stop, ev_proxy_op) == 2);
    CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 2);
    // Per step, the send states 8 -> 20 -> 9 and the recv states 10 -> 11 -> 12, each after its start.
    std::map<void*, std::vector<int>> states;
    std::map<void*, std::vector<std::uint64_t>> sizes;
    for (const auto& e : ev)
      if (e.call == rec_call_record && e.type == ev_proxy_step) {
        states[e.handle].push_back(e.state);
        sizes[e.handle].push_back(e.arg);
      }
    const auto* send0 = find_start(ev, ev_proxy_step, 0);
    REQUIRE(send0);
    int n_send = 0, n_recv = 0;
    for (const auto& [h, st] : states) {
      if (st == std::vector<int>{8, 20, 9})
        ++n_send;
      else if (st == std::vector<int>{10, 11, 12})
        ++n_recv;
      else
        FAIL("unexpected state sequence");
    }
    CHECK(n_send == 2);
    CHECK(n_recv == 1);
    // transSize is NCCL's sub->transSize: the step's size from SendWait (send) / RecvFlushWait (recv) on;
    // the first step's earlier states carry 0.
    CHECK(sizes[send0->handle] == std::vector<std::uint64_t>{0, 0, 4096});
    // The ProxyOp starts before the kernel channel (appended at launch) and each ProxyOp stops after its steps.
    std::size_t first_pop = 0, first_kch = 0;
    for (std::size_t i = 0; i < ev.size(); ++i) {
      if (!first_pop && ev[i].call == rec_call_start && ev[i].type == ev_proxy_op) first_pop = i + 1;
      if (!first_kch && ev[i].call == rec_call_start && ev[i].type == ev_kernel_ch) first_kch = i + 1;
    }
    CHECK(first_pop < first_kch);
    // Time order across channels: the recv's FlushWait (t=450) comes between the send's SendWait (t=400) and its stop (500).
    std::vector<std::string> seq;
    for (const auto& e : ev)
      if (e.call == rec_call_record && e.type == ev_proxy_step) seq.push_back(std::to_string(e.state));
    CHECK(seq == std::vector<std::string>{"8", "20", "8", "10", "9", "11", "12", "20", "9"});
    // KernelCh stop carries the channel's own stop time.
    std::vector<std::uint64_t> stops;
    for (const auto& e : ev)
      if (e.call == rec_call_record && e.type == ev_kernel_ch) stops.push_back(e.arg);
    CHECK(stops == std::vector<std::uint64_t>{880, 900});

    // Mask without ProxyStep: ProxyOps only; without ProxyOp (and step): nothing proxy-side.
    comm_driver::set_mask(ev_coll | ev_group | ev_proxy_op | ev_kernel_ch);
    r.reset();
    const pending_op p2 = c.enqueue(allreduce(1 << 20, 2));
    const timed_op ops2[1] = {{&p2, std::span<const kernel_time>(kt, 2), std::span<const proxy_plan>(pl, 2)}};
    c.complete_timed(std::span<const timed_op>(ops2, 1), [](std::uint64_t, bool) {});
    auto ev2 = r.events();
    CHECK(count_of(ev2, rec_call_start, ev_proxy_op) == 2);
    CHECK(count_of(ev2, rec_call_start, ev_proxy_step) == 0);
    comm_driver::set_mask(ev_coll | ev_group | ev_kernel_ch);
    r.reset();
    const pending_op p3 = c.enqueue(allreduce(1 << 20, 2));
    const timed_op ops3[1] = {{&p3, std::span<const kernel_time>(kt, 2), std::span<const proxy_plan>(pl, 2)}};
    c.complete_timed(std::span<const timed_op>(ops3, 1), [](std::uint64_t, bool) {});
    ev2 = r.events();
    CHECK(count_of(ev2, rec_call_start, ev_proxy_op) == 0);
    CHECK(count_of(ev2, rec_call_start, ev_kernel_ch) == 2);
    CHECK(count_of(ev2, rec_call_stop, ev_kernel_ch) == 2);
  }
}

TEST_CASE("v5 shim quirks: garbage args pointer for 23/24", "[sim][shim]") {
  recorder r(5);
  comm_config q = cfg();
  q.shim_quirks = true;
  comm_driver c(r.lib, q);
  r.reset();
  c.enqueue(allreduce());
  const auto ev = r.events();
  REQUIRE(ev.size() > 2);
  CHECK(ev[1].state == 23);
  CHECK_FALSE(ev[1].args_null);
}

TEST_CASE("simulated CUDA driver: thread-local device", "[sim][simcuda]") {
  void* h = ::dlopen(NCCLINSP_SIMCUDA_LIB, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(h);
  auto init = reinterpret_cast<int (*)(unsigned)>(::dlsym(h, "cuInit"));
  auto get = reinterpret_cast<int (*)(int*)>(::dlsym(h, "cuCtxGetDevice"));
  auto uuid = reinterpret_cast<int (*)(unsigned char*, int)>(::dlsym(h, "cuDeviceGetUuid_v2"));
  auto uuid1 = reinterpret_cast<int (*)(unsigned char*, int)>(::dlsym(h, "cuDeviceGetUuid"));
  auto set = reinterpret_cast<void (*)(int, const unsigned char*)>(::dlsym(h, "ncclinsp_simcuda_set_device"));
  REQUIRE((init && get && uuid && uuid1 && set));
  CHECK(init(0) == 0);
  int dev = -1;
  CHECK(get(&dev) == 201);
  unsigned char u[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, out[16] = {};
  set(3, u);
  CHECK(get(&dev) == 0);
  CHECK(dev == 3);
  CHECK(uuid(out, 3) == 0);
  CHECK(std::memcmp(out, u, 16) == 0);
  CHECK(uuid1(out, 3) == 0);
  std::thread([&] {
    int d2 = -1;
    CHECK(get(&d2) == 201);
  }).join();
  set(-1, nullptr);
  CHECK(get(&dev) == 201);
  ::dlclose(h);
}

TEST_CASE("ncclinsp-sim --single-process smoke run against the recording plugin", "[sim][smoke]") {
  const std::string exe = NCCLINSP_SIM_EXE;
  // A missing simulator fails the test (the test command builds it; nothing passes by skipping).
  REQUIRE_FALSE(exe.empty());
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ncclinsp-sim-smoke-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string dump = (dir / "counts.txt").string();
  const std::string summary = (dir / "summary.json").string();
  const std::string cmd =
      "REC_PLUGIN_MASK=0x46 REC_PLUGIN_DUMP=" + dump + " " + exe + " --plugin " NCCLINSP_RECORDING_PLUGIN +
      " --single-process --nodes 2 --gpus 2 --duration 3 --speed 0 --out " + (dir / "out").string() + " --summary " +
      summary + " --net-degrade 50@1-2 --purge-inflight --hang-rank 3@2";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::map<std::pair<int, std::uint64_t>, std::size_t> counts;
  std::ifstream f(dump);
  int call = 0;
  unsigned long long type = 0;
  std::size_t n = 0;
  while (f >> call >> type >> n) counts[{call, type}] = n;
  using namespace abi;
  CHECK(counts[{rec_call_init, 0}] == 2 * 2 * 4);  // tp, fsdp, dp, pp per rank
  CHECK(counts[{rec_call_finalize, 0}] == 16);
  CHECK(counts[{rec_call_start, ev_coll}] > 50);
  CHECK(counts[{rec_call_start, ev_p2p}] > 5);
  CHECK(counts[{rec_call_start, ev_kernel_ch}] > counts[{rec_call_stop, ev_kernel_ch}]);  // purge + hang
  CHECK(counts[{rec_call_stop, ev_kernel_ch}] > 100);
  CHECK(fs::exists(dir / "out" / "ncclinsp_sim.prom"));
  std::ifstream prom(dir / "out" / "ncclinsp_sim.prom");
  std::stringstream ps;
  ps << prom.rdbuf();
  CHECK(ps.str().find("# TYPE ncclinsp_sim_steps_total counter") != std::string::npos);
  CHECK(ps.str().find("ncclinsp_sim_step_tflops{node=\"node1\",rank=\"3\"}") != std::string::npos);
  std::ifstream sj(summary);
  std::stringstream ss;
  ss << sj.rdbuf();
  CHECK(ss.str().find("\"net_degrade\"") != std::string::npos);
  CHECK(ss.str().find("\"tflops\"") != std::string::npos);
  fs::remove_all(dir);
}

// ---- Send/Recv to the rank itself, one-rank collectives, plans (tests/traces/nccl-2.28.9-h200-onerank-cases.trace)

namespace {
op_desc self_p2p(nccl_func f, int rank, std::size_t count, std::uint8_t nch, std::uintptr_t buff) {
  op_desc d;
  d.kind = op_kind::p2p;
  d.func = f;
  d.dtype = nccl_dtype::float32;
  d.count = count;
  d.peer = rank;
  d.n_channels = nch;
  if (f == nccl_func::send)
    d.send_buff = reinterpret_cast<const void*>(buff);
  else
    d.recv_buff = reinterpret_cast<void*>(buff);
  return d;
}
}  // namespace

TEST_CASE("Send/Recv to the rank itself: P2p with its channels, never KernelCh or ProxyOp", "[sim][self]") {
  using namespace abi;
  for (int v : {5, 6, 7}) {
    recorder r(v);
    r.set_mask(0xFFF);
    // A two-node communicator: a peer P2P would have ProxyOps; the self one has none.
    comm_driver c(r.lib, cfg(2, 2, 1));
    r.reset();
    const op_desc ops[] = {self_p2p(nccl_func::send, 1, 1 << 20, 64, 0x1000),
                           self_p2p(nccl_func::recv, 1, 1 << 20, 64, 0x2000)};
    pending_op p[2];
    c.enqueue(ops, p);
    for (const auto& q : p) {
      CHECK(q.self_p2p);
      CHECK_FALSE(q.kernel_events);
      CHECK_FALSE(q.network);
      c.complete(q, 1000, 2000);  // what a caller may still do: no event follows
    }
    const auto ev = r.events();
    const std::vector<std::string> want = {S(rec_call_start, ev_group_api),
                                           S(rec_call_record, ev_group_api, 23),
                                           S(rec_call_start, ev_p2p_api),
                                           S(rec_call_stop, ev_p2p_api),
                                           S(rec_call_start, ev_p2p_api),
                                           S(rec_call_stop, ev_p2p_api),
                                           S(rec_call_record, ev_group_api, 24),
                                           S(rec_call_start, ev_kernel_launch),
                                           S(rec_call_stop, ev_kernel_launch),
                                           S(rec_call_start, ev_group),
                                           S(rec_call_start, ev_p2p),
                                           S(rec_call_start, ev_p2p),
                                           S(rec_call_stop, ev_p2p),
                                           S(rec_call_stop, ev_p2p),
                                           S(rec_call_stop, ev_group),
                                           S(rec_call_stop, ev_group_api)};
    CHECK(sigs(ev) == want);
    const auto* send = find_start(ev, ev_p2p, 0);
    REQUIRE(send);
    CHECK(send->n_channels == 64);
    CHECK(send->peer == 1);
    CHECK(send->parent == find_start(ev, ev_p2p_api, 0)->handle);
    CHECK(send->parent_group == find_start(ev, ev_group)->handle);
  }
}

TEST_CASE("one-rank communicator: collectives emit nothing, Send/Recv to itself does", "[sim][self]") {
  using namespace abi;
  recorder r(5);
  r.set_mask(0xFFF);
  comm_driver c(r.lib, cfg(1, 1, 0));
  r.reset();
  pending_op p = c.enqueue(allreduce());
  CHECK(p.one_rank);
  c.complete(p, 1, 2);
  CHECK(r.events().empty());
  // One group {AllReduce, Send, Recv}: the GroupApi starts with the Send (no CollApi for the AllReduce).
  const op_desc ops[] = {allreduce(), self_p2p(nccl_func::send, 0, 256, 4, 0x1000),
                         self_p2p(nccl_func::recv, 0, 256, 4, 0x2000)};
  pending_op out[3];
  c.enqueue(ops, out);
  const auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_group_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll_api) == 0);
  CHECK(count_of(ev, rec_call_start, ev_coll) == 0);
  CHECK(count_of(ev, rec_call_start, ev_p2p) == 2);
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 0);
  // In place (send buffer == recv buffer): skipped by scheduleP2pTasksToPlan, P2pApi only, no plan.
  r.reset();
  const op_desc inplace[] = {self_p2p(nccl_func::send, 0, 256, 4, 0x3000),
                             self_p2p(nccl_func::recv, 0, 256, 4, 0x3000)};
  pending_op q[2];
  c.enqueue(inplace, q);
  const auto ev2 = r.events();
  CHECK(count_of(ev2, rec_call_start, ev_p2p_api) == 2);
  CHECK(count_of(ev2, rec_call_start, ev_kernel_launch) == 0);
  CHECK(count_of(ev2, rec_call_start, ev_group) == 0);
  CHECK(count_of(ev2, rec_call_start, ev_p2p) == 0);
}

TEST_CASE("plans: 4 self Send/Recv pairs of 64 channels split 3 + 1 (4 KiB kernel arguments)", "[sim][self]") {
  using namespace abi;
  recorder r(5);
  r.set_mask(0xFFF);
  comm_driver c(r.lib, cfg(1, 1, 0));
  r.reset();
  std::vector<op_desc> ops;
  for (int i = 0; i < 4; ++i) {
    ops.push_back(self_p2p(nccl_func::send, 0, 2 << 20, 64, 0x10000 + std::uintptr_t(i) * 0x800000));
    ops.push_back(self_p2p(nccl_func::recv, 0, 2 << 20, 64, 0x90000000 + std::uintptr_t(i) * 0x800000));
  }
  for (int i = 0; i < 4; ++i) ops.push_back(allreduce(1 << 18, 2));  // one-rank: nothing
  std::vector<pending_op> out(ops.size());
  c.enqueue(ops, out);
  const auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_group_api) == 1);
  CHECK(count_of(ev, rec_call_start, ev_kernel_launch) == 2);
  CHECK(count_of(ev, rec_call_start, ev_group) == 2);
  // Plan 1: six P2p under the first Group, plan 2: two under the second, in API order.
  const void* g0 = find_start(ev, ev_group, 0)->handle;
  const void* g1 = find_start(ev, ev_group, 1)->handle;
  for (int i = 0; i < 8; ++i) {
    const auto* p = find_start(ev, ev_p2p, i);
    REQUIRE(p);
    CHECK(p->parent_group == (i < 6 ? g0 : g1));
    CHECK(p->parent == find_start(ev, ev_p2p_api, i)->handle);
  }
}

TEST_CASE("capture: a plan without proxy ops emits at capture, its replays nothing", "[sim][self][graph]") {
  using namespace abi;
  for (const nccl_release* rel : {&release_2_28, &release_2_30}) {
    recorder r(rel->abi);
    r.set_mask(0xFFF);
    comm_config k = cfg(1, 1, 0);
    k.release = rel;
    comm_driver c(r.lib, k);
    r.reset();
    const op_desc ops[] = {self_p2p(nccl_func::send, 0, 65536, 4, 0x1000),
                           self_p2p(nccl_func::recv, 0, 65536, 4, 0x2000), allreduce(65536, 2)};
    captured_graph g;
    c.capture(ops, g);
    auto ev = r.events();
    CHECK(find_start(ev, ev_group_api)->group_depth == 2);
    CHECK(count_of(ev, rec_call_start, ev_p2p_api) == 2);
    CHECK(count_of(ev, rec_call_start, ev_kernel_launch) == 1);
    CHECK(count_of(ev, rec_call_start, ev_group) == 1);  // hostStreamPlanTask at capture, on this thread
    CHECK(count_of(ev, rec_call_start, ev_p2p) == 2);
    r.reset();
    for (int i = 0; i < 5; ++i) {
      pending_op out[3];
      c.replay(g, out);
      for (const auto& p : out) {
        CHECK_FALSE(p.kernel_events);
        c.complete(p, 1, 2);
      }
    }
    CHECK(r.events().empty());
  }
  // 2.31.2: a self-only plan with KernelCh in the mask has profiler ops (hasProfilerOps), so a host
  // callback: the API events and the launch at capture, Group + P2p + KernelCh (no ProxyOp) per replay.
  {
    recorder r(release_2_31_2.abi);
    r.set_mask(0xFFF);
    comm_config k = cfg(1, 1, 0);
    k.release = &release_2_31_2;
    comm_driver c(r.lib, k);
    r.reset();
    const op_desc ops[] = {self_p2p(nccl_func::send, 0, 65536, 4, 0x1000),
                           self_p2p(nccl_func::recv, 0, 65536, 4, 0x2000)};
    captured_graph g;
    c.capture(ops, g);
    auto ev = r.events();
    CHECK(count_of(ev, rec_call_start, ev_p2p_api) == 2);
    CHECK(count_of(ev, rec_call_start, ev_kernel_launch) == 1);
    CHECK(count_of(ev, rec_call_start, ev_group) == 0);
    CHECK(count_of(ev, rec_call_start, ev_p2p) == 0);
    r.reset();
    for (int i = 0; i < 5; ++i) {
      pending_op out[2];
      c.replay(g, out);
      for (const auto& p : out) {
        CHECK(p.kernel_events);
        CHECK(p.replay);
        CHECK_FALSE(p.shifted);
        c.complete(p, 1, 2);
      }
    }
    ev = r.events();
    CHECK(count_of(ev, rec_call_start, ev_group) == 5);
    CHECK(count_of(ev, rec_call_start, ev_p2p) == 10);
    CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 40);
    CHECK(count_of(ev, rec_call_start, ev_proxy_op) == 0);
    CHECK(count_of(ev, rec_call_start, ev_p2p_api) == 0);
  }
  // A captured plan with proxy ops (KernelCh in the mask): nothing but the API events and the launch at
  // capture, Group + Coll + KernelCh at every replay.
  recorder r(5);
  r.set_mask(0xFFF);
  comm_driver c(r.lib, cfg(1, 4, 1));
  r.reset();
  const op_desc ar = allreduce(65536, 2);
  captured_graph g;
  c.capture(std::span<const op_desc>(&ar, 1), g);
  CHECK(count_of(r.events(), rec_call_start, ev_group) == 0);
  r.reset();
  pending_op p;
  c.replay(g, std::span<pending_op>(&p, 1));
  c.complete(p, 1, 2);
  const auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_group) == 1);
  CHECK(count_of(ev, rec_call_start, ev_coll) == 1);
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 2);
  // Without KernelCh in the mask the plan has no proxy op on one node: Group + Coll once, at capture.
  recorder r2(5);
  r2.set_mask(ev_group_api | ev_coll_api | ev_group | ev_coll);
  comm_driver c2(r2.lib, cfg(1, 4, 1));
  r2.reset();
  captured_graph g2;
  c2.capture(std::span<const op_desc>(&ar, 1), g2);
  CHECK(count_of(r2.events(), rec_call_start, ev_coll) == 1);
  r2.reset();
  c2.replay(g2, std::span<pending_op>(&p, 1));
  CHECK(r2.events().empty());
}

// ---- The self work's device counter (nccl_release::self_p2p_shifts_counter, self_p2p_kernel_ch) ---------

TEST_CASE("2.31.2: Send/Recv to the rank itself gets KernelCh on its channels, never a ProxyOp", "[sim][self]") {
  using namespace abi;
  recorder r(7);
  r.set_mask(0xFFFF);
  comm_config k = cfg(2, 2, 1);  // two nodes: a peer pair would have ProxyOps
  k.release = &release_2_31_2;
  comm_driver c(r.lib, k);
  r.reset();
  const op_desc ops[] = {self_p2p(nccl_func::send, 1, 1 << 20, 8, 0x1000),
                         self_p2p(nccl_func::recv, 1, 1 << 20, 8, 0x2000)};
  pending_op p[2];
  c.enqueue(ops, p);
  for (const auto& q : p) {
    CHECK(q.self_p2p);
    CHECK(q.kernel_events);
    CHECK(q.channel_lo == 0);  // round 0's base
    CHECK(q.work == 1);        // the host counts the pair: one work per channel
    CHECK(q.dev_work == 1);
    CHECK_FALSE(q.shifted);
    c.complete(q, 1000, 2000);
  }
  const auto ev = r.events();
  CHECK(count_of(ev, rec_call_start, ev_kernel_ch) == 16);
  CHECK(count_of(ev, rec_call_start, ev_proxy_op) == 0);
  CHECK(find_start(ev, ev_kernel_ch, 0)->channel_id == 0);
  CHECK(find_start(ev, ev_kernel_ch, 7)->channel_id == 7);
  CHECK(find_start(ev, ev_kernel_ch, 0)->parent == find_start(ev, ev_p2p, 0)->handle);
}

TEST_CASE("up to 2.31.0a a self work shifts its channels' host counter for good", "[sim][self][ring]") {
  // Per iteration one group {self pair on channels 0..3, peer pair on channels 0..3 (round 1 of a
  // two-GPU node across nodes)}; then an AllReduce on channels 0..3.
  for (const nccl_release* rel : {&release_2_27, &release_2_28, &release_2_30, &release_2_31_2}) {
    INFO("NCCL " << rel->name);
    recorder r(rel->abi);
    r.set_mask(0xFFF);
    comm_config k = cfg(2, 4, 0);
    k.release = rel;
    comm_driver c(r.lib, k);
    const bool shifts = rel->self_p2p_shifts_counter;
    std::uint64_t t = 1'000'000;
    for (int i = 0; i < 3; ++i, t += 1'000'000) {
      op_desc g[] = {self_p2p(nccl_func::send, 0, 1 << 20, 4, 0x1000), self_p2p(nccl_func::recv, 0, 1 << 20, 4, 0x2000),
                     self_p2p(nccl_func::send, 1, 1 << 20, 4, 0x3000),
                     self_p2p(nccl_func::recv, 1, 1 << 20, 4, 0x4000)};
      for (auto& d : g) d.p2p_round = d.peer == 0 ? 0 : 1;
      g[2].channel_lo = g[3].channel_lo = 0;
      pending_op p[4];
      c.enqueue(g, p, 1);
      CHECK(p[0].dev_work == std::uint64_t(2 * i + 1));  // the device counts both pairs
      CHECK(p[2].dev_work == std::uint64_t(2 * i + 2));
      CHECK(p[3].dev_work == p[2].dev_work);  // Send and Recv of a pair: one work
      CHECK(p[2].work == (shifts ? std::uint64_t(i + 1) : std::uint64_t(2 * i + 2)));
      CHECK(p[0].work == (shifts ? 0u : std::uint64_t(2 * i + 1)));
      CHECK(p[2].shifted == shifts);
      // The self pair's work runs (stamps its slot) whether or not it has KernelCh.
      c.device_run(p[0], std::vector<kernel_time>{{t, t + 10'000}});
      r.reset();
      // Shifted: the peer's slot was written by an earlier work, read at once, before its own runs.
      CHECK(c.read_back(p[2]) == shifts);
      if (shifts) {
        const auto* kc = find_start(r.events(), abi::ev_kernel_ch);
        REQUIRE(kc);
        // Slot `work` holds device work i + 1: the first iteration's self work, then the earlier works.
        const std::uint64_t want = i == 0 ? t : i == 1 ? 1'000'000 + 100'000 : 2'000'000;
        CHECK(kc->ptimer == want);
      }
      c.device_run(p[2], std::vector<kernel_time>{{t + 100'000, t + 900'000}});
      if (!shifts) {
        CHECK(c.read_back(p[2]));
        CHECK(find_start(r.events(), abi::ev_kernel_ch)->ptimer == t + 100'000);
      }
    }
    const auto ar = c.enqueue(allreduce(1 << 20, 4));
    CHECK(ar.shifted == shifts);
    CHECK(ar.dev_work - ar.work == (shifts ? 3u : 0u));
  }
}

TEST_CASE("up to 2.31.0a silent replays of a captured self-only plan add to the shift", "[sim][self][graph][ring]") {
  for (const nccl_release* rel : {&release_2_28, &release_2_31_2}) {
    INFO("NCCL " << rel->name);
    recorder r(rel->abi);
    r.set_mask(0xFFF);
    comm_config k = cfg(1, 2, 0);
    k.release = rel;
    comm_driver c(r.lib, k);
    const op_desc ops[] = {self_p2p(nccl_func::send, 0, 65536, 4, 0x1000),
                           self_p2p(nccl_func::recv, 0, 65536, 4, 0x2000)};
    captured_graph g;
    c.capture(ops, g);
    for (int i = 0; i < 60; ++i) {
      pending_op out[2];
      c.replay(g, out);
    }
    const pending_op ar = c.enqueue(allreduce(1 << 20, 4));
    CHECK(ar.shifted == rel->self_p2p_shifts_counter);
    CHECK(ar.work == (rel->self_p2p_shifts_counter ? 1u : 61u));
    CHECK(ar.dev_work == 61);
  }
}
