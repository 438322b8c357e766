// The driver's Send/Recv to the rank itself against the recording plugin: channels, one-rank
// communicators, plans, graph capture, and the self work's device counter per release.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "driver_harness.hpp"

using namespace ncclinsp::sim;
using namespace ncclinsp_test::sim_driver;
namespace abi = ncclinsp::abi;

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
  CHECK(p.no_task);
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

// ---- The self work's device counter (nccl_behaviour::self_p2p_shifts_counter, self_p2p_kernel_ch) -------

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
    const bool shifts = rel->has(nccl_behaviour::self_p2p_shifts_counter);
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
    CHECK(ar.shifted == rel->has(nccl_behaviour::self_p2p_shifts_counter));
    CHECK(ar.work == (rel->has(nccl_behaviour::self_p2p_shifts_counter) ? 1u : 61u));
    CHECK(ar.dev_work == 61);
  }
}
