// Shape and indexing ops (cat, stack, split, chunk, index_select, gather, scatter_add,
// masked_fill, one_hot): golden values (negative dims, 3-D, non-contiguous inputs, repeated
// indices), f16/bf16 equal to f32 bit for bit, f64 central-difference gradient checks with a
// random cotangent, the parallel/strided kernel paths against a serial reference, and the error
// messages users see.
#include <catch2/catch.hpp>
#include <limits>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

Tensor f32(const std::vector<float>& v, Shape shape = {}) { return from_vector<float>(v, shape); }
Tensor f64(const std::vector<double>& v, Shape shape = {}) { return from_vector<double>(v, shape); }
Tensor i64(const std::vector<int64_t>& v, Shape shape = {}) { return from_vector<int64_t>(v, shape); }
Tensor i32(const std::vector<int32_t>& v, Shape shape = {}) { return from_vector<int32_t>(v, shape); }
Tensor mask(const std::vector<int>& v, Shape shape = {}) {
  std::vector<uint8_t> b(v.begin(), v.end());
  return to(from_vector<uint8_t>(b, shape), DType::Bool);
}
// 0, 1, 2, ... as f32 in `shape`.
Tensor iota(const Shape& shape, DType dtype = DType::F32) {
  return to(arange(0, shape_numel(shape)), dtype).reshape(shape);
}

using MultiFn = std::function<Tensor(const Tensors&)>;

// Checks autograd's vector-Jacobian product of f against central differences
// sum_k cot_k (f(x + h e_i) - f(x - h e_i))_k / 2h for every element i of every input listed in
// `which` (f64, contiguous); the other inputs (indices, masks) are passed through unchanged.
void check_grads(const MultiFn& f, const Tensors& inputs0, const std::vector<int>& which, double h = 1e-6) {
  Tensors leaves;
  for (const Tensor& x : inputs0) leaves.push_back(x.is_floating_point() ? clone(x) : x);
  Tensors wrt;
  for (int i : which) {
    REQUIRE(leaves[i].dtype() == DType::F64);
    leaves[i].requires_grad_();
    wrt.push_back(leaves[i]);
  }
  const Tensor y = f(leaves);
  const Tensor cot = randn(y.shape(), {.dtype = DType::F64});
  const Tensors grads = autograd::grad({y}, wrt, {cot});
  const std::vector<double> c = values(cot);
  NoGradGuard no_grad;
  for (std::size_t w = 0; w < which.size(); ++w) {
    const std::vector<double> got = values(grads[w]);
    double* p = leaves[which[w]].data<double>();
    REQUIRE(int64_t(got.size()) == leaves[which[w]].numel());
    for (std::size_t k = 0; k < got.size(); ++k) {
      const double v = p[k];
      p[k] = v + h;
      const std::vector<double> yp = values(f(leaves));
      p[k] = v - h;
      const std::vector<double> ym = values(f(leaves));
      p[k] = v;
      double num = 0.0;
      for (std::size_t j = 0; j < c.size(); ++j) num += c[j] * (yp[j] - ym[j]) / (2 * h);
      INFO("input " << which[w] << " element " << k << ": autograd " << got[k] << ", numeric " << num);
      CHECK(std::fabs(got[k] - num) <= 1e-7 + 1e-6 * std::fabs(num));
    }
  }
}

