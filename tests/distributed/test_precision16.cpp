// 16-bit reductions on Gloo: the reduction function itself (one f32 add and one rounding per
// call), and 2 and 3 processes comparing the native path with reduce_in_f32 for every op
// (tests/distributed/worker/precision16.cpp checks each value and exits 1 at the first miss).
#include <catch2/catch.hpp>

#include <cmath>
#include <regex>
#include <set>

#include "core/half.h"
#include "distributed/reduce16.h"
#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using namespace mg;
using namespace mg::distributed;
using mg::test::Subprocess;

namespace {
std::vector<Half> halves(std::initializer_list<float> v) { return std::vector<Half>(v.begin(), v.end()); }
std::vector<BFloat16> bfloats(std::initializer_list<float> v) { return std::vector<BFloat16>(v.begin(), v.end()); }
}  // namespace

TEST_CASE("reduce16 adds in f32 and rounds once per call", "[distributed]") {
  // 2048 + 1 = 2049 is a tie between the f16 neighbours 2048 and 2050: even mantissa, 2048.
  // 2048 + 3 = 2051 rounds to 2052; 0.1 + 0.2 in f16 is 0.2998046875 (from f32 0.29992676).
  // 65504 + 32 = 65536 overflows to inf; NaN propagates through max and min.
  auto a = halves({2048, 2048, 0.0999755859375f, 65504, 1, NAN, -3});
  auto b = halves({1, 3, 0.199951171875f, 32, NAN, 2, -7});
  std::vector<Half> c(a.size());
  reduce16(DType::F16, ReduceOp::Sum, c.data(), a.data(), b.data(), a.size());
  CHECK(float(c[0]) == 2048.f);
  CHECK(float(c[1]) == 2052.f);
  CHECK(float(c[2]) == 0.2998046875f);
  CHECK(std::isinf(float(c[3])));
  CHECK(std::isnan(float(c[4])));
  reduce16(DType::F16, ReduceOp::Max, c.data(), a.data(), b.data(), a.size());
  CHECK(float(c[0]) == 2048.f);
  CHECK(std::isnan(float(c[4])));
  CHECK(std::isnan(float(c[5])));
  CHECK(float(c[6]) == -3.f);
  reduce16(DType::F16, ReduceOp::Min, c.data(), a.data(), b.data(), a.size());
  CHECK(float(c[2]) == 0.0999755859375f);
  CHECK(std::isnan(float(c[5])));
  CHECK(float(c[6]) == -7.f);
  // In place (Gloo passes the output as the first input) and across several 1024-element blocks.
  std::vector<BFloat16> x(3000, BFloat16(256.f)), y(3000, BFloat16(1.f));
  y[2999] = BFloat16(3.f);
  reduce16(DType::BF16, ReduceOp::Sum, x.data(), x.data(), y.data(), x.size());
  CHECK(float(x[0]) == 256.f);     // 257 ties to 256 (bf16 spacing 2 there)
  CHECK(float(x[2999]) == 260.f);  // 259 ties to 260
  auto p = bfloats({1.f, -0.f});
  auto q = bfloats({1.f / 3, 0.f});
  reduce16(DType::BF16, ReduceOp::Sum, p.data(), p.data(), q.data(), 2);
  CHECK(float(p[0]) == float(BFloat16(1.f + float(BFloat16(1.f / 3)))));
}

TEST_CASE("f16 and bf16 all_reduce natively and with reduce_in_f32 on 2 and 3 processes", "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      Subprocess p({MG_RUN, "--nproc-per-node", std::to_string(world), "--master-port", "0",
                    "--grace-seconds", "1", MG_DIST_WORKER, "precision16", "60000"});
      auto r = p.wait(120);
      INFO(r.out << r.err);
      REQUIRE_FALSE(r.timed_out);
      CHECK(r.status == 0);
      std::regex line(R"(\[rank (\d)\] rank \d: precision16 (\d+) checks passed, (\d+) of (\d+) random sums differ)");
      std::set<std::string> ranks, summaries;
      for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it) {
        ranks.insert((*it)[1]);
        summaries.insert((*it)[2].str() + " " + (*it)[3].str() + " " + (*it)[4].str());
      }
      CHECK(int(ranks.size()) == world);
      REQUIRE(summaries.size() == 1);  // the same counts on every rank
      int checks = 0, differ = 0, sums = 0;
      std::sscanf(summaries.begin()->c_str(), "%d %d %d", &checks, &differ, &sums);
      // 2 dtypes x 4 ops x 2 paths x (dtype kept + W-1 rank comparisons + reduce_scatter's shape
      // + 2 x 4099 columns: all_reduce and reduce_scatter), + 1 for the native f16 overflow
      // column's second check (sum, avg), + 1 for column 0's second check with W = 3 (f16, bf16
      // x sum, avg), both for each of the two results, + the final differ check.
      CHECK(checks == 16 * (world + 1 + 2 * 4099) + 2 * (2 + (world == 3 ? 4 : 0)) + 1);
      CHECK(sums == 2 * 4096);  // the native random sums of both dtypes
      if (world == 2) CHECK(differ == 0);
      else CHECK(differ > 100);
    }
  }
}
