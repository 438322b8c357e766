// StatsD sink example. `statsd_example HOST PORT` sends synthetic op metrics to a StatsD agent;
// `statsd_example --self-test` binds a loopback UDP listener, points the sink at it and checks
// what arrives (this is what ctest runs).
#include <ncclinsp/inspector.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <string>

#include "statsd_sink.hpp"

namespace {

void record_some(ncclinsp::inspector& insp) {
  const auto comm =
      insp.add_comm({.name = "dp", .hash = 3, .rank = 1, .nranks = 4, .nnodes = 1, .device = 0, .uuid = "GPU-0"});
  for (int i = 0; i < 3; ++i) {
    ncclinsp::op_record op =
        ncclinsp::make_op(ncclinsp::func::all_reduce, 1u << 20, ncclinsp::dtype::float32, 0, 200'000);
    op.alg = ncclinsp::algo::ring;
    op.pro = ncclinsp::proto::simple;
    insp.record(comm, op);
  }
  // A fourth AllReduce timed on the CPU: another cell (cells are also keyed by timing source), the
  // same series: the sink must send one value for it, not one per cell.
  ncclinsp::op_record cpu_timed =
      ncclinsp::make_op(ncclinsp::func::all_reduce, 1u << 20, ncclinsp::dtype::float32, 0, 200'000);
  cpu_timed.alg = ncclinsp::algo::ring;
  cpu_timed.pro = ncclinsp::proto::simple;
  cpu_timed.timing = ncclinsp::timing_source::kernel_cpu;
  insp.record(comm, cpu_timed);
  insp.record(comm, ncclinsp::make_op(ncclinsp::func::send, 1u << 20, ncclinsp::dtype::int8, 0, 50'000));
}

int self_test() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("udp listener");
    return 2;
  }
  const std::string port = std::to_string(ntohs(a.sin_port));
  std::string all;
  int datagrams = 0;
  {
    ncclinsp::inspector insp({.sinks = ncclinsp::make_sinks(example::statsd_sink({.port = port, .max_datagram = 512})),
                              .interval = std::chrono::milliseconds(0)});
    record_some(insp);
    if (!insp.flush()) return 3;
    for (;;) {  // one export's datagrams (the final one, at destruction, is not read)
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 500) <= 0) break;
      char buf[2048];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      if (n > 512) return 4;  // datagrams respect max_datagram
      ++datagrams;
      all.append(buf, static_cast<std::size_t>(n)).append("\n");
    }
  }
  std::printf("%d datagram(s):\n%s", datagrams, all.c_str());
  // One value per family and label set: no line repeats its name and tags.
  std::istringstream lines(all);
  std::set<std::string> keys;
  bool unique = true;
  for (std::string l; std::getline(lines, l);) {
    if (l.empty()) continue;
    const auto colon = l.find(':'), bar = l.find('|', colon);
    unique = keys.insert(l.substr(0, colon) + l.substr(bar)).second && unique;
  }
  const bool ok =
      datagrams >= 2 && unique && all.find("nccl.ncclinsp_ops:4|c|#job_id:") != std::string::npos &&
      all.find(
          ",comm_name:dp,comm_hash:0000000000000003,rank:1,nranks:4,n_nodes:1,collective:AllReduce,message_size:4MiB-8MiB,"
          "algo_proto:RING_SIMPLE") != std::string::npos &&
      all.find("nccl.ncclinsp_busy_seconds:8e-04|c") != std::string::npos &&
      all.find("nccl.nccl_bus_bandwidth_gbs:") != std::string::npos &&
      all.find("nccl.ncclinsp_ops:1|c|") != std::string::npos && all.find("collective:Send") != std::string::npos &&
      all.find("nccl.ncclinsp_inflight_ops:0|g|#") != std::string::npos;
  std::puts(ok ? "statsd self-test ok" : "statsd self-test FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--self-test") == 0) return self_test();
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s HOST PORT | --self-test\n", argv[0]);
    return 2;
  }
  ncclinsp::inspector insp({.sinks = ncclinsp::make_sinks(example::statsd_sink({.host = argv[1], .port = argv[2]})),
                            .interval = std::chrono::seconds(1)});
  record_some(insp);
  return 0;  // the destructor sends the final window
}
