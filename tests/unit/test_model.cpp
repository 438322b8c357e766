#include <catch2/catch.hpp>

#include <string>

#include "ncclinsp/bandwidth.hpp"
#include "ncclinsp/model.hpp"

using namespace ncclinsp;

TEST_CASE("function and datatype names round-trip, unknown strings map to unknown", "[model]") {
  for (std::size_t i = 1; i < func_count; ++i) CHECK(parse_func(func_names[i]) == static_cast<func>(i));
  CHECK(parse_func("Invalid") == func::unknown);
  CHECK(parse_func("All2All") == func::unknown);  // Inspector's private name is not NCCL's
  CHECK(parse_func(static_cast<const char*>(nullptr)) == func::unknown);
  CHECK(parse_dtype("ncclBfloat16") == dtype::bfloat16);
  CHECK(size_of(parse_dtype("ncclBfloat16")) == 2);
  CHECK(size_of(parse_dtype("ncclFloat8e5m2")) == 1);
  CHECK(parse_dtype("Unknown") == dtype::unknown);  // how NCCL reports ncclUint8
  CHECK(size_of(dtype::unknown) == 0);
  CHECK(parse_proto("") == proto::none);  // symmetric kernels
  CHECK(parse_algo("NVLS_TREE") == algo::nvls_tree);
  CHECK(parse_algo("AGxLL_R") == algo::unknown);
}

TEST_CASE("every NCCL name parses from a copy, and no name one character off parses to it", "[model]") {
  // Each name from its own buffer (not the table's pointer), and every one-character change,
  // truncation and extension of it, for names of every length in the tables (2 to 14 characters).
  const auto check = [](const auto& names, std::size_t end, auto parse) {
    for (std::size_t i = 1; i < end; ++i) {
      const std::string name(names[i]);
      CHECK(static_cast<std::size_t>(parse(std::string(name).c_str())) == i);
      for (std::size_t pos = 0; pos < name.size(); ++pos) {
        std::string off = name;
        off[pos] = static_cast<char>(off[pos] ^ 0x20);  // case flipped, or a digit turned into another byte
        CHECK(static_cast<std::size_t>(parse(off.c_str())) != i);
      }
      CHECK(static_cast<std::size_t>(parse(name.substr(0, name.size() - 1).c_str())) != i);
      CHECK(static_cast<std::size_t>(parse((name + "x").c_str())) != i);
      CHECK(static_cast<std::size_t>(parse(("x" + name.substr(1)).c_str())) != i);
    }
  };
  check(func_names, func_count, [](const char* s) { return parse_func(s); });
  check(dtype_names, dtype_count, [](const char* s) { return parse_dtype(s); });
  check(algo_names, static_cast<std::size_t>(algo::sym), [](const char* s) { return parse_algo(s); });
  check(proto_names, static_cast<std::size_t>(proto::none), [](const char* s) { return parse_proto(s); });
}

TEST_CASE("set_size detects unknown sizes and overflow instead of wrapping", "[model]") {
  op_record op;
  set_size(op, 1024, dtype::float32);
  CHECK(op.bytes == 4096);
  CHECK(op.bytes_valid);
  set_size(op, 1024, dtype::unknown);  // Inspector: (size_t)-1 * count
  CHECK_FALSE(op.bytes_valid);
  CHECK(op.bytes == 0);
  set_size(op, UINT64_MAX / 2, dtype::float32);
  CHECK_FALSE(op.bytes_valid);
  set_size(op, UINT64_MAX / 8, dtype::float64);
  CHECK(op.bytes_valid);
}

// Hand-computed with the nccl-tests conventions (GB = 1e9 bytes); the n=4 and n=16 rows are the
// values Inspector's own formulas produce for the same inputs.
TEST_CASE("algbw and busbw match a hand-computed table", "[bandwidth]") {
  struct row {
    func f;
    std::uint64_t bytes;
    int n;
    std::uint64_t ns;
    double algbw, busbw;
  };
  const row rows[] = {
      {func::all_reduce, 4u << 20, 4, 500'000, 8.388608, 12.582912},
      {func::all_gather, 1u << 20, 4, 200'000, 20.97152, 15.72864},
      {func::reduce_scatter, 2u << 20, 4, 300'000, 27.962026666, 20.97152},
      {func::all_reduce, 8u << 20, 16, 1'000'000, 8.388608, 15.72864},
      {func::all_reduce, 1'000'000'000, 2, 1'000'000'000, 1.0, 1.0},
      {func::all_reduce, 1'000'000'000, 8, 10'000'000, 100.0, 175.0},
      {func::all_gather, 1'000'000, 8, 1'000'000, 8.0, 7.0},
      {func::broadcast, 3'000'000, 8, 1'000'000, 3.0, 3.0},
      {func::reduce, 3'000'000, 8, 1'000'000, 3.0, 3.0},
      {func::send, 5'000'000, 2, 1'000'000, 5.0, 5.0},
      {func::recv, 5'000'000, 64, 100'000, 50.0, 50.0},
      {func::all_to_all, 8'000'000, 4, 1'000'000, 8.0, 6.0},
      {func::gather, 8'000'000, 4, 1'000'000, 0.0, 0.0},
      {func::unknown, 8'000'000, 4, 1'000'000, 0.0, 0.0},
  };
  for (const auto& r : rows) {
    INFO(to_string(r.f) << " bytes=" << r.bytes << " n=" << r.n);
    CHECK(algbw_gbs(r.f, r.bytes, r.n, r.ns) == Approx(r.algbw).epsilon(1e-9));
    CHECK(busbw_gbs(r.f, r.bytes, r.n, r.ns) == Approx(r.busbw).epsilon(1e-9));
    CHECK(bus_bytes(r.f, r.bytes, r.n) / static_cast<double>(r.ns) == Approx(r.busbw).epsilon(1e-9));
  }
}

TEST_CASE("bandwidth is zero, never NaN or Inf, for zero durations and ranks", "[bandwidth]") {
  CHECK(busbw_gbs(func::all_reduce, 1 << 20, 4, 0) == 0.0);
  CHECK(busbw_gbs(func::all_reduce, 1 << 20, 0, 1000) == 0.0);
  CHECK(bus_factor(func::all_reduce, 1) == 0.0);
  static_assert(bus_factor(func::all_reduce, 4) == 1.5);  // constexpr
}
