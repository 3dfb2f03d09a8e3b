// Fused attention on CUDA (cuda/kernels/attention.cu) against the CPU's fused kernels: the output
// and the gradients of q, k and v with bool, floating and causal masks (dead rows included),
// dropout drawn from the same generator position, and strided operands, in f64, f32, f16 and bf16.
// Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/factory.h"
#include "cuda/graph.h"
#include "cuda/host/captured_step.h"
#include "cuda_test_util.h"
#include "ops/attention.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::test;

namespace {

// out, dq, dk and dv of sum(sdpa(q, k, v, mask) * c), flattened into one tensor of q's dtype;
// in = (q, k, v, c[, mask]).
Tensor attention_and_grads(const std::vector<Tensor>& in, double p, bool causal, uint64_t seed) {
  const Tensor q = in[0].detach().requires_grad_(), k = in[1].detach().requires_grad_();
  const Tensor v = in[2].detach().requires_grad_();
  Generator gen(seed);
  const Tensor y = scaled_dot_product_attention(q, k, v, in.size() > 4 ? in[4] : Tensor(), p, causal, 0.6, &gen);
  REQUIRE(y.impl()->autograd.grad_fn->name() == "attention_backward");  // the fused op ran
  const Tensors g = autograd::grad({sum(y * in[3])}, {q, k, v});
  return cat({reshape(y, {-1}), reshape(g[0], {-1}), reshape(g[1], {-1}), reshape(g[2], {-1})});
}

// The tolerance of a CUDA result against the CPU's: the f32 sums differ in order (cuBLASLt's and
// the block trees against oneDNN's and the CPU's leaves), so an f16/bf16 result may round to a
// neighbour.
double tolerance(DType t) {
  switch (t) {
    case DType::F64: return 1e-12;
    case DType::F32: return 1e-5;
    case DType::F16: return std::ldexp(1.0, -9);
    default: return std::ldexp(1.0, -6);
  }
}

}  // namespace

