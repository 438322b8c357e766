#pragma once
/// What ncclinsp-sim's rank threads share: one rank's state (`rank_state`: its communicators, the queue
/// from its user thread to its proxy thread, its counters and truth) and the process's run (`run_context`:
/// options, model, plugin, clock, stop flag), with each communicator's configuration as NCCL would build it.
/// Thread-safety: a rank's state is shared by its two threads only through the SPSC queue and atomics;
/// `run_context` is read-only but for `stop`.

#include "clock_map.hpp"
#include "job_model.hpp"
#include "nccl_driver.hpp"
#include "proxy_queue.hpp"
#include "truth_log.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ncclinsp::sim::app {

using u64 = std::uint64_t;
using namespace ncclinsp::sim::job;

struct rank_state {
  int node = 0, local = 0, global = 0;
  std::vector<std::unique_ptr<comm_driver>> comms;  // indexed by comm_kind
  spsc_queue q;
  std::atomic<u64> steps{0};
  std::atomic<double> tflops{0.0};
  std::atomic<bool> proxy_done{false};
  truth_log truth;  // proxy thread; read after it joined
};

struct run_context {
  const options& o;
  const model& m;
  const plugin_library& lib;
  clock_map clk;
  std::atomic<bool> stop{false};

  std::string node_label(int node) const { return o.node_prefix + std::to_string(node); }

  /// Hands an item to the rank's proxy thread (waits while its queue is full).
  void push(rank_state& r, const proxy_item& it) const {
    while (!r.q.push(it)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

  /// The rank's communicator of kind k (tp: its node's GPUs; fsdp: every rank; dp, pp: one rank per node,
  /// the GPUs with the same local index).
  comm_config make_comm(const rank_state& r, comm_kind k) const {
    comm_config c = base_config();
    switch (k) {
      case comm_kind::tp:
        c.name = "tp";
        c.comm_hash = mix(hash_str("tp"), u64(r.node));
        c.n_nodes = 1;
        c.n_ranks = o.gpus;
        c.rank = r.local;
        break;
      case comm_kind::fsdp:
        c.name = "fsdp";
        c.comm_hash = hash_str("fsdp");
        c.n_nodes = o.nodes;
        c.n_ranks = o.nodes * o.gpus;
        c.rank = r.global;
        break;
      case comm_kind::dp:
      case comm_kind::pp: {
        const char* base = k == comm_kind::dp ? "dp" : "pp";
        c.name = base + std::to_string(r.local);
        c.comm_hash = mix(hash_str(base), u64(r.local));
        c.n_nodes = o.nodes;
        c.n_ranks = o.nodes;
        c.rank = r.node;
        break;
      }
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);  // different seeds → different "jobs"
    return c;
  }

  /// The one communicator of --workload cases (ncclCommInitAll over one GPU: commName NULL, one rank)
  /// and --workload alltoall (`ep`, every rank of the job).
  comm_config make_workload_comm(const rank_state& r) const {
    comm_config c = base_config();
    if (o.cases) {
      c.null_name = true;
      c.comm_hash = hash_str("cases");
    } else {
      c.name = "ep";
      c.comm_hash = hash_str("ep");
      c.n_nodes = o.nodes;
      c.n_ranks = o.nodes * o.gpus;
      c.rank = r.global;
    }
    c.comm_hash ^= mix(o.seed, 0x5eed);
    return c;
  }

 private:
  comm_config base_config() const {
    comm_config c;
    c.mask_override = o.mask_override;
    c.release = o.nccl;
    c.recv_step_restarts = o.recv_restarts;
    c.drop_kernel_ch = o.drop_kernel_ch;
    return c;
  }
};

}  // namespace ncclinsp::sim::app
