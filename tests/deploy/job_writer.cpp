// A job's process for the shared-directory tests: the embedded inspector configured from the
// environment exactly as the plugin is (NCCL_INSPECTOR_* / NCCLINSP_*, the same prom_textfile_sink),
// one communicator on GPU <uuid>, a few AllReduce ops, one export. Then "exit" ends it normally
// (the final export at destruction) and "hold" keeps it running, exporting, until it is killed.
// Prints "ready" on stdout once its first file is published.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "ncclinsp/inspector.hpp"

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "exit") != 0 && std::strcmp(argv[2], "hold") != 0)) {
    std::fprintf(stderr, "usage: %s <gpu uuid> exit|hold\n", argv[0]);
    return 1;
  }
  using namespace ncclinsp;
  inspector insp(inspector_options::from_env());
  const comm_handle h =
      insp.add_comm({.name = "dp", .hash = 0xd0, .rank = 0, .nranks = 2, .nnodes = 1, .device = 0, .uuid = argv[1]});
  for (int i = 0; i < 8; ++i) insp.record(h, make_op(func::all_reduce, 1 << 22, dtype::float32, 0, 200'000));
  insp.flush();
  std::printf("ready\n");
  std::fflush(stdout);
  if (std::strcmp(argv[2], "hold") == 0)
    for (;;) ::pause();
  return 0;
}
