// Collectives across 2 and 3 processes on loopback, started by mixgrad-run: every dtype and op
// on sizes 0, 1, 7, 1000, 300001 and uneven blocks (tests/distributed/worker checks each result
// against the value computed from all ranks' inputs and exits 1 at the first mismatch).
#include <catch2/catch.hpp>

#include <regex>
#include <set>

#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using mg::test::Subprocess;

TEST_CASE("collectives with 2 and 3 processes for every dtype and op", "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      Subprocess p({MG_RUN, "--nproc-per-node", std::to_string(world), "--master-port", "0",
                    "--grace-seconds", "1", MG_DIST_WORKER, "collectives", "60000"});
      auto r = p.wait(180);
      INFO(r.out << r.err);
      REQUIRE_FALSE(r.timed_out);
      CHECK(r.status == 0);
      // Every rank ran the same checks (the count is the same on each, and far above zero).
      std::regex line(R"(\[rank (\d)\] rank \d: (\d+) checks passed)");
      std::set<std::string> ranks, counts;
      for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it) {
        ranks.insert((*it)[1]);
        counts.insert((*it)[2]);
      }
      CHECK(int(ranks.size()) == world);
      REQUIRE(counts.size() == 1);
      // 19 (dtype, op) pairs x (5 all_reduce sizes + 4 reduce_scatter sizes x 2 checks) + 1
      // transposed view + 8 dtypes x 4 sizes x (2 broadcast roots + W all_gather rows) + W rows of
      // the [2, 3] all_gather + barrier + the refused collective after shutdown.
      CHECK(std::stoi(*counts.begin()) == 19 * 13 + 1 + 32 * (2 + world) + world + 2);
    }
  }
}

TEST_CASE("ranks that pass different tensors or call different collectives get an error, not a crash",
          "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      Subprocess p({MG_RUN, "--nproc-per-node", std::to_string(world), "--master-port", "0",
                    "--grace-seconds", "1", MG_DIST_WORKER, "mismatch", "30000"});
      auto r = p.wait(120);
      INFO(r.out << r.err);
      REQUIRE_FALSE(r.timed_out);
      CHECK(r.status == 0);
      for (int rank = 0; rank < world; ++rank) {
        CHECK(r.out.find("[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) +
                         ": 8 mismatches refused, 5 refusals") != std::string::npos);
      }
      CHECK(r.out.find("[rank 0] ProcessGroupGloo::all_reduce: rank 0: the ranks called different "
                       "collectives or passed different tensors; nothing was sent:") != std::string::npos);
    }
  }
}
