// One model trained by several threads at once (Hogwild-style, as PyTorch allows): the leaf's
// accumulator is created once and every backward's gradient is added, none lost. Without the
// locks in autograd/node.cpp, two forwards could each create an accumulator (an edge to a freed
// node: a crash) and concurrent backwards lost an addition in about 1 of 1000 rounds.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
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

TEST_CASE("two threads backward through one shared graph take turns on each node", "[autograd][threads]") {
  // Both with retain_graph: every pass reads what the nodes saved and gets the right gradient, and
  // a retained gradient (read, replaced, written) loses no pass. Then one pass without
  // retain_graph frees the graph under the other's feet: the other either finished first or gets
  // the named "second time" error, never a crash (PyTorch's per-node mutex gives the same).
  constexpr int kRounds = 200;
  const Tensor x = from_vector<double>({0.1, 0.2, 0.3}).requires_grad_(true);
  for (int round = 0; round < kRounds; ++round) {
    Tensor h = x * x;  // saves x
    h.retain_grad();
    const Tensor y = sum(tanh(h) * 3.0);  // tanh saves its output
    std::atomic<int> wrong{0};
    SpinBarrier sync;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {
        sync.wait(1);
        for (int i = 0; i < 5; ++i) {
          const std::vector<double> g = test::values(autograd::grad({y}, {x}, {}, /*retain_graph=*/true)[0]);
          for (int k = 0; k < 3; ++k) {
            const double xv = 0.1 * (k + 1), th = std::tanh(xv * xv);
            if (std::fabs(g[std::size_t(k)] - 3.0 * (1.0 - th * th) * 2.0 * xv) > 1e-12) ++wrong;
          }
        }
        autograd::backward({y}, {}, /*retain_graph=*/true);
      });
    }
    for (auto& th : threads) th.join();
    CHECK(wrong.load() == 0);
    const std::vector<double> hg = test::values(h.grad());
    for (int k = 0; k < 3; ++k) {
      const double xv = 0.1 * (k + 1), th = std::tanh(xv * xv);
      // every pass (grad() fills retained gradients too): 2 threads x (5 grad + 1 backward)
      CHECK(hg[std::size_t(k)] == Approx(12 * 3.0 * (1.0 - th * th)).epsilon(1e-12));
    }
  }
  for (int round = 0; round < kRounds; ++round) {
    const Tensor y = sum(tanh(x * x));
    std::atomic<int> errors{0}, other{0};
    SpinBarrier sync;
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        sync.wait(1);
        try {
          (void)autograd::grad({y}, {x}, {}, /*retain_graph=*/t == 0);
        } catch (const AutogradError& e) {
          if (std::string(e.what()).find("second time") != std::string::npos) ++errors;
          else ++other;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(other.load() == 0);
    CHECK(errors.load() <= 1);
  }
}
