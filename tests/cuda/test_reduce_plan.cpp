// The CUDA reductions' host-side logic, run on the CPU (no GPU needed):
// - the plan (cuda/host/reduce_plan.h): for many layouts, dtypes' element sizes and alignments,
//   every (output, term) pair is visited exactly once at its true element offset, by the same
//   thread traversal the kernels run (simulate_reduce over a hashing reducer), and the grid
//   invariants hold;
// - the algorithm (cuda/host/reducers.h simulated thread by thread): sums within the stated
//   bound (10^7 × 0.1f), argmax/max_dim ties and NaNs resolve to the first index across splits,
//   every reducer against the CPU op, cumsum equal to the CPU's bit for bit;
// - the registry: every reduction has CUDA kernels for exactly the CPU's dtypes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "core/factory.h"
#include "cuda/cuda.h"
#include "cuda/host/reduce_plan.h"
#include "cuda/host/reducers.h"
#include "ops/dispatcher.h"
#include "ops/kernel_registry.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using namespace mg::cuda;

namespace {

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct HashAcc {
  uint64_t n;
  uint64_t h;
};

// Folds the hash of (element value, term position); elements hold their own storage index, so an
// output's hash is the multiset of (offset, position) pairs its terms were read from.
template <typename E>
struct HashOp {
  using Acc = HashAcc;
  uint64_t* out_n;
  uint64_t* out_h;
  Acc init() const { return {0, 0}; }
  Acc fold(Acc a, E x, int64_t r) const { return {a.n + 1, a.h + mix(uint64_t(x) * 1000003u + uint64_t(r))}; }
  Acc combine(Acc a, Acc b) const { return {a.n + b.n, a.h + b.h}; }
  void store(int64_t o, Acc a, int64_t) const {
    out_n[o] = a.n;
    out_h[o] = a.h;
  }
};

struct Layout {
  Shape shape;
  Strides strides;  // elements
  int64_t offset;   // storage offset, elements
  std::vector<int64_t> dims;
};

// A view of a contiguous `base` shape: permuted by `perm`, then `step` along its dim 0 (a slice).
Layout view_of(const Shape& base, const std::vector<int64_t>& perm, int64_t step, int64_t offset,
               std::vector<int64_t> dims) {
  Strides cs(base.size());
  int64_t s = 1;
  for (int64_t d = int64_t(base.size()) - 1; d >= 0; --d) {
    cs[std::size_t(d)] = s;
    s *= base[std::size_t(d)];
  }
  Layout l{{}, {}, offset, std::move(dims)};
  for (int64_t p : perm) {
    l.shape.push_back(base[std::size_t(p)]);
    l.strides.push_back(cs[std::size_t(p)]);
  }
  if (!l.shape.empty() && step > 1) {
    l.shape[0] = (l.shape[0] + step - 1) / step;
    l.strides[0] *= step;
  }
  return l;
}

// Storage offset of (output o, term r) from the original, unmerged dims.
int64_t reference_offset(const Layout& l, int64_t o, int64_t r) {
  std::vector<bool> reduced(l.shape.size(), false);
  for (int64_t d : l.dims) reduced[std::size_t(d)] = true;
  int64_t off = l.offset;
  for (int64_t d = int64_t(l.shape.size()) - 1; d >= 0; --d) {
    int64_t& k = reduced[std::size_t(d)] ? r : o;
    off += (k % l.shape[std::size_t(d)]) * l.strides[std::size_t(d)];
    k /= l.shape[std::size_t(d)];
  }
  return off;
}

// Runs the plan over storage whose element k holds k (E wide enough for the storage), checks the
// plan's invariants and that every output read exactly its terms at their offsets.
template <typename E>
void check_coverage(const Layout& l) {
  int64_t reach = l.offset;
  for (std::size_t d = 0; d < l.shape.size(); ++d) reach += std::max<int64_t>(0, l.shape[d] - 1) * l.strides[d];
  // 16-byte-aligned storage: a storage offset that is not a multiple of 16 bytes breaks alignment.
  std::vector<E> storage(std::size_t(reach + 1 + 64));
  std::size_t pad = 0;
  while (reinterpret_cast<std::uintptr_t>(storage.data() + pad) % 16 != 0) ++pad;
  E* base = storage.data() + pad;
  for (int64_t k = 0; k <= reach; ++k) base[k] = E(k);
  const E* first = base + l.offset;
  const ReducePlan p = make_reduce_plan(l.shape, l.strides, l.dims, int64_t(sizeof(E)),
                                        reinterpret_cast<std::uintptr_t>(first));
  INFO("shape " << shape_str(l.shape) << " strides " << shape_str(l.strides) << " offset " << l.offset << " dims "
                << shape_str(l.dims) << " elem " << sizeof(E) << " layout " << int(p.layout) << " vec " << p.vec
                << " ry " << p.ry << " splits " << p.splits);
  // Grid invariants.
  REQUIRE(p.ry * p.ox == kReduceThreads);
  REQUIRE((p.ry & (p.ry - 1)) == 0);
  REQUIRE((p.ry2 & (p.ry2 - 1)) == 0);
  REQUIRE(p.splits >= 1);
  REQUIRE(p.splits <= kReduceMaxSplits);
  REQUIRE(p.units * p.vec + p.tail == p.red_numel);
  REQUIRE(p.blocks == p.groups * p.splits);
  REQUIRE(p.groups * p.ox >= p.out_numel);
  if (p.splits > 1) {
    REQUIRE(p.ry2 * 4 >= p.splits);  // each second-pass thread combines at most 4 partials
    REQUIRE(p.blocks2 * p.ox2 >= p.out_numel);
  }
  if (p.vec > 1) {
    REQUIRE(p.vec == int(16 / sizeof(E)));
    for (int64_t o = 0; o < p.out_numel; ++o) {
      REQUIRE((reinterpret_cast<std::uintptr_t>(first + p.kept.offset(o))) % 16 == 0);
    }
  }
  std::vector<uint64_t> got_n(std::size_t(p.out_numel), 99), got_h(std::size_t(p.out_numel), 0);
  simulate_reduce<E>(p, HashOp<E>{got_n.data(), got_h.data()}, first);
  for (int64_t o = 0; o < p.out_numel; ++o) {
    uint64_t want = 0;
    for (int64_t r = 0; r < p.red_numel; ++r) want += mix(uint64_t(E(reference_offset(l, o, r))) * 1000003u + uint64_t(r));
    INFO("output " << o);
    REQUIRE(got_n[std::size_t(o)] == uint64_t(p.red_numel));
    REQUIRE(got_h[std::size_t(o)] == want);
  }
}

std::vector<Layout> layouts() {
  std::vector<Layout> out;
  // 1-D and 2-D, every dim set, odd sizes (vector bodies with tails), transposed, stepped, offset.
  for (int64_t offset : {0, 1, 4}) {
    out.push_back(view_of({4097}, {0}, 1, offset, {0}));
    out.push_back(view_of({4097}, {0}, 1, offset, {}));
    out.push_back(view_of({4096}, {0}, 1, offset, {0}));
    for (const Shape& s : {Shape{33, 257}, Shape{257, 33}, Shape{16, 64}, Shape{3, 5}}) {
      for (const auto& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{1}, std::vector<int64_t>{0, 1},
                               std::vector<int64_t>{}}) {
        out.push_back(view_of(s, {0, 1}, 1, offset, dims));
        out.push_back(view_of(s, {1, 0}, 1, offset, dims));  // transposed
        out.push_back(view_of(s, {0, 1}, 2, offset, dims));  // every other row
      }
    }
  }
  // 3-D over one, two and all dims, permuted.
  for (const auto& perm : {std::vector<int64_t>{0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}}) {
    for (const auto& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{1}, std::vector<int64_t>{2},
                             std::vector<int64_t>{0, 1}, std::vector<int64_t>{0, 2}, std::vector<int64_t>{1, 2},
                             std::vector<int64_t>{0, 1, 2}}) {
      out.push_back(view_of({7, 9, 24}, perm, 1, 0, dims));
      out.push_back(view_of({6, 5, 7}, perm, 1, 0, dims));
      out.push_back(view_of({6, 1, 32}, perm, 1, 0, dims));  // a size-1 dim
    }
  }
  // Long reductions that split over blocks, and many short ones.
  out.push_back(view_of({40000}, {0}, 1, 0, {0}));
  out.push_back(view_of({3, 20000}, {0, 1}, 1, 0, {1}));
  out.push_back(view_of({20000, 3}, {0, 1}, 1, 0, {0}));
  out.push_back(view_of({20000, 3}, {1, 0}, 1, 0, {1}));
  out.push_back(view_of({5000, 2}, {0, 1}, 1, 0, {1}));
  out.push_back(view_of({2, 5000}, {0, 1}, 1, 0, {0}));
  // Rows whose stride is a multiple of 16 bytes but whose length is not a multiple of the vector
  // (a column slice): vector loads with a tail in every row.
  out.push_back({{16, 61}, {64, 1}, 0, {1}});
  out.push_back({{16, 61}, {64, 1}, 0, {0}});
  out.push_back({{16, 61}, {64, 1}, 0, {0, 1}});
  out.push_back({{4, 6, 37}, {240, 40, 1}, 0, {2}});
  out.push_back({{4, 6, 37}, {240, 40, 1}, 0, {1, 2}});
  out.push_back({{4, 6, 37}, {240, 40, 1}, 0, {0, 2}});
  // Empty reductions and empty outputs.
  out.push_back(view_of({0}, {0}, 1, 0, {0}));
  out.push_back(view_of({4, 0}, {0, 1}, 1, 0, {1}));
  out.push_back(view_of({0, 4}, {0, 1}, 1, 0, {1}));
  out.push_back(view_of({}, {}, 1, 0, {}));
  return out;
}

}  // namespace

