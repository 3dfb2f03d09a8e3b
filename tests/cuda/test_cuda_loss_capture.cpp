// The class losses and the softmax family on the GPU ([gpu]; benchmarks/gpu/check.sh runs them),
// two regressions of cuda/kernels/softmax.cu:
// - cross_entropy, cross_entropy_backward and nll_loss inside a CUDA graph capture: the targets'
//   check reads nothing back there, and the mean's divisor (the number of targets not ignored) is
//   a device value, so a step captured on one batch and replayed on batches with other numbers of
//   ignored targets equals the eager steps bit for bit; a target out of range counts as ignored
//   and is raised at the host's next wait, eagerly and after a replay alike (the deferred device
//   checks, cuda/host/device_check_report.h);
// - f64 (and f32) softmax, its backward and the class losses along a middle dim longer than 512,
//   whose strided kernels get blocks of 32 x 32 = 1024 threads (they used to need more registers
//   than such a block has, and the launch failed), against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda/host/captured_step.h"
#include "cuda_test_util.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

constexpr int64_t kIgnore = -100;

std::vector<uint8_t> loss_bytes(const Tensor& t) {
  const Tensor h = t.detach().contiguous().to(Device::cpu());
  std::vector<uint8_t> b(std::size_t(h.numel()) * h.element_size());
  std::memcpy(b.data(), h.data_ptr(), b.size());
  return b;
}

// i64 targets of `shape` in [0, classes) with exactly `ignored` of them set to kIgnore (at
// positions drawn from the seed), on the CPU.
Tensor targets_with_ignored(const Shape& shape, int64_t classes, int64_t ignored, uint64_t seed) {
  Generator gen(seed);
  Tensor t = randint(0, classes, shape, {.dtype = DType::I64}, &gen).contiguous();
  std::vector<int64_t> order(std::size_t(t.numel()));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < ignored; ++i) p[order[std::size_t(i)]] = kIgnore;
  return t;
}

int64_t count_ignored(const Tensor& t) {
  int64_t n = 0;
  for (double v : values(t)) n += v == double(kIgnore) ? 1 : 0;
  return n;
}

// One batch of the captured step, on the CPU (as a DataLoader's): rows [N, C] with targets [N],
// and a [N2, C2, D] batch (the strided kernels) with targets [N2, D], f32; plus the upstream
// gradient of a mean (a 0-d tensor).
struct LossBatch {
  Tensor x, t, x3, t3, g;
};

LossBatch make_loss_batch(int64_t ignored, int64_t ignored3, uint64_t seed) {
  Generator gen(seed);
  LossBatch b;
  b.x = randn({64, 37}, {}, &gen) * 3.0;
  b.t = targets_with_ignored({64}, 37, ignored, seed + 1);
  b.x3 = randn({4, 21, 9}, {}, &gen) * 3.0;
  b.t3 = targets_with_ignored({4, 9}, 21, ignored3, seed + 2);
  b.g = randn({}, {}, &gen) + 2.0;
  return b;
}

// The step: every kernel that divides by the number of targets not ignored (the mean), and the
// sum for reference.
Tensors loss_step(const Tensors& in) {
  const Tensor &x = in[0], &t = in[1], &x3 = in[2], &t3 = in[3], &g = in[4];
  return {cross_entropy(x, t, Reduction::Mean, kIgnore),
          cross_entropy(x, t, Reduction::Sum, kIgnore),
          cross_entropy(x, t, Reduction::Mean, kIgnore, 0.1),
          cross_entropy_backward(g, x, t, Reduction::Mean, kIgnore),
          cross_entropy_backward(g, x, t, Reduction::Mean, kIgnore, 0.1),
          nll_loss(log_softmax(x, 1), t, Reduction::Mean, kIgnore),
          cross_entropy(x3, t3, Reduction::Mean, kIgnore),
          cross_entropy(x3, t3, Reduction::Mean, kIgnore, 0.1),
          cross_entropy_backward(g, x3, t3, Reduction::Mean, kIgnore),
          nll_loss(log_softmax(x3, 1), t3, Reduction::Mean, kIgnore)};
}

// The batch for CapturedStep::run (which copies it into the static inputs on the GPU).
Tensors batch_inputs(const LossBatch& b) { return {b.x, b.t, b.x3, b.t3, b.g}; }
// The batch on the GPU, for the eager steps.
Tensors gpu_inputs(const LossBatch& b) {
  Tensors out;
  for (const Tensor& t : batch_inputs(b)) out.push_back(t.to(gpu()));
  return out;
}

void require_same_loss_bits(const Tensors& want, const Tensors& got, const std::string& what) {
  REQUIRE(want.size() == got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(what << ", output " << i << ": " << describe(want[i]));
    CHECK(loss_bytes(got[i]) == loss_bytes(want[i]));
  }
}

