#pragma once
/// Shared between the recording test plugin and the tests that read its log (plain C layout).
#include <cstddef>
#include <cstdint>

struct rec_event {
  int abi;   ///< table version that was called
  int call;  ///< rec_call_*
  std::uint64_t type;
  void* handle;  ///< start: returned handle; stop/record: the handle passed
  void* parent;
  void* context;
  int rank;
  int state;          ///< record: state
  bool args_null;     ///< record: eStateArgs == NULL
  std::uint64_t arg;  ///< record: first 8 bytes of the args (pTimer / transSize / appendedProxyOps / data)
  std::uint64_t seq;
  char func[24];
  char datatype[24];
  char algo[24];
  char proto[16];
  char kernel_variant[32];
  std::size_t count;
  int root;
  int peer;
  int n_channels;
  int channel_id;
  std::uint64_t ptimer;
  void* parent_group;
  std::uint64_t user_tag;
  bool is_sym;
  int pid;
  int phase_id;
  int group_depth;
  std::uint64_t comm_hash;
  int n_nodes, n_ranks;
  char comm_name[32];
  int* mask_ptr;
  std::uint64_t wall_ns;  ///< CLOCK_MONOTONIC at the call
};

enum rec_call : int {
  rec_call_init = 0,
  rec_call_start = 1,
  rec_call_stop = 2,
  rec_call_record = 3,
  rec_call_finalize = 4
};

extern "C" {
using rec_reset_fn = void (*)();
using rec_count_fn = std::size_t (*)();
using rec_get_fn = int (*)(std::size_t, rec_event*);
using rec_set_int_fn = void (*)(int);
using rec_set_u64_fn = void (*)(std::uint64_t);
}
