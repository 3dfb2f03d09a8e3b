// DistributedDataParallel across 2 processes on loopback, started by mixgrad-run: each test runs
// one mode of tests/distributed/worker (ddp_scenarios.cpp), which checks its own results (the
// single-process reference runs inside every rank) and prints how many checks passed; this file
// checks that every rank finished them all. The bucket planner is tested in one process here too.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>

#include "distributed/ddp_buckets.h"
#include "launcher/subprocess.h"
#include "distributed/worker_run.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using mg::DType;

namespace {

// Runs a ddp-* mode of the worker (tests/distributed/worker_run.h).
std::string run_ddp(const std::string& mode, int world = 2, const std::string& arg = "") {
  return mg::test::run_worker(mode, world, arg);
}
using mg::test::check_passed;

}  // namespace

TEST_CASE("ddp buckets: reverse or given order, one dtype per bucket, closed at the cap", "[distributed][ddp]") {
  using mg::distributed::plan_buckets;
  // 4 f32 parameters of 10, 20, 30, 40 elements (160 bytes), one f16 of 8 between them.
  const auto plan = plan_buckets({{10, DType::F32}, {20, DType::F32}, {8, DType::F16}, {30, DType::F32}, {40, DType::F32}},
                                 200, std::nullopt);
  // Reverse order: 40 (160 B) opens bucket 0; 30 would make it 280 B > 200, so it opens bucket 1;
  // the f16 opens bucket 2 (its own dtype); 20 joins bucket 1 (exactly 200 B); 10 would pass the
  // cap and opens bucket 3.
  REQUIRE(plan.buckets.size() == 4);
  CHECK(plan.buckets[0].params == std::vector<int>{4});
  CHECK(plan.buckets[1].params == std::vector<int>{3, 1});
  CHECK(plan.buckets[1].offsets == std::vector<int64_t>{0, 30});
  CHECK(plan.buckets[2].params == std::vector<int>{2});
  CHECK(plan.buckets[2].grad_dtype == DType::F16);
  CHECK(plan.buckets[2].comm_dtype == DType::F16);
  CHECK(plan.buckets[3].params == std::vector<int>{0});
  CHECK(plan.bucket_of == std::vector<int>{3, 1, 2, 1, 0});
  CHECK(plan.slot_of == std::vector<int>{0, 1, 0, 0, 0});

  // Reduced in f32: the f16 bucket is f32 on the wire; a parameter above the cap is alone.
  const auto wide = plan_buckets({{100, DType::F16}, {1, DType::F16}}, 64, DType::F32);
  REQUIRE(wide.buckets.size() == 2);
  CHECK(wide.buckets[0].params == std::vector<int>{1});
  CHECK(wide.buckets[1].params == std::vector<int>{0});
  CHECK(wide.buckets[1].grad_dtype == DType::F16);
  CHECK(wide.buckets[1].comm_dtype == DType::F32);
  CHECK(wide.buckets[1].numel == 100);
  CHECK_THROWS_WITH(plan_buckets({{1, DType::F32}}, 0, std::nullopt),
                    "DistributedDataParallel: bucket_cap_bytes must be positive, got 0");

  // An explicit order (the gradients' arrival): 0 and 1 (120 B) share a bucket, 3 and 4 do not fit.
  const auto arrival = plan_buckets({{10, DType::F32}, {20, DType::F32}, {30, DType::F32}, {40, DType::F32}}, 200,
                                    std::nullopt, {0, 1, 3, 2});
  REQUIRE(arrival.buckets.size() == 3);
  CHECK(arrival.buckets[0].params == std::vector<int>{0, 1});
  CHECK(arrival.buckets[1].params == std::vector<int>{3});
  CHECK(arrival.buckets[2].params == std::vector<int>{2});
  CHECK(arrival.buckets[0].offsets == std::vector<int64_t>{0, 10});
}

TEST_CASE("ddp: 2 ranks x B equal 1 x 2B (SGD, AdamW, f64, f32, O1, O2, checkpointed layers) and small buckets equal one",
          "[distributed][ddp]") {
  const std::string out = run_ddp("ddp-equivalence");
  // 12 configurations x 3 checks + 2 x 2 bucket checks.
  check_passed(out, "ddp equivalence", 2, 12 * 3 + 4);
}

TEST_CASE("ddp: a bucket's all-reduce starts before backward ends", "[distributed][ddp]") {
  const std::string out = run_ddp("ddp-overlap");
  INFO(out);
  CHECK(std::regex_search(out, std::regex(R"(\[rank 0\] rank 0: ddp overlap \d+ checks passed \(overlapped in [123] of 3\))")));
  CHECK(std::regex_search(out, std::regex(R"(\[rank 1\] rank 1: ddp overlap \d+ checks passed)")));
}

TEST_CASE("ddp: gradient accumulation under no_sync equals one large batch", "[distributed][ddp]") {
  check_passed(run_ddp("ddp-no-sync"), "ddp no_sync", 2, 3 * 3 + 2);
}

TEST_CASE("ddp: unused parameters with find_unused_parameters, and a clear error without it", "[distributed][ddp]") {
  const std::string out = run_ddp("ddp-unused");
  check_passed(out, "ddp unused", 2, 5 + 4);
  CHECK(out.find("[rank 0] rank 0: without find_unused_parameters: DistributedDataParallel: rank 0: 2 parameter(s) "
                 "received no gradient in this backward") != std::string::npos);
}

TEST_CASE("ddp: ranks whose models differ get an error naming the difference", "[distributed][ddp]") {
  check_passed(run_ddp("ddp-mismatch"), "ddp mismatch", 2, 2 * 2 + 1 + 1 + 1 + 1);
}

TEST_CASE("ddp: an inf gradient on one rank makes every rank skip, with equal scales", "[distributed][ddp]") {
  check_passed(run_ddp("ddp-inf"), "ddp inf", 2, 3 + 1 + 3);
}

TEST_CASE("ddp: a checkpoint saved by rank 0 of 2 loads into a 1-process model", "[distributed][ddp]") {
  char dir[] = "/tmp/mg_ddp_ckpt_XXXXXX";
  REQUIRE(::mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/ckpt.safetensors";
  run_ddp("ddp-save", 2, path);
  const std::string out = run_ddp("ddp-load", 1, path);
  check_passed(out, "ddp load", 1, 1);
  std::remove(path.c_str());
  ::rmdir(dir);
}
