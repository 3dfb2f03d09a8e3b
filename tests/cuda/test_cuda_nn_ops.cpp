// CUDA kernels of the indexing ops, the softmax family and the class losses (cross_entropy, its
// backward, nll_loss) against the CPU's (the reference), on
// odd sizes, every dim, strided and empty inputs, in f32/f16/bf16 (and f64, integers, bool where
// the op has them). Inputs are made on the CPU (in the tested dtype) and copied, so both devices
// see the same bits.
// - The indexing ops move bits, so they must match exactly. scatter_add adds: with fewer than
//   kSumLeaf (128) terms per target the CPU's sum is the plain in-order sum in opmath, which is
//   exactly what the GPU computes, so those cases are exact too; a case with more terms per
//   target uses a tolerance.
// - softmax and friends: the GPU sums with a tree (per-thread partials, warp shuffles) where the
//   CPU sums by the cascade rule, and CUDA's expf/logf differ from glibc's by an ulp or two, so
//   the f32/f64 intermediates differ by a few ulps; f16/bf16 outputs are rounded once from those
//   f32 values and may land on the neighbouring value: one ulp of the dtype. The tolerance is
//   k ulps of the dtype times (|want| + scale), where scale is 0 for softmax (a relative bound:
//   tiny probabilities are as accurate as large ones) and 1 for log_softmax and the backward ops
//   (their error is absolute, from the subtracted log-sum / the subtracted sum, of order one ulp
//   of an O(1) quantity for O(1) inputs).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "core/factory.h"
#include "cuda_test_util.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::error_of;
using mg::test::check_same_on_gpu;
using Fn = mg::test::CpuGpuFn;
using mg::test::gpu;
using mg::test::values;

namespace {


// Ulps of the dtype allowed for the softmax family (see the file comment): f32 and f64 a few
// dozen ulps of summation-order and libm difference; f16/bf16 one ulp of the output's rounding
// (2^-10, 2^-7 relative at the bottom of a binade) plus the f32 noise.
double softmax_tolerance(DType dt) {
  switch (dt) {
    case DType::F64: return 128 * 0x1p-53;
    case DType::F32: return 128 * 0x1p-24;
    case DType::F16: return 1.01 * 0x1p-10;
    case DType::BF16: return 1.01 * 0x1p-7;
    default: return 0;
  }
}

// Below the normal range an f16 ulp is absolute (2^-24): tiny probabilities rounded from slightly
// different f32 values may differ by that much.
double subnormal_floor(DType dt) { return dt == DType::F16 ? 0x1p-24 : 0.0; }


Tensor randn_in(DType dt, const Shape& shape, double scale, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {}, &gen) * scale, dt);  // keeps the shape (0-d included)
}

Tensor randint_in(int64_t lo, int64_t hi, const Shape& shape, uint64_t seed, DType dt = DType::I64) {
  Generator gen(seed);
  return to(randint(lo, hi, shape, {.dtype = DType::I64}, &gen), dt);
}

// A tensor of dtype dt with distinct-ish values (bit movers must move every bit).
Tensor data_in(DType dt, const Shape& shape, uint64_t seed) {
  switch (dt) {
    case DType::Bool: {
      const Tensor x = randn_in(DType::F32, shape, 1.0, seed);
      return gt(x, scalar_like(0.0, x));
    }
    case DType::U8: return randint_in(0, 256, shape, seed, DType::U8);
    case DType::I32: return randint_in(-100000, 100000, shape, seed, DType::I32);
    case DType::I64: return randint_in(-(int64_t(1) << 40), int64_t(1) << 40, shape, seed);
    default: return randn_in(dt, shape, 3.0, seed);
  }
}

const std::vector<DType> kAll = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                 DType::I64, DType::I32, DType::U8,  DType::Bool};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Indexing
// ---------------------------------------------------------------------------------------------

