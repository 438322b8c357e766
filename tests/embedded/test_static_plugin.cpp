// NCCL_PROFILER_PLUGIN=STATIC_PLUGIN: this executable is linked with ncclinsp_add_static_plugin(),
// so NCCL finds the profiler tables with dlopen(NULL) + dlsym("ncclProfiler_v<N>"), newest first
// (abi::versions). The test looks them up the same way and drives one op through the newest table's
// init/start/stop/finalize.
// Plugin state is process-wide and configured from the environment at the first init, so the
// driving runs in a forked child.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "ncclinsp/abi/versions.hpp"

namespace abi = ncclinsp::abi;

namespace {

std::string only_prom_file(const std::string& dir) {
  std::string found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".prom") found = dir + "/" + n;
    }
    ::closedir(d);
  }
  std::ifstream f(found);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using newest_table = abi::version<abi::newest>::table;
using newest_descr = abi::version<abi::newest>::descr;
const std::string newest_symbol = "ncclProfiler_v" + std::to_string(abi::newest);

int drive(const newest_table* t) {
  void* ctx = nullptr;
  int mask = 0;
  if (t->init(&ctx, 0x5eed, &mask, "static", 1, 2, 0, nullptr) != abi::success || !ctx) return 20;
  if (!(mask & abi::ev_coll) || !(mask & abi::ev_kernel_ch)) return 21;
  newest_descr d{};
  d.type = abi::ev_coll;
  d.coll.seqNumber = 7;
  d.coll.func = "AllReduce";
  d.coll.count = 1 << 20;
  d.coll.datatype = "ncclFloat32";
  d.coll.nChannels = 1;
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  void* coll = nullptr;
  t->startEvent(ctx, &coll, &d);
  if (!coll) return 22;
  t->stopEvent(coll);  // enqueued
  newest_descr k{};
  k.type = abi::ev_kernel_ch;
  k.parentObj = coll;
  k.kernelCh.channelId = 0;
  k.kernelCh.pTimer = 1'000'000;
  void* ch = nullptr;
  t->startEvent(ctx, &ch, &k);
  if (!ch) return 23;
  abi::state_args a{};
  a.kernelCh.pTimer = 1'400'000;  // 400 us on the GPU
  t->recordEventState(ch, abi::st_kernel_ch_stop, &a);
  t->stopEvent(ch);
  t->finalize(ctx);  // last communicator: final export
  return 0;
}

}  // namespace

TEST_CASE("STATIC_PLUGIN: dlopen(NULL) finds every profiler table in the executable", "[embedded][static]") {
  void* self = ::dlopen(nullptr, RTLD_NOW);
  REQUIRE(self);
  Dl_info main_info{};
  REQUIRE(::dladdr(reinterpret_cast<void*>(&only_prom_file), &main_info));
  for (int v : abi::versions) {
    INFO("ncclProfiler_v" << v);
    void* sym = ::dlsym(self, ("ncclProfiler_v" + std::to_string(v)).c_str());
    REQUIRE(sym);
    CHECK(std::string(*static_cast<const char* const*>(sym)) == "ncclinsp");  // `name` is the first member
    Dl_info info{};
    REQUIRE(::dladdr(sym, &info));
    CHECK(info.dli_fbase == main_info.dli_fbase);  // in the executable itself, not in a shared library
  }
}

TEST_CASE("STATIC_PLUGIN: init/start/stop/finalize through the table write the metrics", "[embedded][static]") {
  char tmpl[] = "/tmp/ncclinsp_static_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("NCCL_INSPECTOR_ENABLE", "1", 1);
    ::setenv("NCCL_INSPECTOR_PROM_DUMP", "1", 1);
    ::setenv("NCCL_INSPECTOR_DUMP_DIR", dir.c_str(), 1);
    ::setenv("NCCLINSP_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);  // no GPU: host-based file name
    ::setenv("NCCLINSP_NODE_NAME", "static-node", 1);
    ::setenv("NCCLINSP_PROM_KEEP_FILES", "1", 1);  // read after teardown
    void* self = ::dlopen(nullptr, RTLD_NOW);
    const auto* t = static_cast<const newest_table*>(::dlsym(self, newest_symbol.c_str()));
    ::_exit(t ? drive(t) : 19);
  }
  int st = 0;
  REQUIRE(::waitpid(pid, &st, 0) == pid);
  REQUIRE(WIFEXITED(st));
  REQUIRE(WEXITSTATUS(st) == 0);
  const std::string text = only_prom_file(dir);
  INFO(text.substr(0, 2000));
  CHECK(text.find("ncclinsp_ops_total{") != std::string::npos);
  CHECK(text.find("comm_name=\"static\"") != std::string::npos);
  CHECK(text.find("node=\"static-node\"") != std::string::npos);
  CHECK(text.find("ncclinsp_info{") != std::string::npos);
  CHECK(text.find("abi=\"v" + std::to_string(abi::newest) + "\"") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex(R"(\nncclinsp_busy_seconds_total\{[^}]*\} ([0-9.e+-]+)\n)")));
  CHECK(std::stod(m[1]) == Approx(400e-6));  // the 400 us GPU span
}