TEST_CASE("reduce plan: every term of every output at its offset, every layout and width", "[cuda][reduce]") {
  for (const Layout& l : layouts()) {
    int64_t numel = 1;
    for (int64_t s : l.shape) numel *= s;
    check_coverage<int64_t>(l);    // vec 2 (f64, i64)
    check_coverage<uint32_t>(l);   // vec 4 (f32, i32)
    check_coverage<uint16_t>(l);   // vec 8 (f16, bf16)
    if (numel < 120) check_coverage<uint8_t>(l);  // vec 16 (u8, bool): values hold offsets < 256
  }
}

TEST_CASE("reduce plan: layouts, vector widths and grids of typical shapes", "[cuda][reduce]") {
  auto plan = [](const Shape& shape, const Strides& strides, std::vector<int64_t> dims, int64_t elem) {
    return make_reduce_plan(shape, strides, dims, elem, 4096);
  };
  // The benchmark's sum of 2^28 f32: vector loads, 1024 blocks of 256 threads, 256 loads each.
  const ReducePlan all = plan({int64_t(1) << 28}, {1}, {0}, 4);
  CHECK(all.layout == ReduceLayout::Inner);
  CHECK(all.vec == 4);
  CHECK(all.ry == 256);
  CHECK(all.splits == 1024);
  CHECK(all.blocks == 1024);
  CHECK(all.ry2 == 256);
  // logsumexp over the rows of [4096, 32768] bf16: a block per row, one leaf of 8 × 16 per thread.
  const ReducePlan rows = plan({4096, 32768}, {32768, 1}, {1}, 2);
  CHECK(rows.layout == ReduceLayout::Inner);
  CHECK(rows.vec == 8);
  CHECK(rows.ry == 256);
  CHECK(rows.splits == 1);
  CHECK(rows.blocks == 4096);
  // Column sums of [4097, 33]: coalesced across the 33 columns, split over the 4097 rows.
  const ReducePlan cols = plan({4097, 33}, {33, 1}, {0}, 4);
  CHECK(cols.layout == ReduceLayout::Outer);
  CHECK(cols.ox == 32);
  CHECK(cols.splits > 1);
  // A transposed row sum is a column sum of the storage.
  CHECK(plan({33, 4097}, {1, 33}, {1}, 4).layout == ReduceLayout::Outer);
  // Contiguous [A, B, C] over {0, 2}: neither; misaligned rows: scalar loads.
  CHECK(plan({6, 5, 7}, {35, 7, 1}, {0, 2}, 4).layout == ReduceLayout::General);
  CHECK(plan({33, 4097}, {4097, 1}, {1}, 4).vec == 1);
  CHECK(make_reduce_plan({4096}, {1}, {0}, 4, 4100).vec == 1);
  const ReducePlan padded = plan({33, 4097}, {4104, 1}, {1}, 4);  // rows 16-byte aligned: vectors + a tail
  CHECK(padded.vec == 4);
  CHECK(padded.units == 1024);
  CHECK(padded.tail == 1);
  // Merging: [2, 3, 4] over {1, 2} is one reduced dim of 12; over {0, 2} kept and reduced stay apart.
  const ReducePlan merged = plan({2, 3, 4}, {12, 4, 1}, {1, 2}, 4);
  CHECK(merged.red.ndim == 1);
  CHECK(merged.red.sizes[0] == 12);
  CHECK(merged.kept.ndim == 1);
  // Too many unmergeable dims is a clear error.
  Shape big(20, 2);
  Strides st(20);
  for (int d = 0; d < 20; ++d) st[std::size_t(d)] = int64_t(1) << (2 * (19 - d) + 1);  // stepped: nothing merges
  std::vector<int64_t> even;
  for (int d = 0; d < 20; d += 2) even.push_back(d);
  MG_REQUIRE_ERROR(plan(big, st, even, 4), "cannot be merged");
}

