// proxy_table: NCCL's SendWait (state 9) split into the step's own time on the wire and its queueing
// behind the earlier steps in flight toward the same peer (net.cc tests only the oldest step).
#include <catch2/catch.hpp>

#include "ncclinsp/proxy_stats.hpp"

using namespace ncclinsp;

namespace {

struct totals {
  std::uint64_t network = 0, queue = 0, gpu = 0;
};
totals send_totals(const proxy_table& t, int peer) {
  totals r;
  t.for_each([&](const proxy_table::peer_totals& p) {
    if (p.peer != peer || !p.send) return;
    r.gpu = p.wait_ns[proxy_slot(proxy_wait::send_gpu)];
    r.network = p.wait_ns[proxy_slot(proxy_wait::send_network)];
    r.queue = p.wait_ns[proxy_slot(proxy_wait::send_queue)];
  });
  return r;
}

}  // namespace

TEST_CASE("proxy_table: SendWait of queued steps is split into wire time and queueing", "[proxy]") {
  // A bottleneck edge: 4 steps accepted at once (t = 0), the wire moves one every 100 ns, FIFO:
  // completions at 100, 200, 300, 400. SendWait = 100, 200, 300, 400; on the wire 100 each.
  proxy_table t;
  const auto e = t.entry(3, true);
  for (std::uint64_t k = 1; k <= 4; ++k) t.add_wait(e, proxy_wait::send_network, 100 * k, 1000 + 100 * k);
  totals r = send_totals(t, 3);
  CHECK(r.network == 400);
  CHECK(r.queue == 600);
  // A paced edge: each step accepted after the previous completed: no queueing.
  const auto f = t.entry(5, true);
  for (std::uint64_t k = 0; k < 4; ++k) t.add_wait(f, proxy_wait::send_network, 40, 5000 + 1000 * k + 40);
  r = send_totals(t, 5);
  CHECK(r.network == 160);
  CHECK(r.queue == 0);
  // Other states are added as they are; a recv entry is separate.
  t.add_wait(f, proxy_wait::send_gpu, 7);
  CHECK(send_totals(t, 5).gpu == 7);
  const auto g = t.entry(5, false);
  t.add_wait(g, proxy_wait::recv_network, 11);
  std::uint64_t recv_network = 0;
  t.for_each([&](const proxy_table::peer_totals& p) {
    if (!p.send) recv_network = p.wait_ns[proxy_slot(proxy_wait::recv_network)];
  });
  CHECK(recv_network == 11);
  // Reset forgets the last completion.
  t.reset();
  const auto h = t.entry(3, true);
  t.add_wait(h, proxy_wait::send_network, 100, 50);
  CHECK(send_totals(t, 3).network == 100);  // an end before its duration: the start clamps at 0
}

TEST_CASE("proxy_table: state names and slots follow the direction", "[proxy]") {
  CHECK(std::string(proxy_wait_names[static_cast<std::size_t>(proxy_wait::send_queue)]) == "queue");
  CHECK(std::string(proxy_wait_names[static_cast<std::size_t>(proxy_wait::recv_gpu)]) == "gpu");
  CHECK(proxy_slot(proxy_wait::send_queue) == 3);
  CHECK(proxy_slot(proxy_wait::recv_network) == 0);
  CHECK(proxy_slot(proxy_wait::recv_gpu) == 2);
  proxy_wait w{};
  REQUIRE(proxy_wait_of(9, w));
  CHECK(w == proxy_wait::send_network);
  CHECK_FALSE(proxy_wait_of(13, w));
}