TEST_CASE("CUDA cat matches the CPU for any number of inputs along any dim, strided and empty",
          "[cuda][gpu][nn]") {
  for (DType dt : kAll) {
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape s0 = {3, 5, 7}, s1 = {3, 5, 7}, s2 = {3, 5, 7};
      s1[std::size_t(dim)] = 4;
      s2[std::size_t(dim)] = 0;  // an empty input
      const Tensor a = data_in(dt, s0, 1);
      // a strided input: the transpose of a dense [7, 4, 3]-like tensor, permuted back
      Shape t1 = {s1[2], s1[1], s1[0]};
      const Tensor b = data_in(dt, t1, 2).permute({2, 1, 0});
      const Tensor c = data_in(dt, s2, 3);
      const Tensor d = data_in(dt, {6, 5, 7}, 4).slice(0, 0, 6, 2);  // a step slice
      check_same_on_gpu("cat dim " + std::to_string(dim), {a, b, c, d},
                 [dim](const auto& in) { return cat({in[0], in[1], in[2], in[3]}, dim); });
      check_same_on_gpu("cat negative dim", {a, a}, [](const auto& in) { return cat({in[0], in[1]}, -1); });
    }
    // many inputs of one row each along dim 1 of a [37, n] result
    std::vector<Tensor> many;
    for (int i = 0; i < 40; ++i) many.push_back(data_in(dt, {37, 1 + i % 3}, 10 + uint64_t(i)));
    check_same_on_gpu("cat of 40 inputs", many, [](const auto& in) { return cat(in, 1); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA index_select matches the CPU bit for bit along every dim", "[cuda][gpu][nn]") {
  for (DType dt : kAll) {
    const Tensor x = data_in(dt, {3, 5, 7}, 1);
    for (int64_t dim = 0; dim < 3; ++dim) {
      const int64_t size = x.shape()[std::size_t(dim)];
      for (DType it : {DType::I64, DType::I32}) {
        // repeats (negative indices are refused, as PyTorch)
        const Tensor index = randint_in(0, size, {11}, 5 + uint64_t(dim), it);
        check_same_on_gpu("index_select dim " + std::to_string(dim), {x, index},
                   [dim](const auto& in) { return index_select(in[0], dim, in[1]); });
        check_same_on_gpu("index_select of a transposed input", {x.transpose(0, 2).contiguous(), index},
                   [dim](const auto& in) { return index_select(in[0].transpose(0, 2), dim, in[1]); });
        check_same_on_gpu("index_select with a strided index", {x, randint_in(0, size, {22}, 7, it)},
                   [dim](const auto& in) { return index_select(in[0], dim, in[1].slice(0, 0, 22, 2)); });
      }
      check_same_on_gpu("index_select with a 0-d index", {x, full({}, 1.0, {.dtype = DType::I64})},
                 [dim](const auto& in) { return index_select(in[0], dim, in[1]); });
      check_same_on_gpu("index_select with an empty index", {x, zeros({0}, {.dtype = DType::I64})},
                 [dim](const auto& in) { return index_select(in[0], dim, in[1]); });
    }
    // embedding-like lookups: [V, D] rows at [N] indices
    check_same_on_gpu("index_select rows", {data_in(dt, {1000, 129}, 3), randint_in(0, 1000, {4097}, 4)},
               [](const auto& in) { return index_select(in[0], 0, in[1]); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA gather matches the CPU bit for bit along every dim", "[cuda][gpu][nn]") {
  for (DType dt : kAll) {
    const Tensor x = data_in(dt, {3, 5, 7}, 1);
    for (int64_t dim = 0; dim < 3; ++dim) {
      const int64_t size = x.shape()[std::size_t(dim)];
      Shape is = {2, 4, 6};  // smaller than x in every dim; larger than x along dim
      is[std::size_t(dim)] = 9;
      for (DType it : {DType::I64, DType::I32}) {
        const Tensor index = randint_in(0, size, is, 11 + uint64_t(dim), it);
        check_same_on_gpu("gather dim " + std::to_string(dim), {x, index},
                   [dim](const auto& in) { return gather(in[0], dim, in[1]); });
        check_same_on_gpu("gather of a transposed input", {x.transpose(0, 2).contiguous(), index},
                   [dim](const auto& in) { return gather(in[0].transpose(0, 2), dim, in[1]); });
      }
      Shape es = is;
      es[std::size_t(dim)] = 0;
      check_same_on_gpu("gather with an empty index", {x, zeros(es, {.dtype = DType::I64})},
                 [dim](const auto& in) { return gather(in[0], dim, in[1]); });
    }
    check_same_on_gpu("gather 0-d", {data_in(dt, {}, 2), zeros({}, {.dtype = DType::I64})},
               [](const auto& in) { return gather(in[0], 0, in[1]); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA scatter_add matches the CPU along every dim, deterministically", "[cuda][gpu][nn]") {
  for (DType dt : kAll) {
    const Tensor self = data_in(dt, {3, 5, 7}, 1);
    for (int64_t dim = 0; dim < 3; ++dim) {
      const int64_t size = self.shape()[std::size_t(dim)];
      Shape is = {2, 4, 6};
      is[std::size_t(dim)] = 9;  // repeated targets along dim (fewer than kSumLeaf per target: exact)
      Shape ss = {3, 5, 7};
      ss[std::size_t(dim)] = 10;  // src larger than index
      const Tensor src = data_in(dt, ss, 2);
      for (DType it : {DType::I64, DType::I32}) {
        const Tensor index = randint_in(0, size, is, 13 + uint64_t(dim), it);
        check_same_on_gpu("scatter_add dim " + std::to_string(dim), {self, index, src},
                   [dim](const auto& in) { return scatter_add(in[0], dim, in[1], in[2]); });
        check_same_on_gpu("scatter_add, transposed self and src", {self, index, src},
                   [dim](const auto& in) {
                     return scatter_add(in[0].transpose(0, 2).contiguous().transpose(0, 2), dim, in[1],
                                        in[2].transpose(0, 2).contiguous().transpose(0, 2));
                   });
      }
      Shape es = is;
      es[std::size_t(dim)] = 0;
      check_same_on_gpu("scatter_add with an empty index", {self, zeros(es, {.dtype = DType::I64}), src},
                 [dim](const auto& in) { return scatter_add(in[0], dim, in[1], in[2]); });
    }
  }
  // embedding backward: grad [N, D] into [V, D] at the expanded (stride-0) index [N] -> [N, D]
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor g = randn_in(dt, {4097, 33}, 1.0, 3);
    const Tensor ids = randint_in(0, 100, {4097}, 4);  // ~41 terms per target: below kSumLeaf, exact
    const Fn f = [](const auto& in) {
      const Tensor base = zeros({100, 33}, {.dtype = in[0].dtype(), .device = in[0].device()});
      return scatter_add(base, 0, in[1].reshape({4097, 1}).expand({4097, 33}), in[0]);
    };
    check_same_on_gpu("embedding backward", {g, ids}, f);
    // ~4097 terms per target: the CPU sums by the cascade rule, the GPU sequentially in f32, so
    // they agree to the sequential bound (n ulps of f32 of sum |terms|, here ~4097 * 2^-24 * 64
    // relative to the ~64 magnitude of a sum of 4097 unit normals, i.e. well within 2^-10) and
    // f16/bf16 additionally by one rounding of the output.
    const Tensor few = randint_in(0, 1, {4097}, 5);
    const double rel = dt == DType::F32 ? 0x1p-10 : softmax_tolerance(dt) + 0x1p-10;
    check_same_on_gpu("embedding backward, one target", {g, few}, f, rel, 8.0);
  }
  // the same call twice gives the same bits (no atomics)
  const Tensor g = randn_in(DType::F32, {4097, 33}, 1.0, 3).to(gpu());
  const Tensor ids = randint_in(0, 7, {4097, 1}, 4).expand({4097, 33}).to(gpu());
  const Tensor base = zeros({7, 33}, {.dtype = DType::F32, .device = gpu()});
  CHECK(values(scatter_add(base, 0, ids, g)) == values(scatter_add(base, 0, ids, g)));
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA masked_fill and one_hot match the CPU bit for bit", "[cuda][gpu][nn]") {
  for (DType dt : kAll) {
    const double value = dt == DType::Bool ? 1.0 : (is_floating(dt) ? 2.5 : 3.0);
    const Tensor x = data_in(dt, {37, 65}, 1);
    const Tensor mask = data_in(DType::Bool, {37, 65}, 2);
    const Tensor row = data_in(DType::Bool, {65}, 3);
    check_same_on_gpu("masked_fill", {x, mask}, [value](const auto& in) { return masked_fill(in[0], in[1], value); });
    check_same_on_gpu("masked_fill, broadcast mask", {x, row},
               [value](const auto& in) { return masked_fill(in[0], in[1], value); });
    check_same_on_gpu("masked_fill, transposed", {x, mask},
               [value](const auto& in) { return masked_fill(in[0].t(), in[1].t(), value); });
    check_same_on_gpu("masked_fill, empty", {data_in(dt, {0, 65}, 4), row},
               [value](const auto& in) { return masked_fill(in[0], in[1], value); });
  }
  for (DType it : {DType::I64, DType::I32}) {
    const Tensor index = randint_in(0, 7, {5, 13}, 6, it);
    check_same_on_gpu("one_hot", {index}, [](const auto& in) { return one_hot(in[0], 7); });
    check_same_on_gpu("one_hot, strided", {index}, [](const auto& in) { return one_hot(in[0].t(), 9); });
    check_same_on_gpu("one_hot, 0-d", {full({}, 3.0, {.dtype = it})}, [](const auto& in) { return one_hot(in[0], 4); });
    check_same_on_gpu("one_hot, empty", {zeros({0, 3}, {.dtype = it})}, [](const auto& in) { return one_hot(in[0], 4); });
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA embedding matches the CPU bit for bit", "[cuda][gpu][nn]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor w = data_in(dt, {1000, 129}, 1);
    for (DType it : {DType::I64, DType::I32}) {
      const Tensor ids = randint_in(0, 1000, {7, 13}, 2, it);
      check_same_on_gpu("embedding", {w, ids}, [](const auto& in) { return embedding(in[0], in[1]); });
      check_same_on_gpu("embedding, transposed weight and index", {w.t().contiguous(), ids},
                 [](const auto& in) { return embedding(in[0].t(), in[1].t()); });
      check_same_on_gpu("embedding, empty", {w, zeros({0, 4}, {.dtype = it})},
                 [](const auto& in) { return embedding(in[0], in[1]); });
    }
  }
  const Tensor w = data_in(DType::F32, {10, 3}, 1);
  const Tensor bad = from_vector<int64_t>({1, 10, 2}, {3});
  const std::string want = error_of([&] { embedding(w, bad); });
  REQUIRE(want.find("embedding: index 10 is out of range for a table of 10 rows; weight ") == 0);
  // Deferred: the op waits for nothing, and the host's next wait raises the CPU's text.
  CHECK(error_of([&] { embedding(w.to(gpu()), bad.to(gpu())); }) == "");
  const std::string got = error_of([&] { cuda::synchronize(); });
  CHECK(got.substr(0, want.find("; weight")) == want.substr(0, want.find("; weight")));
  CHECK(got.find("hint: indices must lie in [0, 10)") != std::string::npos);
  CHECK(got.find("raised at the host's next wait (cuda::synchronize)") != std::string::npos);
  // A negative index (bad: 0 <= index < rows) reads nothing, and its gradient goes nowhere — not
  // to the last row, as a count from the end would send it.
  {
    Tensor wg = w.to(gpu());
    wg.requires_grad_();
    const Tensor out = embedding(wg, from_vector<int64_t>({-1, 2}, {2}).to(gpu()));
    sum(out).backward();
    CHECK(error_of([&] { cuda::synchronize(); }).find("embedding: index -1 is out of range for a table of 10 rows") == 0);
    const std::vector<double> ov = values(out), wv = values(w), gv = values(wg.grad());
    CHECK(ov == std::vector<double>{0, 0, 0, wv[6], wv[7], wv[8]});
    std::vector<double> want_grad(30, 0.0);
    want_grad[6] = want_grad[7] = want_grad[8] = 1.0;
    CHECK(gv == want_grad);
    (void)error_of([&] { cuda::synchronize(); });  // the backward's scatter_add report, if it got the slot
  }
  mg::test::require_no_pending_cuda_error();
}

namespace {
// The error a GPU op raises at the host's next wait (the deferred device checks), up to its note.
std::string deferred_error_of(const std::function<void()>& op) {
  const std::string at_op = error_of(op);
  if (!at_op.empty()) return "raised at the op, not at the next wait: " + at_op;
  const std::string m = error_of([] { (void)values(zeros({1}, {.device = gpu()})); });  // a blocking copy
  return m.substr(0, m.find("\n  note: "));
}
}  // namespace

TEST_CASE("CUDA indexing ops reject bad indices with the CPU's message", "[cuda][gpu][nn]") {
  const Tensor x = data_in(DType::F32, {3, 5}, 1);
  const Tensor bad = from_vector<int64_t>({0, 2, 5, -6, 1}, {5});  // 5 is the first bad one for size 5
  const Tensor bad2 = from_vector<int64_t>({0, 1, 0, 3, 4, 1}, {2, 3});  // 3 is bad for size 3 (dim 0)
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"index_select", [](const auto& in) { return index_select(in[0], 1, in[1]); }},
      {"gather", [](const auto& in) { return gather(in[0], 0, in[2]); }},
      {"scatter_add", [](const auto& in) { return scatter_add(in[0], 0, in[2], in[0]); }},
      {"one_hot", [](const auto& in) { return one_hot(in[1], 5); }},
  };
  for (const auto& entry : cases) {
    // Named copies for the lambdas: clang before 16 cannot capture structured bindings.
    const auto& name = entry.first;
    const auto& f = entry.second;
    const std::vector<Tensor> cpu_in = {x, bad, bad2};
    const std::vector<Tensor> gpu_in = {x.to(gpu()), bad.to(gpu()), bad2.to(gpu())};
    const std::string want = error_of([&] { f(cpu_in); });
    INFO(name);
    REQUIRE(want != "");
    CHECK(deferred_error_of([&] { f(gpu_in); }) == want);
  }
  // the check waits for nothing, with an index or without; a bad index reads nothing (zeros out)
  {
    const Tensor xg = x.to(gpu()), ig = from_vector<int64_t>({0, 4}, {2}).to(gpu());
    const Tensor empty_index = zeros({0}, {.dtype = DType::I64, .device = gpu()});
    cuda::synchronize();
    const uint64_t before = cuda::sync_count();
    const Tensor y = index_select(xg, 1, ig);
    const Tensor e = index_select(xg, 1, empty_index);
    const Tensor z = index_select(xg, 1, from_vector<int64_t>({1, 9}, {2}).to(gpu()));  // 9 is bad
    CHECK(cuda::sync_count() == before);
    const std::string raised = error_of([&] { cuda::synchronize(); });
    CHECK(raised.find("index_select: index 9 is out of range for dim 1 of size 5") == 0);
    CHECK(values(y) == values(index_select(x, 1, from_vector<int64_t>({0, 4}, {2}))));
    const std::vector<double> zv = values(z);  // column 1 of x, then zeros
    CHECK(zv == std::vector<double>{values(x)[1], 0.0, values(x)[6], 0.0, values(x)[11], 0.0});
  }
  // the first error waits for the host; a second bad op before that wait is dropped, and after
  // it the slot takes the next one
  {
    const Tensor xg = x.to(gpu());
    (void)index_select(xg, 1, from_vector<int64_t>({7}, {1}).to(gpu()));
    (void)index_select(xg, 1, from_vector<int64_t>({8}, {1}).to(gpu()));
    const std::string first = error_of([&] { cuda::synchronize(); });
    CHECK(first.find("index_select: index 7 is out of range") == 0);
    CHECK(first.find("later index or target checks on this device failed too") != std::string::npos);
    CHECK(error_of([&] { cuda::synchronize(); }) == "");
    (void)gather(xg, 1, from_vector<int64_t>({5}, {1, 1}).to(gpu()));
    CHECK(deferred_error_of([] {}).find("gather: index 5 is out of range") == 0);
  }
  // i32 indices and negative out-of-range values too
  const Tensor neg = from_vector<int32_t>({-6}, {1});
  const std::string want = error_of([&] { index_select(x, 1, neg); });
  CHECK(want.find("index -6 is out of range for dim 1 of size 5") != std::string::npos);
  CHECK(deferred_error_of([&] { index_select(x.to(gpu()), 1, neg.to(gpu())); }) == want);
  // the first bad value in row-major order (the CPU's rule), found over many blocks
  {
    Tensor many = zeros({1 << 20}, {.dtype = DType::I64});
    many.data<int64_t>()[700000] = 11;
    many.data<int64_t>()[300001] = -9;
    many.data<int64_t>()[900000] = 12;
    CHECK(deferred_error_of([&] { index_select(x.to(gpu()), 1, many.to(gpu())); }) ==
          "index_select: index -9 is out of range for dim 1 of size 5 (expected 0 <= index < 5)");
  }
  mg::test::require_no_pending_cuda_error();
}

// ---------------------------------------------------------------------------------------------
// softmax family
// ---------------------------------------------------------------------------------------------

namespace {

struct SoftmaxCase {
  Shape shape;
  int64_t dim;
};

const std::vector<SoftmaxCase> kSoftmaxCases = {
    {{37, 4097}, 1}, {{37, 4097}, 0}, {{37, 4097}, -1}, {{3, 5, 7}, 0}, {{3, 5, 7}, 1}, {{3, 5, 7}, 2},
    {{4, 32768}, 1}, {{2, 100003}, 1}, {{1000, 10}, 1}, {{3, 2000, 33}, 1}, {{7}, 0}, {{0, 5}, 1}, {{5, 0}, 1}};

}  // namespace

TEST_CASE("CUDA softmax and log_softmax match the CPU along every dim", "[cuda][gpu][nn][softmax]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const double rel = softmax_tolerance(dt);
    for (const SoftmaxCase& c : kSoftmaxCases) {
      const Tensor x = randn_in(dt, c.shape, 4.0, 1);
      const int64_t dim = c.dim;
      check_same_on_gpu("softmax dim " + std::to_string(dim), {x}, [dim](const auto& in) { return softmax(in[0], dim); },
                 rel, 0.0, subnormal_floor(dt));
      check_same_on_gpu("log_softmax dim " + std::to_string(dim), {x},
                 [dim](const auto& in) { return log_softmax(in[0], dim); }, rel, 1.0);
    }
    // a non-contiguous input (made dense by the kernel), every dim of the transpose
    const Tensor m = randn_in(dt, {65, 33}, 4.0, 2);
    for (int64_t dim : {0, 1}) {
      check_same_on_gpu("softmax of a transpose", {m}, [dim](const auto& in) { return softmax(in[0].t(), dim); }, rel, 0.0,
                 subnormal_floor(dt));
      check_same_on_gpu("log_softmax of a transpose", {m}, [dim](const auto& in) { return log_softmax(in[0].t(), dim); },
                 rel, 1.0);
    }
    // -inf entries (masked attention) and one fully masked row (NaN on both devices)
    const Tensor r = randn_in(dt, {3, 9}, 1.0, 3);
    const Tensor mask = ne(from_vector<float>({0, 1, 0, 1, 0, 0, 1, 0, 0,  //
                                               1, 1, 1, 1, 1, 1, 1, 1, 1,  // fully masked
                                               0, 0, 0, 0, 0, 0, 0, 0, 1},
                                              {3, 9}),
                           full({1}, 0.0));
    const Tensor masked = masked_fill(r, mask, -INFINITY);
    check_same_on_gpu("softmax with -inf", {masked}, [](const auto& in) { return softmax(in[0], 1); }, rel, 0.0, subnormal_floor(dt));
    check_same_on_gpu("log_softmax with -inf", {masked}, [](const auto& in) { return log_softmax(in[0], 1); }, rel, 1.0);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA softmax_backward and log_softmax_backward match the CPU along every dim",
          "[cuda][gpu][nn][softmax]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const double rel = softmax_tolerance(dt);
    for (const SoftmaxCase& c : kSoftmaxCases) {
      const int64_t dim = c.dim;
      const Tensor x = randn_in(dt, c.shape, 4.0, 1);
      const Tensor g = randn_in(dt, c.shape, 1.0, 2);
      const Tensor y = softmax(x, dim), ly = log_softmax(x, dim);  // on the CPU: both devices get these bits
      check_same_on_gpu("softmax_backward dim " + std::to_string(dim), {g, y},
                 [dim](const auto& in) { return softmax_backward(in[0], in[1], dim); }, rel, 1.0);
      // g - exp(y) sum(g): sum(g) over a line of n unit normals is ~sqrt(n) in size, with cancellation,
      // and its last bits depend on the summation order; the error is exp(y) (<= 1) times that.
      const int64_t n = c.shape.empty() ? 1 : c.shape[std::size_t(dim < 0 ? dim + int64_t(c.shape.size()) : dim)];
      check_same_on_gpu("log_softmax_backward dim " + std::to_string(dim), {g, ly},
                 [dim](const auto& in) { return log_softmax_backward(in[0], in[1], dim); }, rel,
                 1.0 + std::sqrt(double(n)) / 16);
    }
    const Tensor m = randn_in(dt, {65, 33}, 4.0, 2);
    const Tensor gm = randn_in(dt, {33, 65}, 1.0, 3);
    check_same_on_gpu("softmax_backward of transposes", {gm, softmax(m.t(), 1)},
               [](const auto& in) { return softmax_backward(in[0], in[1].t().contiguous().t(), 1); }, rel, 1.0);
  }
  mg::test::require_no_pending_cuda_error();
}

// ---------------------------------------------------------------------------------------------
// class losses
// ---------------------------------------------------------------------------------------------

namespace {

// logits [N, C] / [N, C, d...] / [C] with targets (some ignored: -100) of the matching shape.
struct ClassCase {
  Shape logits;
};
const std::vector<ClassCase> kClassCases = {{{37, 1001}}, {{4, 7, 3, 5}}, {{5, 40, 33}}, {{9}}, {{0, 5}}, {{64, 3}}};

Tensor targets_for(const Shape& logits, uint64_t seed) {
  Shape ts = logits.size() <= 1 ? Shape{} : logits;
  if (logits.size() > 1) ts.erase(ts.begin() + 1);
  const int64_t classes = logits.size() == 1 ? logits[0] : logits[1];
  Tensor t = randint_in(0, classes, ts, seed).contiguous();
  if (logits.size() <= 1) return t;
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); i += 5) p[i] = -100;  // every 5th target ignored
  return t;
}

}  // namespace

TEST_CASE("CUDA cross_entropy, its backward and nll_loss match the CPU", "[cuda][gpu][nn][loss]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const double rel = softmax_tolerance(dt);
    for (const ClassCase& c : kClassCases) {
      const Tensor x = randn_in(dt, c.logits, 3.0, 1);
      const Tensor t = targets_for(c.logits, 2);
      for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
        for (double eps : {0.0, 0.1}) {
          const std::string what = "cross_entropy " + std::string(reduction_name(r)) + " eps " + std::to_string(eps);
          // loss = lse - x_t (+ smoothing): an absolute error of a few ulps of the log-sum; the
          // mean/sum adds the summation order of the batch (relative)
          check_same_on_gpu(what, {x, t}, [r, eps](const auto& in) { return cross_entropy(in[0], in[1], r, -100, eps); },
                     rel, 1.0);
          const Shape gs = r == Reduction::None ? t.shape() : Shape{};
          const Tensor g = randn_in(dt, gs, 1.0, 3);
          // dx = w (p - onehot...): errors of a few ulps of |w| (p - 1 cancels near the target)
          check_same_on_gpu(what + " backward", {g, x, t},
                     [r, eps](const auto& in) { return cross_entropy_backward(in[0], in[1], in[2], r, -100, eps); },
                     rel, 4.0);
        }
        check_same_on_gpu("nll_loss " + std::string(reduction_name(r)), {log_softmax(x, x.dim() == 1 ? 0 : 1), t},
                   [r](const auto& in) { return nll_loss(in[0], in[1], r, -100); }, rel, 1.0);
      }
    }
    // every target ignored: the mean is 0 / 0 = NaN on both devices, the sum 0
    const Tensor x = randn_in(dt, {3, 4}, 1.0, 4);
    const Tensor all_ignored = full({3}, -100.0, {.dtype = DType::I64});
    check_same_on_gpu("cross_entropy, all ignored", {x, all_ignored},
               [](const auto& in) { return cross_entropy(in[0], in[1], Reduction::Mean, -100, 0.0); });
    check_same_on_gpu("cross_entropy, all ignored, sum", {x, all_ignored},
               [](const auto& in) { return cross_entropy(in[0], in[1], Reduction::Sum, -100, 0.0); });
    // a strided (transposed) input
    const Tensor xt = randn_in(dt, {11, 6}, 3.0, 5);
    check_same_on_gpu("cross_entropy of a transpose", {xt, randint_in(0, 11, {6}, 6)},
               [](const auto& in) { return cross_entropy(in[0].t(), in[1], Reduction::None, -100, 0.0); }, rel, 1.0);
  }
  // a bad target: the CPU's message, up to the input's device
  const Tensor x = randn_in(DType::F32, {3, 4}, 1.0, 4);
  const Tensor bad = from_vector<int64_t>({1, 4, -100}, {3});
  const std::string want = error_of([&] { cross_entropy(x, bad, Reduction::Mean, -100, 0.0); });
  REQUIRE(want.find("cross_entropy: target 4 is out of range for 4 classes") == 0);
  std::string got = deferred_error_of([&] { cross_entropy(x.to(gpu()), bad.to(gpu()), Reduction::Mean, -100, 0.0); });
  const std::string prefix = want.substr(0, want.find("; got input"));
  CHECK(got.substr(0, prefix.size()) == prefix);
  CHECK(got.find("hint: labels must be class indices") != std::string::npos);
  got = deferred_error_of([&] {
    cross_entropy_backward(full({}, 1.0).to(gpu()), x.to(gpu()), bad.to(gpu()), Reduction::Mean, -100, 0.0);
  });
  CHECK(got.find("cross_entropy_backward: target 4 is out of range for 4 classes") == 0);
  // the loss of the good targets: the bad one counts as ignored
  const Tensor mean = cross_entropy(x.to(gpu()), bad.to(gpu()), Reduction::Mean, -100, 0.0);
  CHECK(error_of([&] { cuda::synchronize(); }).find("cross_entropy: target 4") == 0);
  const Tensor ignored = from_vector<int64_t>({1, -100, -100}, {3});
  CHECK(values(mean) == values(cross_entropy(x.to(gpu()), ignored.to(gpu()), Reduction::Mean, -100, 0.0)));
  mg::test::require_no_pending_cuda_error();
}