namespace {

// The simulated GPU reduction of a CPU tensor x (any layout) with reducer make(out pointers).
template <typename T, typename R>
void simulate(const Tensor& x, const std::vector<int64_t>& dims, const R& r) {
  const T* data = static_cast<const T*>(x.data_ptr());
  const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), dims, int64_t(sizeof(T)),
                                        reinterpret_cast<std::uintptr_t>(data));
  simulate_reduce<T>(p, r, data);
}

// Output shape of a reduction over dims (keepdim false).
Shape kept_shape(const Tensor& x, const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) s.push_back(x.shape()[std::size_t(d)]);
  }
  return s;
}

void require_close(const Tensor& got, const Tensor& want, double rel, double abs_tol, const std::string& what) {
  const std::vector<double> g = test::values(got), w = test::values(want);
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      std::abs(g[i] - w[i]) <= rel * std::abs(w[i]) + abs_tol;
    if (!same) FAIL(what << " element " << i << ": simulated " << g[i] << " cpu " << w[i]);
  }
}

}  // namespace

TEST_CASE("reduce algorithm: 10^7 x 0.1f sums within the bound - a running f32 total would not", "[cuda][reduce]") {
  const int64_t n = 10'000'000;
  const Tensor x = full({n}, 0.1);  // f32 0.1f
  Tensor out = empty({});
  simulate<float>(x, {0}, SumOp<float, float>{out.data<float>(), false});
  const double exact = double(n) * double(0.1f);
  // The bound (cuda/host/reducers.h): (d_leaf + ceil(log2 n) + 6) u Σ|x| with d_leaf = 34 (4 lanes).
  const double bound = (34 + 24 + 6) * 0x1p-24 * exact;
  const double got = double(out.data<float>()[0]);
  CHECK(std::abs(got - exact) <= bound);
  float running = 0;
  for (int64_t i = 0; i < n; ++i) running += 0.1f;
  CHECK(std::abs(double(running) - exact) > 100 * bound);  // about 1% off: the rule matters
  // Strided (scalar loads, in-order leaves of 128) and split over blocks too.
  const Tensor m = full({n / 1000, 1000}, 0.1).t();  // [1000, 10^4], reduced over dim 1 (stride 1000)
  Tensor rows = empty({1000});
  simulate<float>(m, {1}, SumOp<float, float>{rows.data<float>(), false});
  const double row_exact = 1e4 * double(0.1f);
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(std::abs(double(rows.data<float>()[i]) - row_exact) <= (128 + 14 + 6) * 0x1p-24 * row_exact);
}