// For data-movement ops the f16/bf16 result must equal the f32 result on the same (rounded)
// values exactly: run f on x rounded to `low`, and on the same values widened to f32.
void check_lowp_exact(const MultiFn& f, const Tensors& inputs_f32) {
  for (DType low : {DType::F16, DType::BF16}) {
    Tensors lo, ref;
    for (const Tensor& x : inputs_f32) {
      if (x.is_floating_point()) {
        lo.push_back(to(x, low));
        ref.push_back(to(lo.back(), DType::F32));
      } else {
        lo.push_back(x);
        ref.push_back(x);
      }
    }
    const Tensor y_lo = f(lo);
    const Tensor y_ref = f(ref);
    INFO("dtype " << dtype_name(low));
    REQUIRE(y_lo.dtype() == low);
    REQUIRE(y_lo.shape() == y_ref.shape());
    CHECK(values(y_lo) == values(y_ref));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// cat / stack
// ---------------------------------------------------------------------------------------------

TEST_CASE("cat: golden values along dims 0, 1 and -1", "[ops][indexing]") {
  const Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = f32({7, 8, 9}, {1, 3});
  const Tensor y0 = cat({a, b}, 0);  // rows of a, then b
  CHECK(y0.shape() == Shape{3, 3});
  CHECK(values(y0) == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});

  const Tensor c = f32({10, 20}, {2, 1});
  const Tensor y1 = cat({a, c}, -1);  // each row of a followed by the row of c
  CHECK(y1.shape() == Shape{2, 4});
  CHECK(values(y1) == std::vector<double>{1, 2, 3, 10, 4, 5, 6, 20});
  CHECK(values(cat({c, a}, 1)) == std::vector<double>{10, 1, 2, 3, 20, 4, 5, 6});
}

TEST_CASE("cat: 3-D along the middle dim with transposed and sliced inputs", "[ops][indexing]") {
  // a [2, 1, 2] dense; b [2, 2, 2] a transposed view; c [2, 1, 2] a strided slice.
  const Tensor a = f32({0, 1, 2, 3}, {2, 1, 2});
  const Tensor b = transpose(iota({2, 2, 2}) + 10.0, 1, 2);  // b[i][j][k] = 10 + 4i + 2k + j
  REQUIRE(!b.is_contiguous());
  const Tensor c = slice(iota({2, 2, 2}) + 100.0, 1, 1, 2);  // c[i][0][k] = 100 + 4i + 2 + k
  REQUIRE(!c.is_contiguous());
  const Tensor y = cat({a, b, c}, 1);
  CHECK(y.shape() == Shape{2, 4, 2});
  CHECK(values(y) == std::vector<double>{0, 1, 10, 12, 11, 13, 102, 103,  //
                                         2, 3, 14, 16, 15, 17, 106, 107});
  // Negative dim -2 is the same dim.
  CHECK(values(cat({a, b, c}, -2)) == values(y));
  // Last dim with a non-contiguous input.
  CHECK(values(cat({a, transpose(f32({5, 6, 7, 8}, {1, 2, 2}), 0, 1)}, 2)) ==
        std::vector<double>{0, 1, 5, 6, 2, 3, 7, 8});
}

TEST_CASE("cat: promotes dtypes, skips empty slabs, single input is a copy", "[ops][indexing]") {
  const Tensor y = cat({i64({1, 2}), f32({0.5f})});
  CHECK(y.dtype() == DType::F32);
  CHECK(values(y) == std::vector<double>{1, 2, 0.5});
  CHECK(cat({f32({1}, {1}), to(f32({2}), DType::F64)}).dtype() == DType::F64);
  const Tensor e = zeros({0, 3});
  CHECK(values(cat({e, f32({1, 2, 3}, {1, 3}), e}, 0)) == std::vector<double>{1, 2, 3});
  const Tensor x = f32({1, 2});
  const Tensor c = cat({x});
  CHECK(values(c) == std::vector<double>{1, 2});
  CHECK(c.data_ptr() != x.data_ptr());
  // Every dtype.
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8}) {
    INFO(dtype_name(t));
    const Tensor z = cat({to(f32({1, 2}), t), to(f32({3}), t)});
    CHECK(z.dtype() == t);
    CHECK(values(z) == std::vector<double>{1, 2, 3});
  }
  CHECK(values(cat({mask({1, 0}), mask({1})})) == std::vector<double>{1, 0, 1});
}

TEST_CASE("cat: more than 16 inputs that require grad", "[ops][indexing]") {
  Tensors xs;
  for (int i = 0; i < 40; ++i) xs.push_back(full({1, 2}, double(i), {.dtype = DType::F64}).requires_grad_());
  const Tensor y = cat(xs, 0);
  CHECK(y.shape() == Shape{40, 2});
  CHECK(values(y)[2 * 37 + 1] == 37.0);
  // d sum(w * y) / d x_i = w's row i
  const Tensor w = iota({40, 2}, DType::F64);
  (y * w).sum().backward();
  for (int i = 0; i < 40; ++i) CHECK(values(xs[i].grad()) == std::vector<double>{2.0 * i, 2.0 * i + 1});
}

TEST_CASE("stack: golden values for dims 0, 1, -1 and 0-d tensors", "[ops][indexing]") {
  const Tensor a = f32({1, 2, 3}), b = f32({4, 5, 6});
  const Tensor s0 = stack({a, b});
  CHECK(s0.shape() == Shape{2, 3});
  CHECK(values(s0) == std::vector<double>{1, 2, 3, 4, 5, 6});
  const Tensor s1 = stack({a, b}, -1);
  CHECK(s1.shape() == Shape{3, 2});
  CHECK(values(s1) == std::vector<double>{1, 4, 2, 5, 3, 6});
  // 2-D inputs, one transposed, stacked in the middle: out[i][k][j] = x_k[i][j].
  const Tensor p = f32({1, 2, 3, 4}, {2, 2});
  const Tensor q = transpose(f32({5, 6, 7, 8}, {2, 2}), 0, 1);  // [[5, 7], [6, 8]]
  const Tensor s2 = stack({p, q}, 1);
  CHECK(s2.shape() == Shape{2, 2, 2});
  CHECK(values(s2) == std::vector<double>{1, 2, 5, 7, 3, 4, 6, 8});
  const Tensor s3 = stack({scalar_tensor(1.5), scalar_tensor(2.5)});
  CHECK(s3.shape() == Shape{2});
  CHECK(values(s3) == std::vector<double>{1.5, 2.5});
}

// ---------------------------------------------------------------------------------------------
// split / chunk
// ---------------------------------------------------------------------------------------------

