// Process-wide state used from several threads: the default generator hands out disjoint blocks
// (two threads drawing at once never get the same numbers; it handed the same offset to both in
// most runs), and set_num_threads applies to every thread, as PyTorch's (OpenMP's own setting is
// per thread, so a new thread ignored it).
#include <catch2/catch.hpp>

#include <array>
#include <set>
#include <thread>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("two threads drawing from the default generator get disjoint numbers", "[core][rng][threads]") {
  manual_seed(7);
  const uint64_t start = default_generator().offset();
  constexpr int kDraws = 20000;
  using Draw = std::array<float, 4>;  // one Philox block: a repeat means the same block twice
  std::vector<std::vector<Draw>> drawn(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kDraws; ++i) {
        const Tensor r = rand({4});
        const float* v = r.data<float>();
        drawn[t].push_back({v[0], v[1], v[2], v[3]});
      }
    });
  }
  for (auto& th : threads) th.join();
  // rand({4}) takes one Philox block: the offset moved by exactly one block per draw.
  CHECK(default_generator().offset() - start == uint64_t(2 * kDraws));
  const std::set<Draw> first(drawn[0].begin(), drawn[0].end());
  int shared = 0;
  for (const Draw& d : drawn[1]) shared += first.count(d) > 0;
  CHECK(shared == 0);  // racing draws repeated blocks in most runs
  const Generator copy = default_generator();
  CHECK(copy.seed() == 7);
  CHECK(copy.offset() == default_generator().offset());
}

TEST_CASE("set_num_threads applies to every thread of the process", "[core][threads]") {
  const int before = num_threads();
  set_num_threads(1);
  int seen = 0;
  std::thread([&] { seen = num_threads(); }).join();
  CHECK(seen == 1);
  std::thread([] { set_num_threads(3); }).join();
  CHECK(num_threads() == 3);
  set_num_threads(before);
  CHECK(num_threads() == before);
}
