// Second process groups (ProcessGroup::new_group) and what DistributedDataParallel builds on
// them, across real processes on loopback started by mixgrad-run: each test runs one mode of
// tests/distributed/worker (group_scenarios.cpp), which checks its own results and prints how
// many checks passed; this file checks that every rank finished them all (bucket rebuilding is
// here too, in the ddp-rebuild mode).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "launcher/subprocess.h"
#include "distributed/worker_run.h"
#include "mg_test_paths.h"  // MG_RUN, MG_DIST_WORKER

using mg::test::Subprocess;

namespace {

// Runs `mode` on `world` ranks and checks that every rank passed `expected` checks.
void run_mode(const std::string& mode, int world, const std::string& what, int expected) {
  mg::test::check_passed(mg::test::run_worker(mode, world), what, world, expected);
}

}  // namespace

TEST_CASE("new_group: subsets of 3 ranks, every rank, used beside the parent from another thread",
          "[distributed][groups]") {
  // Checks per rank: world size 1; {0, 2}: 1 + 3 on members; {1, 2}: 1 + 2 on members; every
  // rank: 3; bad lists: 2; the subgroup's subgroup {1} of {0, 2}: 1 on members + 1 on rank 2.
  Subprocess p({MG_RUN, "--nproc-per-node", "3", "--master-port", "0", "--grace-seconds", "1", MG_DIST_WORKER,
                "new-group", "60000"});
  auto r = p.wait(180);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 0);
  CHECK(r.out.find("[rank 0] rank 0: new-group 12 checks passed") != std::string::npos);
  CHECK(r.out.find("[rank 1] rank 1: new-group 10 checks passed") != std::string::npos);
  CHECK(r.out.find("[rank 2] rank 2: new-group 15 checks passed") != std::string::npos);
}

TEST_CASE("ddp: SyncBatchNorm under DDP, 2 ranks x B equal 1 x 2B with BatchNorm (f64)", "[distributed][ddp]") {
  run_mode("ddp-syncbn", 2, "ddp syncbn", 6);
}

TEST_CASE("ddp: broadcast_buffers keeps the ranks' running statistics equal, and create_graph is refused",
          "[distributed][ddp]") {
  run_mode("ddp-buffers", 2, "ddp buffers", 2 + 1 + 3);
}

TEST_CASE("ddp: buckets rebuilt in gradient-arrival order after the first backward, results unchanged",
          "[distributed][ddp]") {
  run_mode("ddp-rebuild", 2, "ddp rebuild", 6);
}