TEST_CASE("reduce algorithm: argmax and max_dim pick the first index across lanes and splits", "[cuda][reduce]") {
  for (int64_t n : {int64_t(4097), int64_t(100000), int64_t(3000000)}) {
    INFO("n " << n);
    Tensor x = zeros({n});
    float* p = x.data<float>();
    Tensor value = empty({}), index = empty({}, {.dtype = DType::I64});
    auto run = [&](bool is_max) {
      simulate<float>(x, {0}, ArgOp<float>{value.data<float>(), index.data<int64_t>(), is_max});
      return index.data<int64_t>()[0];
    };
    CHECK(run(true) == 0);  // all tied
    CHECK(run(false) == 0);
    p[n - 1] = 5;
    p[n / 2 + 3] = 5;
    p[n / 3] = 5;
    CHECK(run(true) == n / 3);
    CHECK(value.data<float>()[0] == 5.f);
    p[n - 2] = -1;
    p[7] = -1;
    CHECK(run(false) == 7);
    p[n - 5] = NAN;
    p[n / 2] = NAN;
    CHECK(run(true) == n / 2);  // NaN wins, the first NaN
    CHECK(run(false) == n / 2);
    CHECK(std::isnan(value.data<float>()[0]));
  }
  // Along dim 0 of [4097, 33] (column layout) and dim 1 of the transpose.
  Tensor m = zeros({4097, 33});
  for (int64_t c = 0; c < 33; ++c) {
    m.data<float>()[(100 + c) * 33 + c] = 2;
    m.data<float>()[(4000 - c) * 33 + c] = 2;
  }
  Tensor idx = empty({33}, {.dtype = DType::I64});
  simulate<float>(m, {0}, ArgOp<float>{nullptr, idx.data<int64_t>(), true});
  for (int64_t c = 0; c < 33; ++c) CHECK(idx.data<int64_t>()[c] == 100 + c);
  simulate<float>(m.t(), {1}, ArgOp<float>{nullptr, idx.data<int64_t>(), true});
  for (int64_t c = 0; c < 33; ++c) CHECK(idx.data<int64_t>()[c] == 100 + c);
}

