#pragma once
// Shared by the driver's call-sequence tests (tests/sim/test_sim_*.cpp): the recording plugin loaded at
// one ABI version and its event log, a communicator config, event signatures and lookups, one AllReduce.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_driver.hpp"
#include "recording_plugin.hpp"

namespace ncclinsp_test::sim_driver {

using namespace ncclinsp::sim;

struct recorder {
  plugin_library lib;
  rec_reset_fn reset = nullptr;
  rec_count_fn count = nullptr;
  rec_get_fn get = nullptr;
  rec_set_u64_fn set_null = nullptr;
  rec_set_int_fn set_mask = nullptr;

  explicit recorder(int version) : lib(NCCLINSP_RECORDING_PLUGIN, version) {
    REQUIRE(lib.ok());
    reset = reinterpret_cast<rec_reset_fn>(::dlsym(lib.dl_handle(), "rec_reset"));
    count = reinterpret_cast<rec_count_fn>(::dlsym(lib.dl_handle(), "rec_count"));
    get = reinterpret_cast<rec_get_fn>(::dlsym(lib.dl_handle(), "rec_get"));
    set_null = reinterpret_cast<rec_set_u64_fn>(::dlsym(lib.dl_handle(), "rec_set_null_types"));
    set_mask = reinterpret_cast<rec_set_int_fn>(::dlsym(lib.dl_handle(), "rec_set_init_mask"));
    REQUIRE((reset && count && get && set_null && set_mask));
    reset();
    store_mask(0);
  }
  std::vector<rec_event> log() const {
    std::vector<rec_event> v(count());
    for (std::size_t i = 0; i < v.size(); ++i) get(i, &v[i]);
    return v;
  }
  /// Everything after the last init (i.e. the callbacks of interest).
  std::vector<rec_event> events() const {
    auto v = log();
    std::vector<rec_event> out;
    for (const auto& e : v)
      if (e.call != rec_call_init) out.push_back(e);
    return out;
  }
};

inline comm_config cfg(int n_nodes = 1, int n_ranks = 4, int rank = 1) {
  comm_config c;
  c.comm_hash = 0x1234abcdull;
  c.name = "tp";
  c.n_nodes = n_nodes;
  c.n_ranks = n_ranks;
  c.rank = rank;
  return c;
}

inline std::string sig(const rec_event& e) {
  static const char* calls[] = {"init", "start", "stop", "record", "finalize"};
  std::ostringstream s;
  s << calls[e.call] << ":" << e.type;
  if (e.call == rec_call_record) s << ":" << e.state;
  return s.str();
}
inline std::vector<std::string> sigs(const std::vector<rec_event>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(sig(e));
  return out;
}
inline std::string S(int call, std::uint64_t type, int state = -1) {
  rec_event e{};
  e.call = call;
  e.type = type;
  e.state = state;
  return sig(e);
}
inline const rec_event* find_start(const std::vector<rec_event>& v, std::uint64_t type, int nth = 0) {
  for (const auto& e : v)
    if (e.call == rec_call_start && e.type == type && nth-- == 0) return &e;
  return nullptr;
}
inline std::size_t count_of(const std::vector<rec_event>& v, int call, std::uint64_t type) {
  std::size_t n = 0;
  for (const auto& e : v) n += e.call == call && e.type == type;
  return n;
}

inline op_desc allreduce(std::size_t count = 1 << 20, std::uint8_t nch = 2) {
  op_desc d;
  d.func = nccl_func::all_reduce;
  d.dtype = nccl_dtype::float32;
  d.count = count;
  d.n_channels = nch;
  d.algo = "RING";
  d.proto = "LL128";
  return d;
}

}  // namespace ncclinsp_test::sim_driver
