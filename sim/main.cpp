/// ncclinsp-sim: simulates an N-node x G-GPU LLM training job driving an NCCL profiler plugin through the
/// real ABI (see sim/README.md for the workload, bandwidth model and fault injection).
///
/// Process model: the parent forks one child per node (re-exec of itself with a hidden --node-index), each
/// with its own NCCLINSP_NODE_NAME / NCCL_INSPECTOR_DUMP_DIR / NCCLINSP_CUDA_DRIVER; `--process-per-gpu`
/// (implied by --kill-rank) one child per GPU (also --gpu-index), as torchrun runs a job; `--single-process`
/// runs every rank in one process. A child that --kill-rank kills dies of SIGKILL: the parent counts that
/// as its expected end, any other end but exit 0 as a failure. Per rank: a user thread (enqueue) and a proxy thread (KernelCh events at
/// the simulated GPU end time), connected by a small SPSC queue (node_runner.hpp). This file: the process
/// management; cli.cpp the flags, summary.cpp the --summary JSON, proxy_clock.cpp the simulated clock.

#include "cli.hpp"
#include "clock_map.hpp"
#include "job_model.hpp"
#include "nccl_driver.hpp"
#include "node_runner.hpp"
#include "sim_device.hpp"
#include "summary.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef NCCLINSP_SIMCUDA_DEFAULT_PATH
#define NCCLINSP_SIMCUDA_DEFAULT_PATH ""
#endif