TEST_CASE("reduce algorithm: amax and amin return the first of +0 and -0, as the CPU", "[cuda][reduce]") {
  for (int64_t n : {int64_t(300), int64_t(4097), int64_t(100000), int64_t(3000000)}) {
    INFO("n " << n);
    Tensor got = empty({});
    auto run = [&](const Tensor& x, bool is_max) {
      simulate<float>(x, {0}, ExtremumOp<float>{got.data<float>(), is_max});
      return got.data<float>()[0];
    };
    // The extremum 0 first appears as -0 (position 1), later as +0 in every lane and block.
    Tensor x = zeros({n});
    x.data<float>()[0] = -1;
    x.data<float>()[1] = -0.0f;
    const float cpu_max = amax(x, {0}).item<float>();
    REQUIRE((cpu_max == 0 && std::signbit(cpu_max)));
    const float gpu_max = run(x, true);
    CHECK((gpu_max == 0 && std::signbit(gpu_max)));
    // And the other way round for amin: +0 first, -0 after it everywhere.
    Tensor y = full({n}, -0.0);
    y.data<float>()[0] = 1;
    y.data<float>()[1] = 0.0f;
    const float cpu_min = amin(y, {0}).item<float>();
    REQUIRE((cpu_min == 0 && !std::signbit(cpu_min)));
    const float gpu_min = run(y, false);
    CHECK((gpu_min == 0 && !std::signbit(gpu_min)));
  }
}

TEST_CASE("reduce algorithm: every reducer matches the CPU op on odd shapes and layouts", "[cuda][reduce]") {
  Generator gen(7);
  const Tensor base = randn({33, 4097}, {}, &gen);
  const Tensor cube = randn({7, 33, 65}, {}, &gen);
  struct Case {
    Tensor x;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {{base, {1}}, {base, {0}}, {base, {0, 1}}, {base.t(), {1}}, {base.t(), {0}},
                                   {cube, {0, 2}}, {cube, {1, 2}}, {cube.permute({2, 0, 1}), {0, 1}},
                                   {base.slice(1, 0, 4097, 3), {1}}, {zeros({5, 0}), {1}},
                                   {randn({32, 4104}, {}, &gen).slice(1, 0, 4097), {1}}};  // padded rows
  for (const Case& c : cases) {
    const Shape out_shape = kept_shape(c.x, c.dims);
    INFO("shape " << shape_str(c.x.shape()) << " dims " << shape_str(c.dims));
    int64_t n = 1;
    for (int64_t d : c.dims) n *= c.x.shape()[std::size_t(d)];
    // Both sides by the rule: (128 + ceil(log2 n) + 8) u per side, relative to Σ|x| ~ n for randn,
    // against results of size ~sqrt(n): compare within 2 · that · n (plus the result's own ulps).
    const double sum_tol = 2 * (128 + 20 + 8) * 0x1p-24 * double(std::max<int64_t>(n, 1));
    auto check = [&](const char* what, auto make, const Tensor& want, double rel, double abs_tol) {
      Tensor got = empty(out_shape);
      simulate<float>(c.x, c.dims, make(got.data<float>()));
      require_close(got, want, rel, abs_tol, what);
    };
    check("sum", [](float* o) { return SumOp<float, float>{o, false}; }, sum(c.x, c.dims), 1e-6, sum_tol);
    check("mean", [](float* o) { return SumOp<float, float>{o, true}; }, mean(c.x, c.dims), 1e-6,
          sum_tol / double(std::max<int64_t>(n, 1)));
    check("var", [](float* o) { return VarOp<float>{o, 1.0, false}; }, var(c.x, c.dims, 1.0), 1e-5, 1e-6);
    check("std", [](float* o) { return VarOp<float>{o, 0.0, true}; }, mg::std(c.x, c.dims, 0.0), 1e-5, 1e-6);
    check("norm 2", [](float* o) { return NormOp<float>{o, NormKind::Two, 2.f}; }, norm(c.x, 2.0, c.dims), 1e-5, 0);
    check("norm 1", [](float* o) { return NormOp<float>{o, NormKind::One, 1.f}; }, norm(c.x, 1.0, c.dims), 1e-5, 0);
    check("norm 3", [](float* o) { return NormOp<float>{o, NormKind::General, 3.f}; }, norm(c.x, 3.0, c.dims), 1e-5,
          0);
    check("norm 0", [](float* o) { return NormOp<float>{o, NormKind::Zero, 0.f}; }, norm(c.x, 0.0, c.dims), 0, 0);
    check("logsumexp", [](float* o) { return LogSumExpOp<float>{o}; }, logsumexp(c.x, c.dims), 1e-5, 1e-6);
    if (n > 0) {
      check("amax", [](float* o) { return ExtremumOp<float>{o, true}; }, amax(c.x, c.dims), 0, 0);
      check("amin", [](float* o) { return ExtremumOp<float>{o, false}; }, amin(c.x, c.dims), 0, 0);
      check("norm inf", [](float* o) { return NormOp<float>{o, NormKind::Inf, INFINITY}; },
            norm(c.x, INFINITY, c.dims), 0, 0);
    }
    // Factors near 1 (contiguous): every product rounds once, so the bound is n u per side.
    const Tensor factors = mul(c.x, full({1}, 0.01)) + 1.0;
    Tensor got = empty(out_shape);
    simulate<float>(factors, c.dims, ProdOp<float, float>{got.data<float>()});
    require_close(got, prod(factors, c.dims), 2 * double(n) * 0x1p-24 + 0x1p-22, 0, "prod");
  }
}

TEST_CASE("reduce algorithm: integer sums and products wrap exactly as on the CPU", "[cuda][reduce]") {
  const Tensor x = randint(-1000, 1000, {37, 4099});
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{0, 1}}) {
    const Shape out_shape = kept_shape(x, dims);
    Tensor got = empty(out_shape, {.dtype = DType::I64});
    simulate<int64_t>(x, dims, SumOp<int64_t, int64_t>{got.data<int64_t>(), false});
    CHECK(test::values(got) == test::values(sum(x, dims)));
    simulate<int64_t>(x, dims, ProdOp<int64_t, int64_t>{got.data<int64_t>()});
    CHECK(test::values(eq(got, prod(x, dims))) == test::values(ones(out_shape)));
  }
  const Tensor b = gt(randn({1000, 33}), zeros({1}));  // bool columns (scalar loads)
  Tensor got = empty({33}, {.dtype = DType::I64});
  simulate<bool>(b, {0}, SumOp<bool, int64_t>{got.data<int64_t>(), false});
  CHECK(test::values(got) == test::values(sum(b, {0})));
  const Tensor br = gt(randn({33, 1024}), zeros({1}));  // bool rows: 16-byte loads of 16 elements
  simulate<bool>(br, {1}, SumOp<bool, int64_t>{got.data<int64_t>(), false});
  CHECK(test::values(got) == test::values(sum(br, {1})));
}