TEST_CASE("split: by size (last piece smaller) and by a list of sizes", "[ops][indexing]") {
  const Tensor x = iota({5, 2});
  const Tensors p = split(x, 2);
  REQUIRE(p.size() == 3);
  CHECK(p[0].shape() == Shape{2, 2});
  CHECK(p[2].shape() == Shape{1, 2});
  CHECK(values(p[1]) == std::vector<double>{4, 5, 6, 7});
  CHECK(values(p[2]) == std::vector<double>{8, 9});
  // The pieces are views of x.
  CHECK(p[1].data_ptr() == static_cast<char*>(x.data_ptr()) + 4 * sizeof(float));

  const Tensors q = split(x, std::vector<int64_t>{1, 0, 4}, 0);
  REQUIRE(q.size() == 3);
  CHECK(q[1].shape() == Shape{0, 2});
  CHECK(values(q[0]) == std::vector<double>{0, 1});
  CHECK(values(q[2]) == std::vector<double>{2, 3, 4, 5, 6, 7, 8, 9});

  const Tensors r = split(x, 1, -1);  // columns
  REQUIRE(r.size() == 2);
  CHECK(r[1].shape() == Shape{5, 1});
  CHECK(values(r[1]) == std::vector<double>{1, 3, 5, 7, 9});
  CHECK(split(x, 7).size() == 1);
}

TEST_CASE("chunk: ceil division like PyTorch", "[ops][indexing]") {
  const Tensor x = iota({5});
  const Tensors a = chunk(x, 3);  // ceil(5/3) = 2: sizes 2, 2, 1
  REQUIRE(a.size() == 3);
  CHECK(values(a[0]) == std::vector<double>{0, 1});
  CHECK(values(a[2]) == std::vector<double>{4});
  const Tensors b = chunk(iota({6}), 4);  // ceil(6/4) = 2: sizes 2, 2, 2 (only 3 pieces)
  REQUIRE(b.size() == 3);
  CHECK(values(b[2]) == std::vector<double>{4, 5});
  const Tensors c = chunk(iota({2, 3, 4}), 2, -1);
  REQUIRE(c.size() == 2);
  CHECK(c[1].shape() == Shape{2, 3, 2});
  CHECK(values(c[1])[0] == 2.0);
  CHECK(values(c[1])[3] == 7.0);
  CHECK(chunk(iota({2}), 5).size() == 2);
}

// ---------------------------------------------------------------------------------------------
// index_select
// ---------------------------------------------------------------------------------------------

TEST_CASE("index_select: golden values and repeated indices, negative ones refused", "[ops][indexing]") {
  const Tensor x = iota({4, 3});  // x[i][j] = 3i + j
  const Tensor y = index_select(x, 0, i64({2, 0, 2, 3}));
  CHECK(y.shape() == Shape{4, 3});
  CHECK(values(y) == std::vector<double>{6, 7, 8, 0, 1, 2, 6, 7, 8, 9, 10, 11});
  const Tensor z = index_select(x, -1, i32({2, 2, 0}));
  CHECK(z.shape() == Shape{4, 3});
  CHECK(values(z) == std::vector<double>{2, 2, 0, 5, 5, 3, 8, 8, 6, 11, 11, 9});
  // A 0-d index selects one slice and keeps the dim.
  CHECK(values(index_select(x, 0, scalar_tensor(1, {.dtype = DType::I64}))) == std::vector<double>{3, 4, 5});
  CHECK(index_select(x, 0, i64({})).shape() == Shape{0, 3});
  // PyTorch 2.15 refuses negative indices in all three ops ("index -1 is out of bounds"): a -100
  // padding label must not read a row from the end.
  MG_REQUIRE_ERROR(index_select(x, 0, i64({0, -1})), "index_select: index -1 is out of range for dim 0 of size 4 "
                                                     "(expected 0 <= index < 4)");
  MG_REQUIRE_ERROR(gather(x, 1, i64({0, -100, 0, 0}, {4, 1})), "gather: index -100 is out of range for dim 1");
  MG_REQUIRE_ERROR(scatter_add(x, 0, i64({-1, 0, 0}, {1, 3}), x.narrow(0, 0, 1)),
                   "scatter_add: index -1 is out of range for dim 0");
}

TEST_CASE("index_select: 3-D, transposed input and strided index", "[ops][indexing]") {
  const Tensor x = iota({2, 3, 2});  // x[i][j][k] = 6i + 2j + k
  // Middle dim, index read with stride 2 from [2, 9, 0, 9]: {2, 0}.
  const Tensor idx = slice(i64({2, 9, 0, 9}), 0, 0, 4, 2);
  const Tensor y = index_select(x, 1, idx);
  CHECK(y.shape() == Shape{2, 2, 2});
  CHECK(values(y) == std::vector<double>{4, 5, 0, 1, 10, 11, 6, 7});
  // xt = x^T over dims 0, 2: xt[k][j][i] = 6i + 2j + k (non-contiguous rows).
  const Tensor xt = transpose(x, 0, 2);
  const Tensor t = index_select(xt, 0, i64({1, 1}));
  CHECK(t.shape() == Shape{2, 3, 2});
  CHECK(values(t) == std::vector<double>{1, 7, 3, 9, 5, 11, 1, 7, 3, 9, 5, 11});
  const Tensor u = index_select(xt, 2, i64({1}));  // last dim of the transposed view
  CHECK(values(u) == std::vector<double>{6, 8, 10, 7, 9, 11});
}

