#pragma once
/// ncclinsp-sim's ranks of one process (a node's, a GPU's with --process-per-gpu, or every one with
/// --single-process): comm init on each rank's thread, per rank a user thread (training_thread.hpp or
/// workload_threads.hpp) and a proxy thread (proxy_thread.hpp), the `ncclinsp_sim.prom` writer
/// (sim_prom.hpp) once a second, the --truth files (truth_log.hpp), then comm finalize in NCCL's order.
/// Thread-safety: `run` starts and joins every thread.

#include "proxy_thread.hpp"
#include "rank_context.hpp"
#include "sim_device.hpp"
#include "sim_prom.hpp"
#include "training_thread.hpp"
#include "truth_log.hpp"
#include "workload_threads.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ncclinsp::sim::app {

/// One GPU of the job: node index and local GPU index.
struct gpu_slot {
  int node = 0, local = 0;
};

struct node_runner {
  run_context ctx;
  std::vector<std::unique_ptr<rank_state>> ranks;

  node_runner(const options& o, const model& m, const plugin_library& lib, clock_map clk) : ctx{o, m, lib, clk, {}} {}

  void user_thread(rank_state& r) {
    if (ctx.o.cases) return cases_user_thread(ctx, r);
    if (ctx.o.alltoall) return alltoall_user_thread(ctx, r);
    training_user_thread(ctx, r);
  }

  /// Runs the ranks of `gpus` to the end of the job. `prom_dir`/`prom_name`: this process's
  /// ncclinsp_sim.prom; `file_suffix`: added to the --truth and --truth-ops paths ("" for one process).
  int run(const std::vector<gpu_slot>& gpus, const std::string& prom_dir, const std::string& prom_name,
          const std::string& file_suffix) {
    const options& o = ctx.o;
    for (const gpu_slot& g : gpus) {
      auto r = std::make_unique<rank_state>();
      r->node = g.node;
      r->local = g.local;
      r->global = g.node * o.gpus + g.local;
      r->comms.resize(4);
      ranks.push_back(std::move(r));
    }
    // Communicator init runs on each rank's own thread (concurrently, like ncclCommInitRank per GPU).
    {
      std::vector<std::thread> init;
      for (auto& rp : ranks)
        init.emplace_back([this, r = rp.get()] {
          bind_device(r->node, r->local);
          if (ctx.o.cases) return;  // created and destroyed by its user thread
          if (ctx.o.alltoall) {     // the workload's one communicator
            r->comms[0] = std::make_unique<comm_driver>(ctx.lib, ctx.make_workload_comm(*r));
            return;
          }
          for (comm_kind k : {comm_kind::tp, comm_kind::fsdp, comm_kind::dp, comm_kind::pp}) {
            if (comm_size(ctx.o, k) < 2) continue;
            r->comms[std::size_t(k)] = std::make_unique<comm_driver>(ctx.lib, ctx.make_comm(*r, k));
          }
        });
      for (auto& t : init) t.join();
    }
    auto path = [&](const std::string& p) { return p.empty() ? p : p + file_suffix; };
    std::FILE* truth_ops = o.truth_ops.empty() ? nullptr : std::fopen(path(o.truth_ops).c_str(), "w");
    for (auto& rp : ranks) rp->truth.ops_file = truth_ops;
    std::vector<std::thread> threads;
    for (auto& rp : ranks) {
      threads.emplace_back([this, r = rp.get()] { proxy_thread(ctx, *r); });
      threads.emplace_back([this, r = rp.get()] { user_thread(*r); });
    }
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread writer([&] {
      std::unique_lock lk(mu);
      while (!done) {
        write_sim_prom(prom_dir, prom_name, o.node_prefix, ranks);
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return done; });
      }
    });
    for (auto& t : threads) t.join();
    {
      std::lock_guard lk(mu);
      done = true;
    }
    cv.notify_all();
    writer.join();
    write_sim_prom(prom_dir, prom_name, o.node_prefix, ranks);
    write_truth(path(o.truth), ranks);
    if (truth_ops) std::fclose(truth_ops);
    // ncclCommDestroy: finalize every communicator (destroy order: last created first).
    for (auto& r : ranks)
      for (auto it = r->comms.rbegin(); it != r->comms.rend(); ++it)
        if (*it) (*it)->finalize();
    for (auto& r : ranks) r->comms.clear();
    return 0;
  }
};

}  // namespace ncclinsp::sim::app
