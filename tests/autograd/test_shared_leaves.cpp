// One model trained by several threads at once (Hogwild-style, as PyTorch allows): the leaf's
// accumulator is created once and every backward's gradient is added, none lost. Without the
// locks in autograd/node.cpp, two forwards could each create an accumulator (an edge to a freed
// node: a crash) and concurrent backwards lost an addition in about 1 of 1000 rounds.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {
// A barrier for two threads that spins (the race needs them to start together), yielding so that
// a busy machine (ctest -j) does not leave one thread spinning through the other's time slice.
struct SpinBarrier {
  std::atomic<int> arrived{0};
  void wait(int phase) {
    arrived.fetch_add(1);
    while (arrived.load() < 2 * phase) std::this_thread::yield();
  }
};
}  // namespace

TEST_CASE("two threads backward into one leaf: every gradient is added", "[autograd][threads]") {
  constexpr int kRounds = 3000;
  int wrong = 0;
  for (int round = 0; round < kRounds; ++round) {
    Tensor w = ones({16}).requires_grad_(true);  // fresh: no accumulator, no .grad yet
    if (round % 2 == 1) w.set_grad(zeros({16}));  // odd rounds: both add into an existing .grad
    SpinBarrier sync;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        const Tensor c = full({16}, double(t + 1));  // thread 0 adds 1s, thread 1 adds 2s
        sync.wait(1);
        Tensor loss = sum(mul(w, c));  // both create w's accumulator at once
        sync.wait(2);
        loss.backward();
      });
    }
    for (auto& th : threads) th.join();
    const std::vector<double> g = test::values(w.grad());
    for (double v : g) wrong += v != 3.0;
  }
  CHECK(wrong == 0);
}