TEST_CASE("index_select: large embedding-style lookup matches a serial reference", "[ops][indexing]") {
  const int64_t vocab = 1000, h = 48, n = 3000;
  const Tensor w = randn({vocab, h});
  const Tensor ids = randint(0, vocab, {n});
  const std::vector<double> wv = values(w), iv = values(ids);
  for (const Tensor& table : {w, contiguous(transpose(transpose(w, 0, 1), 0, 1)), transpose(contiguous(transpose(w, 0, 1)), 0, 1)}) {
    const std::vector<double> got = values(index_select(table, 0, ids));
    REQUIRE(int64_t(got.size()) == n * h);
    bool same = true;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < h; ++c) same = same && got[r * h + c] == wv[int64_t(iv[r]) * h + c];
    CHECK(same);
  }
  // Along the last dim of a large tensor (one element per row).
  const std::vector<double> last = values(index_select(w, 1, i64({47, 0})));
  CHECK(last[2 * 999] == wv[999 * h + 47]);
  CHECK(last[2 * 999 + 1] == wv[999 * h]);
}

// ---------------------------------------------------------------------------------------------
// gather / scatter_add
// ---------------------------------------------------------------------------------------------

TEST_CASE("gather: golden values, negative dim, 3-D and transposed input", "[ops][indexing]") {
  const Tensor x = iota({3, 4});  // x[i][j] = 4i + j
  // out[i][j] = x[i][index[i][j]]
  const Tensor y = gather(x, -1, i64({0, 3, 1, 1, 2, 0}, {3, 2}));
  CHECK(values(y) == std::vector<double>{0, 3, 5, 5, 10, 8});
  // out[i][j] = x[index[i][j]][j] with an index smaller than x in dim 1
  CHECK(values(gather(x, 0, i32({2, 0, 1, 0}, {1, 4}))) == std::vector<double>{8, 1, 6, 3});
  // transposed: xt[i][j] = x[j][i] = 4j + i, out[i][j] = xt[index[i][j]][j]
  const Tensor xt = transpose(x, 0, 1);
  CHECK(values(gather(xt, 0, i64({3, 0, 2, 1, 1, 1}, {2, 3}))) == std::vector<double>{3, 4, 10, 1, 5, 9});
  // 3-D along dim 1: out[i][j][k] = x3[i][index[i][j][k]][k], x3[i][j][k] = 6i + 2j + k
  const Tensor x3 = iota({2, 3, 2});
  const Tensor g3 = gather(x3, 1, i64({2, 0, 1, 1, 0, 2}, {2, 1, 3}).narrow(2, 0, 2));
  CHECK(g3.shape() == Shape{2, 1, 2});
  CHECK(values(g3) == std::vector<double>{4, 1, 8, 7});
}