namespace {

using namespace ncclinsp::sim;
using namespace ncclinsp::sim::app;
namespace fs = std::filesystem;

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string default_cuda_driver() {
  const std::string exe = self_exe();
  if (!exe.empty()) {
    const fs::path p = fs::path(exe).parent_path() / "libncclinsp-simcuda.so";
    if (fs::exists(p)) return p.string();
  }
  return NCCLINSP_SIMCUDA_DEFAULT_PATH;
}

/// This process's outputs: a child's --trace, --truth and --truth-ops get ".<node>" (".<node>.gpu<k>" with
/// one process per GPU); its ncclinsp_sim.prom is sim_prom_name(gpu).
std::string file_suffix(const options& o) {
  if (o.node_index < 0) return {};
  return "." + o.node_prefix + std::to_string(o.node_index) +
         (o.gpu_index >= 0 ? ".gpu" + std::to_string(o.gpu_index) : "");
}

int run_nodes(const options& o, const std::vector<gpu_slot>& gpus, const std::string& prom_dir, u64 base_ns) {
  if (!o.cuda_driver.empty()) {
    if (void* h = ::dlopen(o.cuda_driver.c_str(), RTLD_NOW | RTLD_LOCAL))
      g_set_device = reinterpret_cast<set_device_fn>(::dlsym(h, "ncclinsp_simcuda_set_device"));
    if (!g_set_device)
      std::fprintf(stderr, "ncclinsp-sim: warning: cannot use simulated CUDA driver %s\n", o.cuda_driver.c_str());
  }
  plugin_library lib(o.plugin, o.abi);
  if (!lib.ok()) {
    std::fprintf(stderr, "ncclinsp-sim: %s\n", lib.error().c_str());
    return 2;
  }
  if (o.verbose)
    std::fprintf(stderr, "ncclinsp-sim: loaded %s (v%d) from %s\n", lib.name(), lib.abi(), o.plugin.c_str());
  // --trace: this process's calls into the plugin (a forked node's: FILE.<node>).
  std::unique_ptr<trace_sink> trace;
  if (!o.trace.empty()) {
    const std::string path = o.trace + file_suffix(o);
    trace = std::make_unique<trace_sink>(path, lib.abi(), o.nccl ? o.nccl->version_code : 0, "ncclinsp-sim");
    if (!trace->ok()) {
      std::fprintf(stderr, "ncclinsp-sim: cannot write --trace %s\n", path.c_str());
      return 1;
    }
    trace_sink::install(trace.get());
  }
  model m(o);
  node_runner nr(o, m, lib, clock_map{base_ns, o.speed});
  if (!prom_dir.empty()) fs::create_directories(prom_dir);
  const int rc = nr.run(gpus, prom_dir, sim_prom_name(o.gpu_index), file_suffix(o));
  trace_sink::install(nullptr);  // every communicator has finalized
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const auto exit_code = parse_command_line(argc, argv, o)) return *exit_code;
  g_uuid_salt = o.seed == 1 ? 0 : splitmix(o.seed);
  logger_verbose().store(o.verbose);
  if (o.cuda_driver.empty()) o.cuda_driver = default_cuda_driver();
  if (o.prom) {
    ::setenv("NCCL_INSPECTOR_ENABLE", "1", 0);
    ::setenv("NCCL_INSPECTOR_PROM_DUMP", "1", 0);
    ::setenv("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "1000000", 0);
  }
  if (!o.cuda_driver.empty()) ::setenv("NCCLINSP_CUDA_DRIVER", o.cuda_driver.c_str(), 1);
  // A simulated job's files are read after it ends (tests, demo, report): keep the final ones.
  ::setenv("NCCLINSP_PROM_KEEP_FILES", "1", 0);

  // Child: one node.
  if (o.node_index >= 0) {
    const std::string dir =
        o.out.empty() ? std::string() : (fs::path(o.out) / (o.node_prefix + std::to_string(o.node_index))).string();
    std::vector<gpu_slot> gpus;
    for (int l = 0; l < o.gpus; ++l)
      if (o.gpu_index < 0 || o.gpu_index == l) gpus.push_back({o.node_index, l});
    return run_nodes(o, gpus, dir, u64(o.start_wall_ns ? o.start_wall_ns : (long long)realtime_ns()));
  }

  if (!o.summary.empty()) {
    model m(o);
    std::error_code ec;
    if (const auto parent = fs::path(o.summary).parent_path(); !parent.empty()) fs::create_directories(parent, ec);
    write_summary(o, m, o.summary);
  }
  const u64 base = realtime_ns() + (o.single_process ? 0 : 300'000'000ull);  // children start aligned

  if (o.single_process) {
    if (!o.out.empty()) {
      fs::create_directories(o.out);
      ::setenv("NCCL_INSPECTOR_DUMP_DIR", o.out.c_str(), 0);
    }
    std::vector<gpu_slot> gpus;
    for (int k = 0; k < o.nodes; ++k)
      for (int l = 0; l < o.gpus; ++l) gpus.push_back({k, l});
    return run_nodes(o, gpus, o.out, base);
  }

  const std::string exe = self_exe();
  if (exe.empty()) return std::fprintf(stderr, "ncclinsp-sim: cannot find /proc/self/exe\n"), 1;
  // One child per node, or per GPU: (node, gpu) with gpu -1 for a whole node.
  std::vector<std::pair<pid_t, gpu_slot>> children;
  const int per_node = o.process_per_gpu ? o.gpus : 1;
  for (int c = 0; c < o.nodes * per_node; ++c) {
    const int k = c / per_node, gpu = o.process_per_gpu ? c % per_node : -1;
    const std::string name = o.node_prefix + std::to_string(k);
    std::string dump;
    if (!o.out.empty()) {
      dump = (fs::path(o.out) / name).string();
      fs::create_directories(dump);
    }
    const pid_t pid = ::fork();
    if (pid < 0) return std::perror("fork"), 1;
    if (pid == 0) {
      ::setenv("NCCLINSP_NODE_NAME", name.c_str(), 1);
      if (!dump.empty()) ::setenv("NCCL_INSPECTOR_DUMP_DIR", dump.c_str(), 1);
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--node-index");
      args.push_back(std::to_string(k));
      args.push_back("--start-wall-ns");
      args.push_back(std::to_string(base));
      if (gpu >= 0) {
        args.push_back("--gpu-index");
        args.push_back(std::to_string(gpu));
      }
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv(exe.c_str(), cargs.data());
      std::perror("execv");
      ::_exit(127);
    }
    children.push_back({pid, gpu_slot{k, gpu}});
  }
  const model m(o);
  int failed = 0;
  for (const auto& [pid, g] : children) {
    int status = 0;
    const bool waited = ::waitpid(pid, &status, 0) >= 0;
    // A --kill-rank child dies of SIGKILL at its kill time (before the run's end): that is its success.
    const double kill = g.local >= 0 ? rank_faults(o).kill_at(g.node * o.gpus + g.local) : -1;
    const bool killed = kill >= 0 && kill < o.end_time(m.nominal_step_s);
    if (waited &&
        (killed ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL : WIFEXITED(status) && WEXITSTATUS(status) == 0))
      continue;
    std::fprintf(stderr, "ncclinsp-sim: %s%d%s %s (status %#x)\n", o.node_prefix.c_str(), g.node,
                 g.local >= 0 ? (" gpu" + std::to_string(g.local)).c_str() : "",
                 killed ? "was to die of SIGKILL and did not" : "failed", status);
    ++failed;
  }
  return failed ? 1 : 0;
}