TEST_CASE("reduce algorithm: NaN and inf propagate as on the CPU", "[cuda][reduce]") {
  Tensor x = randn({5, 300});
  float* p = x.data<float>();
  p[1 * 300 + 17] = NAN;
  p[2 * 300 + 299] = INFINITY;
  p[3 * 300 + 0] = -INFINITY;
  for (int64_t i = 0; i < 300; ++i) p[4 * 300 + i] = -INFINITY;
  auto run = [&](auto make) {
    Tensor got = empty({5});
    simulate<float>(x, {1}, make(got.data<float>()));
    return got;
  };
  auto same = [](const Tensor& a, const Tensor& b) {
    const auto va = test::values(a), vb = test::values(b);
    for (std::size_t i = 0; i < va.size(); ++i) {
      INFO("row " << i << ": " << va[i] << " vs " << vb[i]);
      CHECK(((std::isnan(va[i]) && std::isnan(vb[i])) || std::abs(va[i] - vb[i]) <= 1e-5 * std::abs(vb[i]) ||
             va[i] == vb[i]));
    }
  };
  same(run([](float* o) { return SumOp<float, float>{o, false}; }), sum(x, {1}));
  same(run([](float* o) { return ExtremumOp<float>{o, true}; }), amax(x, {1}));
  same(run([](float* o) { return ExtremumOp<float>{o, false}; }), amin(x, {1}));
  same(run([](float* o) { return LogSumExpOp<float>{o}; }), logsumexp(x, {1}));
  same(run([](float* o) { return VarOp<float>{o, 1.0, false}; }), var(x, {1}, 1.0));
  same(run([](float* o) { return NormOp<float>{o, NormKind::Inf, INFINITY}; }), norm(x, INFINITY, {1}));
  same(run([](float* o) { return NormOp<float>{o, NormKind::NegInf, -INFINITY}; }), norm(x, -INFINITY, {1}));
}

