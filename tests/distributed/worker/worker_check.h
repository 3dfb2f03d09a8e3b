// The worker's pass/fail bookkeeping, shared by every scenario file of mg_dist_worker (one
// process runs one scenario): a failed check prints "rank R: FAIL what" and exits 1 at once, so
// the test reads which rank failed first; g_checks counts the checks that passed.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mg::worker_check {

inline int g_rank = 0;
inline int g_checks = 0;

[[noreturn]] inline void fail(const std::string& what) {
  std::printf("rank %d: FAIL %s\n", g_rank, what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

inline void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
  ++g_checks;
}

}  // namespace mg::worker_check
