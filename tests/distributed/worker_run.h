// Running mg_dist_worker (tests/distributed/worker) on several ranks under mixgrad-run, for the
// test files of tests/distributed: each worker mode checks its own results and every rank prints
// "rank R: <what> N checks passed"; these helpers start it and read that back.
#pragma once
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "launcher/subprocess.h"
#include "mg_test_paths.h"  // MG_RUN, MG_DIST_WORKER

namespace mg::test {

// Runs mode `mode` (with `arg` when given) on `world` ranks, a 60 s timeout per collective and
// 180 s in all; checks that it finished with status 0 and returns the launcher's output.
inline std::string run_worker(const std::string& mode, int world = 2, const std::string& arg = "") {
  std::vector<std::string> argv{MG_RUN, "--nproc-per-node", std::to_string(world), "--master-port", "0",
                                "--grace-seconds", "1", MG_DIST_WORKER, mode, "60000"};
  if (!arg.empty()) argv.push_back(arg);
  Subprocess p(argv);
  auto r = p.wait(180);
  INFO(r.out << r.err);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.status == 0);
  return r.out;
}

// Every rank printed "rank R: <what> <expected> checks passed" (with the launcher's prefix).
inline void check_passed(const std::string& out, const std::string& what, int world, int expected) {
  INFO(out);
  for (int rank = 0; rank < world; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ": " + what + " " +
                             std::to_string(expected) + " checks passed";
    CHECK(out.find(line) != std::string::npos);
  }
}

}  // namespace mg::test