TEST_CASE("scatter_add: repeated indices accumulate, src larger than index", "[ops][indexing]") {
  const Tensor self = zeros({3, 2});
  // out[index[i][j]][j] += src[i][j]
  const Tensor idx = i64({0, 2, 0, 2, 1, 0}, {3, 2});
  const Tensor src = f32({1, 2, 10, 20, 100, 200, 999, 999}, {4, 2});  // last row unused
  const Tensor y = scatter_add(self, 0, idx, src);
  CHECK(values(y) == std::vector<double>{11, 200, 100, 0, 0, 22});
  // Along dim -1 onto a non-zero, transposed self.
  const Tensor s2 = transpose(f32({1, 2, 3, 4}, {2, 2}), 0, 1);  // [[1, 3], [2, 4]]
  const Tensor y2 = scatter_add(s2, -1, i64({1, 1, 1, 0, 0, 0}, {2, 3}), f32({1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(values(y2) == std::vector<double>{1, 9, 17, 4});
  // Integer dtypes.
  const Tensor yi = scatter_add(zeros({3}, {.dtype = DType::I64}), 0, i64({1, 1, 2}), i64({5, 6, 7}));
  CHECK(values(yi) == std::vector<double>{0, 11, 7});
  // 0-d.
  CHECK(values(scatter_add(scalar_tensor(1.0), 0, scalar_tensor(0, {.dtype = DType::I64}), scalar_tensor(2.0))) ==
        std::vector<double>{3});
}

TEST_CASE("scatter_add: f16/bf16 lines are accumulated in f32 and rounded once", "[ops][indexing]") {
  // 1 + 2^-11 + 2^-11 = 1 + 2^-10 exactly in f32, which f16 represents; rounding after each
  // addition would give 1 (1 + 2^-11 is a tie that rounds to even).
  const double e = std::ldexp(1.0, -11);
  const Tensor src = to(f64({1.0, e, e}), DType::F16);
  const Tensor y = scatter_add(zeros({2}, {.dtype = DType::F16}), 0, i64({1, 1, 1}), src);
  CHECK(values(y) == std::vector<double>{0, 1.0 + 2 * e});
}

TEST_CASE("gather/scatter_add: large strided case matches a serial reference", "[ops][indexing]") {
  const int64_t m = 300, n = 257, k = 190;
  const Tensor x = transpose(randn({n, m}), 0, 1);  // [m, n], non-contiguous
  const Tensor idx = randint(0, n, {m, k});
  const std::vector<double> xv = values(x), iv = values(idx);
  const std::vector<double> g = values(gather(x, 1, idx));
  const Tensor src = randn({m, k});
  const std::vector<double> sv = values(src);
  const std::vector<double> s = values(scatter_add(x, 1, idx, src));
  std::vector<double> want_s = xv;
  bool gather_ok = true;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t c = int64_t(iv[i * k + j]);
      gather_ok = gather_ok && g[i * k + j] == xv[i * n + c];
      want_s[i * n + c] = double(float(want_s[i * n + c]) + float(sv[i * k + j]));
    }
  }
  CHECK(gather_ok);
  bool scatter_ok = true;
  for (std::size_t i = 0; i < s.size(); ++i) scatter_ok = scatter_ok && s[i] == want_s[i];
  CHECK(scatter_ok);
}

// ---------------------------------------------------------------------------------------------
// masked_fill / one_hot
// ---------------------------------------------------------------------------------------------

TEST_CASE("where: a dense condition with dense or scalar values gives the strided loop's bits", "[ops][indexing]") {
  // The dense case (relu's backward: where(y > 0, g, 0)) selects the values' bits in a vectorized
  // loop; the same where through transposed views runs the general loop. Every dtype, NaNs
  // included (0 / 0), 1000 elements (not a multiple of any vector width), scalar on either side.
  const int64_t r = 25, c = 40;
  const Tensor x = randn({c, r}), y = randn({c, r});
  const Tensor xn = where(gt(x, scalar_like(1.5, x)), div(zeros({c, r}), zeros({c, r})), x);  // some NaNs
  const Tensor cond_t = gt(x, y);  // [c, r]
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool}) {
    const bool floating = dt == DType::F64 || dt == DType::F32 || dt == DType::F16 || dt == DType::BF16;
    const Tensor a_t = to(floating ? xn : abs(mul(x, scalar_like(10.0, x))), dt), b_t = to(abs(mul(y, scalar_like(10.0, y))), dt);
    const Tensor s = to(scalar_tensor(3), dt);
    const Tensor cond = transpose(cond_t, 0, 1), a = transpose(a_t, 0, 1), b = transpose(b_t, 0, 1);  // [r, c] strided
    const Tensor cond_d = contiguous(cond), a_d = contiguous(a), b_d = contiguous(b);
    const std::size_t bytes = std::size_t(r * c) * std::size_t(dtype_size(dt));
    for (int k = 0; k < 3; ++k) {
      const Tensor fast = k == 0 ? where(cond_d, a_d, b_d) : k == 1 ? where(cond_d, a_d, s) : where(cond_d, s, b_d);
      const Tensor slow = contiguous(k == 0 ? where(cond, a, b) : k == 1 ? where(cond, a, s) : where(cond, s, b));
      INFO(dtype_name(dt) << " case " << k);
      REQUIRE(fast.is_contiguous());
      CHECK(std::memcmp(fast.data_ptr(), slow.data_ptr(), bytes) == 0);
    }
  }
}

TEST_CASE("masked_fill: golden values with full, broadcast and transposed operands", "[ops][indexing]") {
  const Tensor x = iota({2, 3});
  CHECK(values(masked_fill(x, mask({1, 0, 0, 0, 1, 1}, {2, 3}), -1.5)) == std::vector<double>{-1.5, 1, 2, 3, -1.5, -1.5});
  // A row mask [3] broadcast over both rows; a column mask [2, 1].
  CHECK(values(masked_fill(x, mask({0, 1, 0}), 7)) == std::vector<double>{0, 7, 2, 3, 7, 5});
  CHECK(values(masked_fill(x, mask({0, 1}, {2, 1}), 7)) == std::vector<double>{0, 1, 2, 7, 7, 7});
  // Transposed input xt[i][j] = x[j][i] = 3j + i, and a transposed mask.
  const Tensor xt = transpose(x, 0, 1);
  const Tensor mt = transpose(mask({1, 0, 0, 0, 0, 1}, {2, 3}), 0, 1);  // [[1,0],[0,0],[0,1]]
  CHECK(values(masked_fill(xt, mt, 9)) == std::vector<double>{9, 3, 1, 4, 2, 9});
  // Output keeps the input dtype; integers and bool.
  const Tensor xi = masked_fill(i64({1, 2, 3}), mask({0, 1, 0}), -4);
  CHECK(xi.dtype() == DType::I64);
  CHECK(values(xi) == std::vector<double>{1, -4, 3});
  CHECK(values(masked_fill(mask({0, 0}), mask({1, 0}), 1)) == std::vector<double>{1, 0});
  // A 0-d mask fills everything.
  CHECK(values(masked_fill(x, to(scalar_tensor(1), DType::Bool), 0.5)) == std::vector<double>(6, 0.5));
  const Tensor h = masked_fill(to(x, DType::F16), mask({1, 0, 0, 0, 0, 0}, {2, 3}), 65504);
  CHECK(values(h)[0] == 65504.0);
}

