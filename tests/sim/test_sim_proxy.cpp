// The driver's proxy events against the recording plugin: the RAS mask override, foreign PXN ProxyOps,
// and complete_timed's state order, time order and mask gating.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "driver_harness.hpp"

using namespace ncclinsp::sim;
using namespace ncclinsp_test::sim_driver;
namespace abi = ncclinsp::abi;

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
