#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "ncclinsp/bucketing.hpp"
#include "ncclinsp/histogram.hpp"

using namespace ncclinsp;

TEST_CASE("pow2 bucket edges: 0, 1, 2^k-1, 2^k, 2^k+1, max", "[bucketing]") {
  CHECK(pow2_bucketer::index(0) == 0);
  CHECK(pow2_bucketer::label(0) == "0B");
  CHECK(pow2_bucketer::index(1) == 1);
  CHECK(pow2_bucketer::label(1) == "1B-2B");
  for (int k = 1; k < 64; ++k) {
    const std::uint64_t p = std::uint64_t{1} << k;
    INFO("k=" << k);
    CHECK(pow2_bucketer::index(p - 1) == static_cast<std::uint32_t>(k));
    CHECK(pow2_bucketer::index(p) == static_cast<std::uint32_t>(k + 1));
    CHECK(pow2_bucketer::index(p + 1) == static_cast<std::uint32_t>(k + 1));
    CHECK(pow2_bucketer::lower_bound(k + 1) == p);
  }
  CHECK(pow2_bucketer::index(UINT64_MAX) == 64);
  CHECK(pow2_bucketer::label(64) == "8EiB-16EiB");
  CHECK(pow2_bucketer::label(pow2_bucketer::index(1024)) == "1KiB-2KiB");
  CHECK(pow2_bucketer::label(pow2_bucketer::index(1023)) == "512B-1KiB");
  CHECK(pow2_bucketer::label(pow2_bucketer::index(5u << 20)) == "4MiB-8MiB");
  CHECK(pow2_bucketer::index(UINT64_MAX) < pow2_bucketer::bucket_count);
}

TEST_CASE("Inspector bucket labels are reproduced exactly", "[bucketing][compat]") {
  auto lbl = [](std::uint64_t b) { return inspector_bucketer::label(inspector_bucketer::index(b)); };
  CHECK(lbl(0) == "0-1B");
  CHECK(lbl(1) == "1-2B");
  CHECK(lbl(1000) == "1000-1001B");
  CHECK(lbl(1023) == "1023-1024B");
  CHECK(lbl(1024) == "1-2KB");
  CHECK(lbl(8192) == "8-9KB");
  CHECK(lbl(1000000) == "976-977KB");
  CHECK(lbl(1572864) == "1-2MB");
  CHECK(lbl(17u << 20) == "17-18MB");
  CHECK(lbl(512u << 20) == "512-513MB");
  CHECK(lbl(4831838208ull) == "4-5GB");  // 4.5 GiB
  CHECK(lbl(16ull << 30) == "16-17GB");
  CHECK(lbl(1ull << 50) == "1024-1025TB");
  CHECK(lbl(UINT64_MAX - 5) == "16777215-16777216TB");
}

TEST_CASE("every Inspector bucket nests inside one pow2 bucket", "[bucketing]") {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    const int shift = static_cast<int>(rng() % 64);
    const std::uint64_t b = rng() >> shift;
    const auto idx = inspector_bucketer::index(b);
    CHECK(inspector_bucketer::lower_bound(idx) <= b);
    REQUIRE(pow2_bucketer::index(inspector_bucketer::lower_bound(idx)) == pow2_bucketer::index(b));
  }
}

TEST_CASE("duration buckets follow their upper bounds", "[bucketing]") {
  CHECK(duration_bucket(0) == 0);
  CHECK(duration_bucket(10'000) == 0);
  CHECK(duration_bucket(10'001) == 1);
  CHECK(duration_bucket(10'000'000'000) == duration_bounds_ns.size() - 1);
  CHECK(duration_bucket(10'000'000'001) == duration_bounds_ns.size());
  CHECK(std::is_sorted(duration_bounds_ns.begin(), duration_bounds_ns.end()));
}