TEST_CASE("cumsum line: the CPU's bits for floats and integers", "[cuda][reduce]") {
  Generator gen(3);
  for (int64_t n : {int64_t(1), int64_t(100), int64_t(128), int64_t(129), int64_t(4097), int64_t(100000)}) {
    const Tensor x = randn({n}, {}, &gen);
    const Tensor want = cumsum(x, 0);
    Tensor got = empty({n});
    cumsum_line<float, float>(x.data<float>(), 1, n, got.data<float>(), 1);
    INFO("n " << n);
    REQUIRE(std::memcmp(got.data<float>(), want.data<float>(), std::size_t(n) * 4) == 0);
    const Tensor h = to(x, DType::F16);
    Tensor got_h = empty({n}, {.dtype = DType::F16});
    cumsum_line<Half, Half>(h.data<Half>(), 1, n, got_h.data<Half>(), 1);
    REQUIRE(std::memcmp(got_h.data<Half>(), cumsum(h, 0).data<Half>(), std::size_t(n) * 2) == 0);
  }
  const Tensor i = randint(-5, 5, {3000});
  Tensor got = empty({3000}, {.dtype = DType::I64});
  cumsum_line<int64_t, int64_t>(i.data<int64_t>(), 1, 3000, got.data<int64_t>(), 1);
  CHECK(test::values(got) == test::values(cumsum(i, 0)));
}

namespace {

// The three kernels of a long-line cumsum (cuda/kernels/cumsum.cu), thread by thread.
template <typename T, typename O = T>
Tensor simulate_parallel_cumsum(const Tensor& x, int64_t dim) {
  using Acc = acc_t<T>;
  const T* data = static_cast<const T*>(x.data_ptr());
  const int64_t size = x.shape()[std::size_t(dim)], x_stride = x.strides()[std::size_t(dim)];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[std::size_t(d)];
  const ReducePlan p = make_reduce_plan(x.shape(), x.strides(), {dim}, int64_t(sizeof(T)),
                                        reinterpret_cast<std::uintptr_t>(data));
  const int64_t lines = p.out_numel;
  const ScanLevels lv = make_scan_levels((size + kReduceLeaf - 1) / kReduceLeaf);
  std::vector<Acc> nodes(std::size_t(lines * lv.total), Acc(-12345));  // poison: every node is written
  for (int64_t t = 0; t < lines * lv.leaves; ++t) {
    const int64_t line = t % lines, leaf = t / lines, l0 = leaf * kReduceLeaf;
    nodes[std::size_t(line * lv.total + leaf)] =
        cumsum_leaf_total(data + p.kept.offset(line), x_stride, l0, std::min(size, l0 + kReduceLeaf));
  }
  for (int b = 1; b < lv.count; ++b) {
    for (int64_t t = 0; t < lines * (lv.leaves >> b); ++t) {
      const int64_t line = t % lines, j = t / lines;
      Acc* n = nodes.data() + line * lv.total;
      n[lv.start[b] + j] = r_add(n[lv.start[b - 1] + 2 * j], n[lv.start[b - 1] + 2 * j + 1]);
    }
  }
  Tensor out = empty(x.shape(), {.dtype = dtype_v<O>});
  O* o = static_cast<O*>(out.data_ptr());
  for (int64_t t = 0; t < lines * lv.leaves; ++t) {
    const int64_t line = t % lines, leaf = t / lines, l0 = leaf * kReduceLeaf;
    const Acc offset = cumsum_leaf_offset(nodes.data() + line * lv.total, lv, leaf);
    cumsum_leaf_scan(data + p.kept.offset(line), x_stride, l0, std::min(size, l0 + kReduceLeaf), offset,
                     o + (line / inner) * size * inner + line % inner, inner);
  }
  return out;
}

}  // namespace