// The softmax family's tolerance (tests/cuda/test_cuda_nn_ops.cpp): a few dozen ulps of f32/f64
// (tree vs cascade summation, CUDA's exp/log vs glibc's).
double line_tolerance(DType dt) { return dt == DType::F64 ? 128 * 0x1p-53 : 128 * 0x1p-24; }

Tensor randn_as(DType dt, const Shape& shape, double scale, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {}, &gen) * scale, dt);
}

}  // namespace

TEST_CASE("CUDA graph: cross_entropy and nll_loss with ignore_index follow each replay's number of ignored targets",
          "[cuda][gpu][graph][loss]") {
  // A different number of ignored targets in every batch (as MLM's random masks): the mean's
  // divisor changes from step to step.
  const std::vector<std::pair<int64_t, int64_t>> ignored = {{5, 3}, {0, 7}, {17, 0}, {40, 11}, {63, 35}, {9, 1}};
  std::vector<LossBatch> batches;
  for (std::size_t i = 0; i < ignored.size(); ++i) {
    batches.push_back(make_loss_batch(ignored[i].first, ignored[i].second, 100 + 10 * i));
    REQUIRE(count_ignored(batches.back().t) == ignored[i].first);
    REQUIRE(count_ignored(batches.back().t3) == ignored[i].second);
  }
  // Eager.
  std::vector<Tensors> eager;
  for (const LossBatch& b : batches) eager.push_back(loss_step(gpu_inputs(b)));
  // The mean is the sum over the targets not ignored (checks that the eager divisor is the count).
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const double mean = values(eager[i][0])[0], sum = values(eager[i][1])[0];
    CHECK(mean == Approx(sum / double(64 - ignored[i].first)).epsilon(1e-6));
  }
  // One eager warm-up step, captured on batch 1, replayed on batches 1-5.
  cuda::CapturedStep captured(loss_step, {}, {.device = gpu(), .warmup_steps = 1});
  std::vector<Tensors> replayed;
  for (std::size_t i = 0; i < batches.size(); ++i) {
    Tensors out;
    for (const Tensor& t : captured.run(batch_inputs(batches[i]))) out.push_back(clone(t));
    replayed.push_back(out);
    if (i == 0) REQUIRE_FALSE(captured.captured());
  }
  REQUIRE(captured.captured());
  CHECK(captured.graph().replays() == int64_t(batches.size()) - 1);
  for (std::size_t i = 0; i < batches.size(); ++i)
    require_same_loss_bits(eager[i], replayed[i], "batch " + std::to_string(i));

  // A target out of range counts as ignored: the replay equals the eager step on the batch with
  // that target set to ignore_index, and the first bad target (row-major, in the first check of
  // the step) is raised at the host's next wait, eagerly and after a replay. Never read outside
  // the logits' line (compute-sanitizer would say so).
  LossBatch bad = make_loss_batch(6, 4, 900);
  LossBatch fixed = bad;
  bad.t = bad.t.clone();
  bad.t3 = bad.t3.clone();
  fixed.t = fixed.t.clone();
  fixed.t3 = fixed.t3.clone();
  {
    int64_t *tp = bad.t.data<int64_t>(), *fp = fixed.t.data<int64_t>();
    int64_t *tp3 = bad.t3.data<int64_t>(), *fp3 = fixed.t3.data<int64_t>();
    // two targets that are not ignored become out of range: one past the classes, and negative
    int64_t set = 0;
    for (int64_t i = 0; i < 64 && set < 2; ++i) {
      if (tp[i] == kIgnore) continue;
      tp[i] = set == 0 ? 37 : -3;
      fp[i] = kIgnore;
      ++set;
    }
    REQUIRE(set == 2);
    set = 0;
    for (int64_t i = 0; i < 36 && set < 1; ++i) {
      if (tp3[i] == kIgnore) continue;
      tp3[i] = 1000;
      fp3[i] = kIgnore;
      ++set;
    }
    REQUIRE(set == 1);
  }
  const std::string bad_text = "cross_entropy: target 37 is out of range for 37 classes";
  // Eagerly: the step itself waits for nothing; the next wait raises the CPU's IndexError text.
  Tensors eager_bad;
  CHECK(mg::test::error_of([&] { eager_bad = loss_step(gpu_inputs(bad)); }) == "");
  CHECK(mg::test::error_of([&] { cuda::synchronize(); }).find(bad_text) == 0);
  CHECK(mg::test::error_of([&] { cuda::synchronize(); }) == "");  // raised once
  const Tensors want = loss_step(gpu_inputs(fixed));
  require_same_loss_bits(want, eager_bad, "an eager step with out-of-range targets");
  // After a replay: the same.
  Tensors got;
  for (const Tensor& t : captured.run(batch_inputs(bad))) got.push_back(clone(t));
  CHECK(mg::test::error_of([&] { cuda::synchronize(); }).find(bad_text) == 0);
  require_same_loss_bits(want, got, "a replay with out-of-range targets");
  // And the graph still follows good batches afterwards.
  Tensors again;
  for (const Tensor& t : captured.run(batch_inputs(batches[3]))) again.push_back(clone(t));
  require_same_loss_bits(eager[3], again, "batch 3 after the bad batch");
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: a captured step with every target ignored gives NaN means, then recovers",
          "[cuda][gpu][graph][loss]") {
  const LossBatch good = make_loss_batch(4, 2, 7);
  LossBatch all = make_loss_batch(64, 36, 8);
  REQUIRE(count_ignored(all.t) == 64);
  cuda::CapturedStep captured(loss_step, {}, {.device = gpu(), .warmup_steps = 1});
  (void)captured.run(batch_inputs(good));
  (void)captured.run(batch_inputs(good));  // captured here
  REQUIRE(captured.captured());
  const Tensors none = captured.run(batch_inputs(all));
  CHECK(std::isnan(values(none[0])[0]));  // 0 / 0, as on the CPU
  CHECK(values(none[1])[0] == 0.0);       // the sum
  CHECK(std::isnan(values(none[5])[0]));  // nll_loss
  CHECK(std::isnan(values(none[6])[0]));  // the strided batch
  const Tensors want = loss_step(gpu_inputs(good));
  Tensors got;
  for (const Tensor& t : captured.run(batch_inputs(good))) got.push_back(clone(t));
  require_same_loss_bits(want, got, "the good batch again");
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA f64 and f32 softmax, its backward and the class losses along a dim longer than 512 (1024-thread "
          "strided blocks) match the CPU",
          "[cuda][gpu][nn][softmax][loss]") {
  for (DType dt : {DType::F64, DType::F32}) {
    const double rel = line_tolerance(dt);
    // [outer, size, inner]: size > 512 gives 32 threads along the dim (blocks of 32 x 32), inner
    // 37 two tiles of inner positions, one of them partial.
    for (int64_t size : {513, 700, 2049}) {
      const Shape shape{3, size, 37};
      const Tensor x = randn_as(dt, shape, 4.0, 11);
      const Tensor g = randn_as(dt, shape, 1.0, 12);
      test::check_same_on_gpu("softmax", {x}, [](const auto& in) { return softmax(in[0], 1); }, rel, 0.0);
      test::check_same_on_gpu("log_softmax", {x}, [](const auto& in) { return log_softmax(in[0], 1); }, rel, 1.0);
      const Tensor y = softmax(x, 1), ly = log_softmax(x, 1);  // on the CPU: both devices get these bits
      test::check_same_on_gpu("softmax_backward", {g, y}, [](const auto& in) { return softmax_backward(in[0], in[1], 1); },
                    rel, 1.0);
      test::check_same_on_gpu("log_softmax_backward", {g, ly},
                    [](const auto& in) { return log_softmax_backward(in[0], in[1], 1); }, rel,
                    1.0 + std::sqrt(double(size)) / 16);
    }
    // cross_entropy over [N, C, d] with C > 512 (the strided kernel with 1024 threads), some
    // targets ignored, every reduction, with and without label smoothing; and nll_loss.
    const Shape logits{3, 600, 37};
    const Tensor x = randn_as(dt, logits, 3.0, 21);
    const Tensor t = targets_with_ignored({3, 37}, 600, 10, 22);
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      for (double eps : {0.0, 0.1}) {
        const std::string what = "cross_entropy " + std::string(reduction_name(r)) + " eps " + std::to_string(eps);
        test::check_same_on_gpu(what, {x, t}, [r, eps](const auto& in) { return cross_entropy(in[0], in[1], r, kIgnore, eps); },
                      rel, 1.0);
        const Tensor gr = randn_as(dt, r == Reduction::None ? t.shape() : Shape{}, 1.0, 23);
        test::check_same_on_gpu(what + " backward", {gr, x, t},
                      [r, eps](const auto& in) { return cross_entropy_backward(in[0], in[1], in[2], r, kIgnore, eps); },
                      rel, 4.0);
      }
      test::check_same_on_gpu("nll_loss " + std::string(reduction_name(r)), {log_softmax(x, 1), t},
                    [r](const auto& in) { return nll_loss(in[0], in[1], r, kIgnore); }, rel, 1.0);
    }
  }
  mg::test::require_no_pending_cuda_error();
}
