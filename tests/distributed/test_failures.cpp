// Failures across processes, each bounded in time: a peer that never arrives is a timeout error
// naming the missing rank within the configured timeout; a missing rank 0 (the store's host)
// likewise; a peer that dies in the middle of an all_reduce is an error on the survivors well
// before the timeout, and the group refuses further collectives.
#include <catch2/catch.hpp>

#include <memory>
#include <tuple>

#include "distributed/socket.h"
#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

using mg::test::Subprocess;

namespace {

std::unique_ptr<Subprocess> start_rank(int rank, int world, int port, const std::string& mode,
                                       const std::string& timeout_ms) {
  return std::make_unique<Subprocess>(
      std::vector<std::string>{MG_DIST_WORKER, mode, timeout_ms},
      std::map<std::string, std::string>{{"MASTER_ADDR", "127.0.0.1"},
                                         {"MASTER_PORT", std::to_string(port)},
                                         {"RANK", std::to_string(rank)},
                                         {"WORLD_SIZE", std::to_string(world)}});
}

}  // namespace

TEST_CASE("a peer that never arrives is a timeout error naming it", "[distributed]") {
  const int port = mg::distributed::detail::find_free_port();
  // Rank 2 gives up first (1 s), rank 0, the store's host, later (3 s).
  auto r0 = start_rank(0, 3, port, "join", "3000");
  auto r2 = start_rank(2, 3, port, "join", "1000");
  for (auto [p, rank, ms] : {std::tuple{r2.get(), 2, 1000}, std::tuple{r0.get(), 0, 3000}}) {
    auto r = p->wait(30);
    INFO("rank " << rank << ": " << r.out << r.err);
    REQUIRE_FALSE(r.timed_out);
    CHECK(r.status == 3);
    CHECK(r.out.find("ERROR DistributedTimeoutError: ProcessGroupGloo: rank " + std::to_string(rank) +
                     " of 3 waited " + std::to_string(ms) + " ms at the rendezvous 127.0.0.1:" +
                     std::to_string(port) + " but rank 1 never arrived") != std::string::npos);
    CHECK(r.seconds >= ms / 1000.0 - 0.05);
    CHECK(r.seconds < ms / 1000.0 + 10);  // the configured timeout plus process start-up
  }
}

TEST_CASE("a waiting rank whose store host gives up names the ranks still missing", "[distributed]") {
  const int port = mg::distributed::detail::find_free_port();
  auto r0 = start_rank(0, 3, port, "join", "1000");
  auto r2 = start_rank(2, 3, port, "join", "20000");
  auto a = r0->wait(30);
  auto b = r2->wait(30);
  INFO(a.out << b.out << b.err);
  REQUIRE_FALSE(b.timed_out);
  CHECK(a.status == 3);
  CHECK(b.status == 3);
  CHECK(b.out.find("ERROR DistributedError: ProcessGroupGloo: rank 2 of 3 lost the rendezvous store "
                   "while waiting for rank 1 to arrive") != std::string::npos);
  CHECK(b.seconds < 15);  // not its own 20 s timeout
}

TEST_CASE("two missing peers are both named", "[distributed]") {
  const int port = mg::distributed::detail::find_free_port();
  auto r0 = start_rank(0, 3, port, "join", "1000");
  auto r = r0->wait(30);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 3);
  CHECK(r.out.find("but ranks 1, 2 never arrived") != std::string::npos);
}

TEST_CASE("a missing rank 0 (the store's host) is a timeout error naming it", "[distributed]") {
  const int port = mg::distributed::detail::find_free_port();
  auto r1 = start_rank(1, 2, port, "join", "1500");
  auto r = r1->wait(30);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 3);
  CHECK(r.out.find("ERROR DistributedTimeoutError: TcpStore: no store server answered at 127.0.0.1:" +
                   std::to_string(port) + " within 1500 ms") != std::string::npos);
  CHECK(r.out.find("the store is hosted by rank 0") != std::string::npos);
  CHECK(r.seconds < 15);
}

TEST_CASE("a peer that dies mid-collective is an error on the others, not a hang", "[distributed]") {
  for (int world : {2, 3}) {
    DYNAMIC_SECTION("world size " << world) {
      const int port = mg::distributed::detail::find_free_port();
      std::vector<std::unique_ptr<Subprocess>> ranks;
      for (int r = 0; r < world; ++r) ranks.push_back(start_rank(r, world, port, "die", "60000"));
      for (int r = 0; r < world; ++r) {
        auto res = ranks[std::size_t(r)]->wait(60);
        INFO("rank " << r << ":\n" << res.out << res.err);
        REQUIRE_FALSE(res.timed_out);
        if (r == 1) {
          CHECK(res.status == 9);
          continue;
        }
        CHECK(res.status == 3);
        // A broken connection, found long before the 60 s timeout.
        CHECK(res.out.find("ERROR DistributedError after ") != std::string::npos);
        CHECK(res.out.find("ProcessGroupGloo::all_reduce: rank " + std::to_string(r) + " of " +
                           std::to_string(world)) != std::string::npos);
        CHECK(res.seconds < 30);
        // The group is broken now: the next collective refuses at once.
        CHECK(res.out.find("SECOND ProcessGroupGloo::barrier: rank " + std::to_string(r) +
                           ": the group is unusable: all_reduce failed earlier") != std::string::npos);
      }
    }
  }
}