TEST_CASE("cumsum in parallel leaves: the CPU's bits on every layout", "[cuda][reduce]") {
  Generator gen(5);
  for (int64_t n : {int64_t(129), int64_t(256), int64_t(1000), int64_t(4097), int64_t(128 * 64), int64_t(100001)}) {
    const Tensor x = randn({n}, {}, &gen);
    INFO("n " << n);
    const Tensor want = cumsum(x, 0), got = simulate_parallel_cumsum<float>(x, 0);
    REQUIRE(std::memcmp(got.data_ptr(), want.data_ptr(), std::size_t(n) * 4) == 0);
    const Tensor h = to(x, DType::BF16);
    REQUIRE(std::memcmp(simulate_parallel_cumsum<BFloat16>(h, 0).data_ptr(), cumsum(h, 0).data_ptr(),
                        std::size_t(n) * 2) == 0);
    const Tensor d = to(x, DType::F64);
    REQUIRE(std::memcmp(simulate_parallel_cumsum<double>(d, 0).data_ptr(), cumsum(d, 0).data_ptr(),
                        std::size_t(n) * 8) == 0);
  }
  const Tensor a = randn({33, 4097}, {}, &gen), c = randn({5, 300, 7}, {}, &gen);
  const std::vector<std::pair<Tensor, int64_t>> cases = {{a, 0}, {a, 1}, {a.t(), 0}, {a.t(), 1}, {c, 1},
                                                         {c.permute({1, 2, 0}), 0}, {a.slice(1, 0, 4097, 2), 1}};
  for (const auto& [x, dim] : cases) {
    INFO("shape " << shape_str(x.shape()) << " dim " << dim);
    if (x.shape()[std::size_t(dim)] <= kReduceLeaf) continue;
    const Tensor want = cumsum(x, dim), got = simulate_parallel_cumsum<float>(x, dim);
    REQUIRE(std::memcmp(got.data_ptr(), want.data_ptr(), std::size_t(x.numel()) * 4) == 0);
  }
  // Integers and bool (i64 out) take the same kernels: wrapping addition in any order gives the
  // CPU's bits, overflow included.
  for (int64_t n : {int64_t(129), int64_t(4097), int64_t(100001)}) {
    INFO("integer n " << n);
    const Tensor i32 = randint(-1000000000, 1000000000, {n}, {.dtype = DType::I32}, &gen);
    CHECK(test::values(simulate_parallel_cumsum<int32_t, int64_t>(i32, 0)) == test::values(cumsum(i32, 0)));
    Tensor i64 = randint(-1000, 1000, {n}, {.dtype = DType::I64}, &gen);
    i64.data<int64_t>()[n / 2] = std::numeric_limits<int64_t>::max();  // wraps on the way
    const Tensor w64 = simulate_parallel_cumsum<int64_t, int64_t>(i64, 0), c64 = cumsum(i64, 0);
    REQUIRE(std::memcmp(w64.data_ptr(), c64.data_ptr(), std::size_t(n) * 8) == 0);
    const Tensor u8 = randint(0, 256, {n}, {.dtype = DType::U8}, &gen);
    CHECK(test::values(simulate_parallel_cumsum<uint8_t, int64_t>(u8, 0)) == test::values(cumsum(u8, 0)));
    const Tensor b = gt(randn({n}, {}, &gen), scalar_like(0.0, randn({1})));
    CHECK(test::values(simulate_parallel_cumsum<bool, int64_t>(b, 0)) == test::values(cumsum(b, 0)));
  }
  const Tensor m = randint(-100, 100, {7, 300}, {.dtype = DType::I32}, &gen);
  CHECK(test::values(simulate_parallel_cumsum<int32_t, int64_t>(m.t(), 0)) == test::values(cumsum(m.t(), 0)));
}

TEST_CASE("CUDA reductions cover the CPU's dtypes", "[cuda][reduce][registry]") {
  init();
  if (!cuda::built_with_cuda()) return;
  for (OpId op : {OpId::sum, OpId::mean, OpId::prod, OpId::amax, OpId::amin, OpId::max_dim, OpId::min_dim,
                  OpId::argmax, OpId::argmin, OpId::var, OpId::std, OpId::norm, OpId::logsumexp, OpId::cumsum}) {
    for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool}) {
      INFO(op_name(op) << " " << dtype_name(dt));
      CHECK(has_kernel(op, DeviceType::CUDA, dt) == has_kernel(op, DeviceType::CPU, dt));
    }
  }
}

TEST_CASE("reduce algorithm: norms take |-0| as +0, as the CPU's std::abs", "[cuda][reduce]") {
  // With |-0| = -0, a negative odd p gives pow(-0, -1) = -inf next to +inf from +0: NaN.
  Tensor x = from_vector(std::vector<double>{0.0, -0.0, 1.0, -0.0, 1.0, 2.0}).reshape({2, 3}).to(DType::F32);
  for (const double p : {-1.0, -3.0}) {
    Tensor got = empty({2});
    simulate<float>(x, {1}, NormOp<float>{got.data<float>(), NormKind::General, float(p)});
    const Tensor want = norm(x, p, {1});
    const auto g = test::values(got), w = test::values(want);
    for (std::size_t i = 0; i < g.size(); ++i) {
      INFO("p " << p << " row " << i);
      CHECK(g[i] == w[i]);
      CHECK(std::signbit(g[i]) == std::signbit(w[i]));
    }
  }
  Tensor got = empty({2});
  simulate<float>(x, {1}, NormOp<float>{got.data<float>(), NormKind::NegInf, -INFINITY});
  const auto g = test::values(got), w = test::values(norm(x, -INFINITY, {1}));
  CHECK(g[0] == w[0]);
  CHECK_FALSE(std::signbit(g[0]));  // min |x| of a row with +0 and -0: +0
  CHECK(std::signbit(g[0]) == std::signbit(w[0]));
}
