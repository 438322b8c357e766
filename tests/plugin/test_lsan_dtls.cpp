// LeakSanitizer in the test binaries' forked children (tests/asan_defaults.cpp, plugin_harness.hpp's
// in_child): a thread whose dynamic TLS block (a dlopen'ed library's thread_local, malloc'd by glibc)
// sits at 16 mod 4096 is checked, and what only that block points to is not a leak. Built with ASan only.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <future>
#include <thread>

#include "plugin_harness.hpp"

namespace {

/// In the child: threads touch the library's TLS until one's block is at 16 mod 4096; that thread
/// stores the only pointer to a heap block there and waits while LeakSanitizer checks the process.
/// 0: checked, no leak; 97: a leak reported; 3: no block landed there.
int check_with_block_at_16_mod_4096() {
  void* lib = ::dlopen(NCCLINSP_DTLS_LIB, RTLD_NOW);
  if (!lib) return 2;
  const auto slot = reinterpret_cast<void** (*)()>(::dlsym(lib, "ncclinsp_dtls_slot"));
  if (!slot) return 2;
  // Each thread's block is a fresh 64-byte heap chunk (a freed one waits in ASan's quarantine), and
  // one chunk in 64 starts a page: its user address is 16 mod 4096.
  for (int i = 0; i < 4096; ++i) {
    std::promise<bool> placed;
    std::promise<void> checked;
    std::thread t([&] {
      void** s = slot();
      const bool at = reinterpret_cast<std::uintptr_t>(s) % 4096 == 16;
      if (at) *s = std::malloc(100);
      placed.set_value(at);
      if (!at) return;
      checked.get_future().wait();
      std::free(*s);
    });
    if (!placed.get_future().get()) {
      t.join();
      continue;
    }
    const int leaks = __lsan_do_recoverable_leak_check();
    checked.set_value();
    t.join();
    return leaks ? 97 : 0;
  }
  return 3;
}

}  // namespace

TEST_CASE("LeakSanitizer checks a thread whose dynamic TLS block is at 16 mod 4096 - the test binaries' ASan defaults",
          "[asan]") {
  REQUIRE(__lsan_do_recoverable_leak_check);
  CHECK(ncclinsp_test::in_child({}, check_with_block_at_16_mod_4096) == 0);
}