TEST_CASE("one_hot: golden values, inferred num_classes, i32 input", "[ops][indexing]") {
  const Tensor y = one_hot(i64({0, 2, 1, 2}, {2, 2}), 3);
  CHECK(y.dtype() == DType::I64);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK(values(y) == std::vector<double>{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1});
  const Tensor z = one_hot(i32({3, 0}), -1);  // num_classes = max + 1 = 4
  CHECK(z.shape() == Shape{2, 4});
  CHECK(values(z) == std::vector<double>{0, 0, 0, 1, 1, 0, 0, 0});
  // Non-contiguous index.
  const Tensor t = one_hot(transpose(i64({0, 1, 1, 0}, {2, 2}), 0, 1), 2);  // [[0, 1], [1, 0]]
  CHECK(values(t) == std::vector<double>{1, 0, 0, 1, 0, 1, 1, 0});
  CHECK(!one_hot(i64({1}), 2).requires_grad());
}

// ---------------------------------------------------------------------------------------------
// f16 / bf16 are exact for data movement
// ---------------------------------------------------------------------------------------------

TEST_CASE("indexing ops: f16 and bf16 equal the f32 result exactly", "[ops][indexing]") {
  const Tensor a = randn({3, 4}), b = randn({4, 3});
  const Tensor idx = i64({2, 0, 2}), gidx = i64({0, 3, 1, 1, 2, 0}, {3, 2});
  const Tensor m = mask({1, 0, 0, 1});
  check_lowp_exact([](const Tensors& in) { return cat({in[0], transpose(in[1], 0, 1)}, 0); }, {a, b});
  check_lowp_exact([](const Tensors& in) { return stack({in[0], transpose(in[1], 0, 1)}, -1); }, {a, b});
  check_lowp_exact([](const Tensors& in) { return index_select(in[0], 0, in[1]); }, {a, idx});
  check_lowp_exact([](const Tensors& in) { return index_select(transpose(in[0], 0, 1), 1, in[1]); }, {a, idx});
  check_lowp_exact([](const Tensors& in) { return gather(in[0], 1, in[1]); }, {a, gidx});
  check_lowp_exact([](const Tensors& in) { return masked_fill(in[0], in[1], 3.0); }, {a, m});
  check_lowp_exact([](const Tensors& in) { return split(in[0], 3, 1)[1] * 1.0; }, {a});
  // scatter_add without collisions is data movement too.
  check_lowp_exact([](const Tensors& in) { return scatter_add(in[0], 1, in[1], in[2]); },
                   {zeros({3, 4}), i64({0, 3, 1, 2, 2, 0}, {3, 2}), randn({3, 2})});
}

// ---------------------------------------------------------------------------------------------
// f64 gradient checks (central differences, random cotangent)
// ---------------------------------------------------------------------------------------------

TEST_CASE("indexing ops: f64 gradients match central differences", "[ops][indexing][grad]") {
  const auto n = [](const Shape& s) { return randn(s, {.dtype = DType::F64}); };
  SECTION("cat") {
    check_grads([](const Tensors& in) { return cat({in[0], transpose(in[1], 0, 1), in[2]}, -1); },
                {n({2, 3}), n({1, 2}), n({2, 2})}, {0, 1, 2});
    check_grads([](const Tensors& in) { return cat({in[0], in[1]}, 1); }, {n({2, 1, 3}), n({2, 2, 3})}, {0, 1});
  }
  SECTION("stack") {
    check_grads([](const Tensors& in) { return stack({in[0], in[1] * in[1], in[0]}, 1); },
                {n({2, 3}), n({2, 3})}, {0, 1});
  }
  SECTION("split and chunk") {
    check_grads([](const Tensors& in) {
      const Tensors p = split(in[0], 2, 1);  // [3, 2], [3, 2], [3, 1]
      return cat({p[2], p[0] * 2.0, p[1] * p[1]}, 1);
    }, {n({3, 5})}, {0});
    check_grads([](const Tensors& in) {
      const Tensors p = split(in[0], std::vector<int64_t>{1, 3}, 0);
      return cat({p[1], p[0] * 3.0}, 0);
    }, {n({4, 2})}, {0});
    check_grads([](const Tensors& in) {
      const Tensors p = chunk(in[0], 3, -1);  // [2, 2], [2, 2], [2, 1]
      return cat({p[1] * p[0], p[2]}, 1);
    }, {n({2, 5})}, {0});
  }
  SECTION("index_select (repeated indices accumulate)") {
    check_grads([](const Tensors& in) { return index_select(in[0], 0, in[1]); },
                {n({4, 3}), i64({2, 0, 2, 3, 2})}, {0});
    check_grads([](const Tensors& in) { return index_select(transpose(in[0], 0, 2), 1, in[1]); },
                {n({2, 3, 4}), i32({1, 1, 2})}, {0});
  }
  SECTION("gather") {
    check_grads([](const Tensors& in) { return gather(in[0], 1, in[1]); },
                {n({3, 4}), i64({0, 3, 1, 1, 2, 2}, {3, 2})}, {0});
    check_grads([](const Tensors& in) { return gather(transpose(in[0], 0, 1), 0, in[1]); },
                {n({3, 4}), i64({3, 0, 3, 1, 1, 1}, {2, 3})}, {0});
  }
  SECTION("scatter_add (self and src, src larger than index)") {
    check_grads([](const Tensors& in) { return scatter_add(in[0], 0, in[1], in[2]); },
                {n({3, 4}), i64({0, 2, 1, 0, 2, 2, 0, 1}, {2, 4}), n({2, 4})}, {0, 2});
    check_grads([](const Tensors& in) { return scatter_add(in[0], -1, in[1], in[2]); },
                {n({2, 3}), i64({2, 2, 0}, {1, 3}), n({3, 5})}, {0, 2});
  }
  SECTION("masked_fill") {
    check_grads([](const Tensors& in) { return masked_fill(in[0], in[1], 2.5); },
                {n({3, 4}), mask({1, 0, 0, 1})}, {0});
    check_grads([](const Tensors& in) { return masked_fill(transpose(in[0], 0, 1), in[1], -1.0); },
                {n({3, 2}), mask({0, 1, 1, 0, 0, 1}, {2, 3})}, {0});
  }
}