TEST_CASE("CUDA fused attention equals the CPU's: masks, dead rows, dropout, strided operands",
          "[cuda][gpu][attention]") {
  Generator g0(17);
  const TensorOptions f64{.dtype = DType::F64};
  const Tensor q = randn({2, 3, 5, 8}, f64, &g0), k = randn({2, 3, 7, 8}, f64, &g0);
  const Tensor v = randn({2, 3, 7, 4}, f64, &g0), c = randn({2, 3, 5, 4}, f64, &g0);
  // Key padding [2, 1, 1, 7]: sample 1 pads its first three keys, so with the causal mask its
  // queries 0-2 are dead.
  const Tensor pad = from_vector<double>({1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1}, {2, 1, 1, 7}).to(DType::Bool);
  const Tensor fmask = randn({5, 7}, f64, &g0);
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(t));
    const double tol = tolerance(t);
    const std::vector<Tensor> plain{q.to(t), k.to(t), v.to(t), c.to(t)};
    check_same_on_gpu("plain", plain, [](const std::vector<Tensor>& in) { return attention_and_grads(in, 0.0, false, 1); },
                      tol, 1.0);
    std::vector<Tensor> masked = plain;
    masked.push_back(pad);
    check_same_on_gpu("bool mask, causal, dropout", masked,
                      [](const std::vector<Tensor>& in) { return attention_and_grads(in, 0.25, true, 5); }, tol, 1.0);
    std::vector<Tensor> added = plain;
    added.push_back(fmask.to(t));
    check_same_on_gpu("float mask", added,
                      [](const std::vector<Tensor>& in) { return attention_and_grads(in, 0.0, false, 1); }, tol, 1.0);
    // Strided q, k and v: q and k transposed in memory (made in dtype t, as a cast would lay them
    // out contiguous again), v a narrow view of a wider tensor; checked on each device.
    const auto transposed = [t](const Tensor& x) { return transpose(transpose(x.to(t), -1, -2).contiguous(), -1, -2); };
    const std::vector<Tensor> strided{transposed(q), transposed(k), v.to(t).narrow(-1, 0, 3), c.narrow(-1, 0, 3).to(t)};
    check_same_on_gpu("strided", strided, [](const std::vector<Tensor>& in) {
      REQUIRE(!in[0].is_contiguous());
      REQUIRE(!in[1].is_contiguous());
      REQUIRE(!in[2].is_contiguous());
      return attention_and_grads(in, 0.1, false, 9);
    }, tol, 1.0);
  }
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA fused attention: no keys, and a dead row with an inf gradient, give the CPU's zeros",
          "[cuda][gpu][attention]") {
  const Tensor q = ones({1, 2, 3}), k = ones({1, 0, 3}), v = ones({1, 0, 2});
  check_same_on_gpu("no keys", {q, k, v}, [](const std::vector<Tensor>& in) {
    return scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0.0, false, std::nullopt);
  });
  const Tensor q2 = randn({1, 3, 4}), k2 = randn({1, 4, 4}), v2 = randn({1, 4, 2});
  const Tensor pad = from_vector<double>({0, 1, 1, 1}, {1, 1, 4}).to(DType::Bool);
  const Tensor cinf = from_vector<double>({INFINITY, INFINITY, 1, 1, 1, 1}, {1, 3, 2});
  check_same_on_gpu("dead row", {q2, k2, v2, cinf, pad}, [](const std::vector<Tensor>& in) {
    const Tensor q = in[0].detach().requires_grad_(), k = in[1].detach().requires_grad_();
    const Tensor y = scaled_dot_product_attention(q, k, in[2], in[4], 0.0, /*is_causal=*/true);
    const Tensors g = autograd::grad({sum(y * in[3])}, {q, k});
    return cat({reshape(g[0], {-1}), reshape(g[1], {-1})});
  }, 1e-5, 1.0);
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA graph: fused attention's dropout masks differ per replay and equal the eager sequence",
          "[cuda][gpu][graph][attention]") {
  Generator g0(23);
  const Tensor q = randn({2, 2, 8, 4}, {}, &g0).to(gpu()).requires_grad_();
  const Tensor k = randn({2, 2, 8, 4}, {}, &g0).to(gpu()), v = randn({2, 2, 8, 4}, {}, &g0).to(gpu());
  auto step = [&](const Tensor& c) {
    const Tensor y = scaled_dot_product_attention(q, k, v, Tensor(), 0.3);
    return Tensors{y, autograd::grad({sum(y * c)}, {q})[0]};
  };
  const Tensor c = ones({2, 2, 8, 4}, {.device = gpu()});
  manual_seed(5);
  std::vector<std::vector<double>> eager;
  for (int i = 0; i < 4; ++i) {
    const Tensors r = step(c);
    eager.push_back(values(cat({reshape(r[0], {-1}), reshape(r[1], {-1})})));
  }
  manual_seed(5);
  cuda::CapturedStep captured([&](const Tensors& in) { return step(in[0]); }, {}, {.device = gpu(), .warmup_steps = 1});
  std::vector<std::vector<double>> replayed;
  for (int i = 0; i < 4; ++i) {
    const Tensors r = captured.run({c});
    replayed.push_back(values(cat({reshape(r[0], {-1}), reshape(r[1], {-1})})));
  }
  REQUIRE(captured.captured());
  CHECK(replayed == eager);
  CHECK(replayed[2] != replayed[3]);  // each replay draws a new mask
  // A generator the graph does not hold is refused, as the dropout op refuses it.
  Generator own(11);
  cuda::Graph graph;
  MG_REQUIRE_ERROR(([&] {
                     cuda::GraphCapture capture(graph);
                     (void)scaled_dot_product_attention(q.detach(), k, v, Tensor(), 0.3, false, std::nullopt, &own);
                   }()),
                   "its dropout drew from a generator that is not part of the CUDA graph being captured");
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA fused attention: more rows than blocks, rows longer than a block, and rows past one leaf per thread",
          "[cuda][gpu][attention]") {
  // 160 rows of 300 keys (several keys per thread; several rows per block on the emulator's 4
  // SMs), 5120 rows of 64 keys (more rows than the grid of 32 blocks per SM has blocks on a
  // 132-SM H100/H200: the grid-stride loop takes several rows per block there too), and 2 rows of
  // 4200 keys (more than 32 terms per thread: the leaf sums flush), with and without dropout.
  Generator g0(31);
  for (const Shape& qs : {Shape{2, 2, 40, 16}, Shape{4, 8, 160, 16}, Shape{1, 1, 2, 16}}) {
    const int64_t lk = qs[2] == 40 ? 300 : qs[2] == 160 ? 64 : 4200;
    const Tensor q = randn(qs, {}, &g0), k = randn({qs[0], qs[1], lk, 16}, {}, &g0);
    const Tensor v = randn({qs[0], qs[1], lk, 8}, {}, &g0), c = randn({qs[0], qs[1], qs[2], 8}, {}, &g0);
    for (DType t : {DType::F32, DType::BF16}) {
      INFO(dtype_name(t) << " keys " << lk);
      for (const double p : {0.0, 0.2}) {
        check_same_on_gpu("long rows", {q.to(t), k.to(t), v.to(t), c.to(t)},
                          [p](const std::vector<Tensor>& in) { return attention_and_grads(in, p, false, 3); },
                          tolerance(t), 1.0);
      }
    }
  }
  require_no_pending_cuda_error();
}
