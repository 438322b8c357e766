// The glibc floor's replacements and old-version bindings (plugin/glibc_compat.cpp) at work: a
// library linked the way the plugin is (tests/plugin/glibc_compat_probe.cpp) is dlopen'ed and
// each probe runs its group through the C++ runtime that calls them. On this machine's glibc the
// old bindings resolve to the compat versions glibc keeps; the replacements of what glibc 2.28
// lacks are compared with glibc's own where it has them.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>

#include "plugin_harness.hpp"

namespace {
template <class Fn>
Fn probe(const char* name) {
  static void* lib = ::dlopen(NCCLINSP_COMPAT_PROBE, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib != nullptr);
  auto* fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  REQUIRE(fn != nullptr);
  return fn;
}
std::string verdict(const char* failure) { return failure ? failure : "ok"; }
}  // namespace

TEST_CASE("glibc floor: exceptions unwind through our _dl_find_object, which agrees with glibc's", "[plugin][glibc]") {
  CHECK(verdict(probe<const char* (*)()>("ncclinsp_probe_exceptions")()) == "ok");
}
TEST_CASE("glibc floor: threads, thread_local destructors, keys and call_once", "[plugin][glibc]") {
  CHECK(verdict(probe<const char* (*)()>("ncclinsp_probe_threads")()) == "ok");
}
TEST_CASE("glibc floor: steady-clock condition waits, and the fallback for glibc before 2.30", "[plugin][glibc]") {
  CHECK(verdict(probe<const char* (*)()>("ncclinsp_probe_condition_variable")()) == "ok");
}
TEST_CASE("glibc floor: stat family, dlopen/dlsym/dladdr, exp/log, random_device", "[plugin][glibc]") {
  const std::string dir = ncclinsp_test::fresh_dir("glibc");
  CHECK(verdict(probe<const char* (*)(const char*)>("ncclinsp_probe_files_and_loader")(dir.c_str())) == "ok");
}
