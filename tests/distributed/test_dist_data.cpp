// SyncBatchNorm and distributed_sampler across 2 and 3 processes on loopback, started by
// mixgrad-run: tests/distributed/worker/dist_data_scenarios.cpp compares every rank's results with
// BatchNorm2d on the concatenated global batch (and the sampler's shards with a disjoint cover) and
// exits 1 at the first mismatch; here the exit status and the number of checks each rank passed.
#include <catch2/catch.hpp>

#include <regex>
#include <set>

#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using mg::test::Subprocess;

namespace {

// Runs `mode` on `world` ranks; returns the set of "checks passed" counts (one per rank expected).
// `marker`: a line rank 0 must print `marker_count` times.
std::set<int> run_scenario(const std::string& mode, int world, const std::string& marker = "", int marker_count = 0) {
  Subprocess p({MG_RUN, "--nproc-per-node", std::to_string(world), "--master-port", "0", "--grace-seconds", "1",
                MG_DIST_WORKER, mode, "60000"});
  auto r = p.wait(180);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 0);
  std::regex line(R"(\[rank (\d)\] rank \d: (\d+) checks passed)");
  std::set<std::string> ranks;
  std::set<int> counts;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it) {
    ranks.insert((*it)[1]);
    counts.insert(std::stoi((*it)[2]));
  }
  CHECK(int(ranks.size()) == world);
  if (!marker.empty()) {
    int found = 0;
    for (std::size_t at = r.out.find(marker); at != std::string::npos; at = r.out.find(marker, at + 1)) ++found;
    CHECK(found == marker_count);
  }
  return counts;
}

}  // namespace

TEST_CASE("SyncBatchNorm with 2 and 3 processes equals BatchNorm2d on the global batch", "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      const std::set<int> counts = run_scenario("sync_bn", world, "eval equal to BatchNorm2d's without communication", 10);
      REQUIRE(counts.size() == 1);
      // 10 cases x 3 steps x 7 comparisons, the refusal (2), the ResNet-20 comparisons (hundreds).
      CHECK(*counts.begin() > 10 * 3 * 7 + 2 + 100);
    }
  }
}

TEST_CASE("distributed_sampler with 2 and 3 processes: disjoint cover, different seeds refused", "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      const std::set<int> counts = run_scenario("sampler", world);
      REQUIRE(counts.size() == 1);
      // 3 sizes x 2 drop_last x (1 + 2 epochs) + the two refusals
      CHECK(*counts.begin() == 3 * 2 * 3 + 2);
    }
  }
}