TEST_CASE("indexing ops: double backward through index_select and gather", "[ops][indexing][grad]") {
  // L = sum(index_select(x, 0, i)^3); dL/dx_r = 3 c_r x_r^2 (c_r = how often row r is selected);
  // sum(dL/dx) differentiated again: 6 c_r x_r.
  const Tensor x = f64({1, 2, -1, 0.5}, {4, 1}).requires_grad_();
  const Tensor idx = i64({0, 2, 0, 3});
  const Tensor y = index_select(x, 0, idx);
  const Tensor gx = autograd::grad({(y * y * y).sum()}, {x}, {}, true, true)[0];
  CHECK(values(gx) == std::vector<double>{6, 0, 3, 0.75});
  const Tensor ggx = autograd::grad({gx.sum()}, {x})[0];
  CHECK(values(ggx) == std::vector<double>{12, 0, -6, 3});
  // Same through gather: c = {1, 1, 0, 2} for row 0..3 via [0, 1, 3, 3].
  const Tensor x2 = f64({1, 2, -1, 0.5}).requires_grad_();
  const Tensor y2 = gather(x2, 0, i64({0, 1, 3, 3}));
  const Tensor g2 = autograd::grad({(y2 * y2 * y2).sum()}, {x2}, {}, true, true)[0];
  CHECK(values(g2) == std::vector<double>{3, 12, 0, 1.5});
  CHECK(values(autograd::grad({g2.sum()}, {x2})[0]) == std::vector<double>{6, 12, 0, 6});
}

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------

TEST_CASE("indexing ops: error messages", "[ops][indexing][errors]") {
  const Tensor x = zeros({2, 3});
  MG_REQUIRE_ERROR(cat({x, zeros({2, 4})}, 0), "cat: sizes must match except in dim 0; got [2, 3] f32 cpu at position 0 and [2, 4] f32 cpu at position 1 (dim 1: 3 vs 4)");
  REQUIRE_THROWS_AS(cat({x, zeros({2, 4})}, 0), ShapeError);
  MG_REQUIRE_ERROR(cat({x, zeros({2, 3, 1})}, 0), "cat: expected tensors with the same number of dims");
  MG_REQUIRE_ERROR(cat({scalar_tensor(1.0)}), "hint: use mg::stack");
  MG_REQUIRE_ERROR(cat({}), "cat: expected a non-empty list");
  MG_REQUIRE_ERROR(cat({x}, 2), "cat");
  MG_REQUIRE_ERROR(stack({x, zeros({3, 2})}), "stack: expected tensors of one shape; got [2, 3] f32 cpu at position 0 and [3, 2] f32 cpu at position 1");

  MG_REQUIRE_ERROR(index_select(x, 1, i64({0, 3})), "index_select: index 3 is out of range for dim 1 of size 3 (expected 0 <= index < 3)");
  REQUIRE_THROWS_AS(index_select(x, 1, i64({0, 3})), IndexError);
  MG_REQUIRE_ERROR(index_select(x, 0, i64({-3})), "index -3 is out of range for dim 0 of size 2");
  MG_REQUIRE_ERROR(index_select(x, 0, f32({0})), "index_select: expected an i64 or i32 index tensor, got [1] f32 cpu");
  REQUIRE_THROWS_AS(index_select(x, 0, f32({0})), DTypeError);
  MG_REQUIRE_ERROR(index_select(x, 0, i64({0, 1}, {1, 2})), "index_select: expected a 1-D index, got [1, 2] i64 cpu");
  MG_REQUIRE_ERROR(gather(x, 1, i64({0, 7}, {1, 2})), "gather: index 7 is out of range for dim 1 of size 3");
  MG_REQUIRE_ERROR(gather(x, 0, to(i64({0}, {1, 1}), DType::U8)), "gather: expected an i64 or i32 index tensor");
  MG_REQUIRE_ERROR(scatter_add(x, 0, i64({5}, {1, 1}), ones({1, 1})), "scatter_add: index 5 is out of range for dim 0 of size 2");
  MG_REQUIRE_ERROR(scatter_add(x, 0, i64({0, 0, 0, 0}, {1, 4}), ones({1, 4})), "scatter_add: index [1, 4] i64 cpu is larger than input [2, 3] f32 cpu in dim 1");

  MG_REQUIRE_ERROR(masked_fill(x, mask({1, 0}), 1.0), "masked_fill: mask [2] bool cpu cannot be broadcast to the input's shape [2, 3]");
  REQUIRE_THROWS_AS(masked_fill(x, mask({1, 0}), 1.0), ShapeError);
  MG_REQUIRE_ERROR(masked_fill(x, zeros({4, 1, 2}, {.dtype = DType::Bool}), 1.0), "cannot be broadcast");
  MG_REQUIRE_ERROR(x.clone().masked_fill_(zeros({2, 3, 1}, {.dtype = DType::Bool}), 1.0), "cannot be broadcast");
  MG_REQUIRE_ERROR(masked_fill(x, ones({3}), 1.0), "masked_fill: expected a bool mask, got [3] f32 cpu");
  MG_REQUIRE_ERROR(masked_fill(zeros({2}, {.dtype = DType::U8}), mask({1, 0}), 300), "masked_fill: value 300 cannot be converted to u8");

  MG_REQUIRE_ERROR(split(zeros({4, 2}), std::vector<int64_t>{1, 2}, 0), "split: split sizes [1, 2] sum to 3 but dim 0 has size 4 in [4, 2] f32 cpu");
  MG_REQUIRE_ERROR(split(zeros({4, 2}), std::vector<int64_t>{3, 2}, 0), "split: split sizes [3, 2] sum to more than the size 4 of dim 0");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();  // a sum that would wrap around to 2
  MG_REQUIRE_ERROR(split(zeros({2, 2}), std::vector<int64_t>{kMax, kMax, 4}, 0), "sum to more than the size 2 of dim 0");
  REQUIRE_THROWS_AS(split(zeros({4, 2}), std::vector<int64_t>{1, 2}, 0), ShapeError);
  MG_REQUIRE_ERROR(split(x, 0), "split: split_size must be positive, got 0");
  MG_REQUIRE_ERROR(chunk(x, 0), "chunk: number of chunks must be positive, got 0");

  MG_REQUIRE_ERROR(one_hot(i64({0, 3}), 3), "one_hot: class value 3 is out of range for num_classes = 3");
  MG_REQUIRE_ERROR(one_hot(i64({1, -1}), 3), "one_hot: class value -1 is out of range");
  MG_REQUIRE_ERROR(one_hot(i64({-2, -1}), -1), "one_hot: class values must be non-negative");
  MG_REQUIRE_ERROR(one_hot(i64({}), -1), "one_hot: cannot infer num_classes from an empty index");
  MG_REQUIRE_ERROR(one_hot(f32({1}), 2), "one_hot: expected an i64 or i32 index tensor, got [1] f32 cpu");
  MG_REQUIRE_ERROR(one_hot(i64({1}), 0), "one_hot: num_classes must be positive");
}

TEST_CASE("scatter_add refuses self and src of different dtypes, as PyTorch's, and an empty index is not size-checked",
          "[ops][indexing]") {
  // PyTorch: "scatter(): Expected self.dtype to be equal to src.dtype" (mixgrad converted silently).
  const Tensor idx = i64({0}, {1});
  MG_REQUIRE_ERROR(scatter_add(zeros({3}), 0, idx, ones({1}, {.dtype = DType::F64})), "scatter_add");
  MG_REQUIRE_ERROR(scatter_add(zeros({3}, {.dtype = DType::I64}), 0, idx, ones({1})), "scatter_add");
  // PyTorch: gather(zeros(3, 4), 0, zeros(0, 5)) is [0, 5]; scatter_add with it returns self.
  const Tensor empty_idx = zeros({0, 5}, {.dtype = DType::I64});
  CHECK(gather(zeros({3, 4}), 0, empty_idx).shape() == Shape{0, 5});
  CHECK(values(scatter_add(ones({3, 4}), 0, empty_idx, zeros({1, 1}))) == std::vector<double>(12, 1.0));
  // one_hot: a class value of INT64_MAX leaves no room for num_classes (was signed overflow)
  MG_REQUIRE_ERROR(one_hot(i64({std::numeric_limits<int64_t>::max()}, {1}), -1), "leaves no room for num_classes");
}
