// The CPU GEMM driver (see ops/cpu/gemm.h): strided operands mapped into Eigen without copies
// where the layout allows it, f16/bf16 through f32 scratch with one rounding of the output, and
// batches run either in parallel (batch >= threads) or one GEMM at a time with Eigen's own
// threads.
#include "ops/cpu/gemm.h"

// gcc 12 reports false -Wmaybe-uninitialized warnings inside its AVX-512 intrinsics when inlining
// Eigen's GEMM kernels; they are not about this file's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <algorithm>
#include <vector>

#include "core/convert.h"
#include "core/half.h"
#include "core/parallel.h"

namespace mg::cpu {
namespace {

template <typename C>
using RowMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename C>
using ColMat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using OStride = Eigen::OuterStride<>;

enum class Layout { Row, Col };

// A dense-enough matrix in the compute type: element (i, j) at p[i * ld + j] (Row) or
// p[i + j * ld] (Col).
template <typename C>
struct MatRef {
  const C* p;
  Layout layout;
  int64_t ld;
};

// Whether a [rows, cols] operand with strides (rs, cs) maps onto an Eigen row-major or col-major
// Map with an outer stride; sets `ld` when it does. Strides of size-1 dims do not matter.
bool as_row_major(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t& ld) {
  if (!(cols == 1 || cs == 1) || !(rows == 1 || rs >= cols)) return false;
  ld = rows == 1 ? cols : rs;
  return true;
}
bool as_col_major(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t& ld) {
  if (!(rows == 1 || rs == 1) || !(cols == 1 || cs >= rows)) return false;
  ld = cols == 1 ? rows : cs;
  return true;
}

// ---- bulk conversion into f32 (identity for f32/f64 is never called) ----
inline void to_f32(const Half* src, float* dst, int64_t n) { convert_f16_to_f32(src, dst, n); }
inline void to_f32(const BFloat16* src, float* dst, int64_t n) { convert_bf16_to_f32(src, dst, n); }
inline void from_f32(const float* src, Half* dst, int64_t n) { convert_f32_to_f16(src, dst, n); }
inline void from_f32(const float* src, BFloat16* dst, int64_t n) { convert_f32_to_bf16(src, dst, n); }

// Returns an operand in compute type C. When T == C and the layout maps onto Eigen, the operand
// itself; otherwise a dense copy in `buf` (converted to f32 for f16/bf16, with the bulk
// converters where rows or columns are contiguous).
template <typename T, typename C>
MatRef<C> load(const T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, std::vector<C>& buf) {
  int64_t ld = 0;
  const bool row = as_row_major(rows, cols, rs, cs, ld);
  const bool col = !row && as_col_major(rows, cols, rs, cs, ld);
  if constexpr (std::is_same_v<T, C>) {
    if (row) return {p, Layout::Row, ld};
    if (col) return {p, Layout::Col, ld};
    // General strides (a step slice, a broadcast row): copy into a dense row-major matrix.
    buf.resize(std::size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) buf[std::size_t(i * cols + j)] = p[i * rs + j * cs];
    }
    return {buf.data(), Layout::Row, cols};
  } else {
    buf.resize(std::size_t(rows * cols));
    C* d = buf.data();
    if (row) {
      if (ld == cols) {
        to_f32(p, d, rows * cols);
      } else {
        for (int64_t i = 0; i < rows; ++i) to_f32(p + i * ld, d + i * cols, cols);
      }
      return {d, Layout::Row, cols};
    }
    if (col) {
      if (ld == rows) {
        to_f32(p, d, rows * cols);
      } else {
        for (int64_t j = 0; j < cols; ++j) to_f32(p + j * ld, d + j * rows, rows);
      }
      return {d, Layout::Col, rows};
    }
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) d[i * cols + j] = static_cast<float>(p[i * rs + j * cs]);
    }
    return {d, Layout::Row, cols};
  }
}

// out[n, m] (dense row-major) = alpha * A @ B, or += when `accumulate`. C is float or double.
template <typename C>
void eigen_gemm(const MatRef<C>& a, const MatRef<C>& b, C* out, int64_t n, int64_t k, int64_t m, C alpha,
                bool accumulate) {
  Eigen::Map<RowMat<C>, 0, OStride> o(out, n, m, OStride(m));
  if (k == 0) {
    if (!accumulate) o.setZero();
    return;
  }
  auto run = [&](const auto& A, const auto& B) {
    if (accumulate) {
      o.noalias() += alpha * A * B;
    } else {
      o.noalias() = alpha * A * B;
    }
  };
  using RowMap = Eigen::Map<const RowMat<C>, 0, OStride>;
  using ColMap = Eigen::Map<const ColMat<C>, 0, OStride>;
  if (a.layout == Layout::Row) {
    const RowMap A(a.p, n, k, OStride(a.ld));
    if (b.layout == Layout::Row) {
      run(A, RowMap(b.p, k, m, OStride(b.ld)));
    } else {
      run(A, ColMap(b.p, k, m, OStride(b.ld)));
    }
  } else {
    const ColMap A(a.p, n, k, OStride(a.ld));
    if (b.layout == Layout::Row) {
      run(A, RowMap(b.p, k, m, OStride(b.ld)));
    } else {
      run(A, ColMap(b.p, k, m, OStride(b.ld)));
    }
  }
}

// Per-thread scratch, reused across calls (batch-parallel calls each use their own thread's).
template <typename C>
struct Scratch {
  std::vector<C> a, b, out;
};
template <typename C>
Scratch<C>& scratch() {
  thread_local Scratch<C> s;
  return s;
}

// Scratch beyond this many elements per buffer is given back after use rather than kept.
constexpr std::size_t kKeepScratch = std::size_t(1) << 22;
template <typename C>
void release_if_large(Scratch<C>& s) {
  for (std::vector<C>* v : {&s.a, &s.b, &s.out}) {
    if (v->capacity() > kKeepScratch) std::vector<C>().swap(*v);
  }
}

// Runs row(i) for i in [0, rows) on the worker threads when the matrix is large (inline when
// already inside a batch-parallel region).
template <typename F>
void for_rows(int64_t rows, int64_t cols, const F& row) {
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) row(i);
  });
}

// One matrix: out = beta * c + alpha * a @ b.
template <typename T>
void gemm_one(const GemmProblem& p, const T* a, const T* b, const T* c, T* out) {
  const int64_t n = p.n, k = p.k, m = p.m;
  const bool use_c = c != nullptr && p.beta != 0.0;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    Scratch<T>& s = scratch<T>();
    const MatRef<T> A = load<T, T>(a, n, k, p.a.rs, p.a.cs, s.a);
    const MatRef<T> B = load<T, T>(b, k, m, p.b.rs, p.b.cs, s.b);
    if (use_c) {
      const T beta = static_cast<T>(p.beta);
      for_rows(n, m, [&](int64_t i) {
        for (int64_t j = 0; j < m; ++j) out[i * m + j] = beta * c[i * p.c.rs + j * p.c.cs];
      });
    }
    eigen_gemm<T>(A, B, out, n, k, m, static_cast<T>(p.alpha), use_c);
    release_if_large(s);
  } else {
    // f16/bf16: f32 operands, f32 accumulation, beta * c added in f32, one rounding on store.
    Scratch<float>& s = scratch<float>();
    const MatRef<float> A = load<T, float>(a, n, k, p.a.rs, p.a.cs, s.a);
    const MatRef<float> B = load<T, float>(b, k, m, p.b.rs, p.b.cs, s.b);
    s.out.resize(std::size_t(n * m));
    float* o = s.out.data();
    if (use_c) {
      const float beta = static_cast<float>(p.beta);
      for_rows(n, m, [&](int64_t i) {
        for (int64_t j = 0; j < m; ++j) o[i * m + j] = beta * static_cast<float>(c[i * p.c.rs + j * p.c.cs]);
      });
    }
    eigen_gemm<float>(A, B, o, n, k, m, static_cast<float>(p.alpha), use_c);
    from_f32(o, out, n * m);
    release_if_large(s);
  }
}

// Folds the batch into the rows (one big GEMM instead of many small ones) when b and c do not
// vary over the batch and a's batch dims and rows merge into one row stride: x[B, T, in] @ W.
void fold_batch(GemmProblem& p) {
  const int64_t batch = shape_numel(p.batch);
  if (p.batch.empty() || batch <= 1) return;
  if (!(p.a.cs == 1 || p.k == 1)) return;
  const std::size_t nd = p.batch.size();
  for (std::size_t d = 0; d < nd; ++d) {
    if (p.batch[d] == 1) continue;
    if (p.b.batch_strides[d] != 0) return;
    if (p.c.ptr && p.c.batch_strides[d] != 0) return;
  }
  if (p.c.ptr && p.n > 1 && p.c.rs != 0) return;
  // (size, stride) of a's batch dims and rows, size-1 dims left out.
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (std::size_t d = 0; d < nd; ++d) {
    if (p.batch[d] != 1) dims.push_back({p.batch[d], p.a.batch_strides[d]});
  }
  if (p.n != 1) dims.push_back({p.n, p.a.rs});
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    if (dims[i].second != dims[i + 1].second * dims[i + 1].first) return;
  }
  p.a.rs = dims.back().second;
  p.n *= batch;
  p.c.rs = 0;
  p.batch.clear();
  p.a.batch_strides.clear();
  p.b.batch_strides.clear();
  p.c.batch_strides.clear();
}

}  // namespace

template <typename T>
void gemm(const GemmProblem& problem) {
  GemmProblem p = problem;
  fold_batch(p);
  const int64_t batch = shape_numel(p.batch);
  if (batch == 0 || p.n == 0 || p.m == 0) return;
  const T* a = static_cast<const T*>(p.a.ptr);
  const T* b = static_cast<const T*>(p.b.ptr);
  const T* c = static_cast<const T*>(p.c.ptr);
  T* out = static_cast<T*>(p.out);
  if (batch == 1) {
    gemm_one<T>(p, a, b, c, out);
    return;
  }
  // Element offsets of every batch entry (odometer over the batch shape).
  const std::size_t nd = p.batch.size();
  const std::size_t count = static_cast<std::size_t>(batch);
  std::vector<int64_t> oa(count), ob(count), oc(count);
  std::vector<int64_t> idx(nd, 0);
  int64_t xa = 0, xb = 0, xc = 0;
  for (int64_t i = 0; i < batch; ++i) {
    oa[std::size_t(i)] = xa;
    ob[std::size_t(i)] = xb;
    oc[std::size_t(i)] = xc;
    for (std::size_t d = nd; d-- > 0;) {
      const int64_t sc = c ? p.c.batch_strides[d] : 0;
      if (++idx[d] < p.batch[d]) {
        xa += p.a.batch_strides[d];
        xb += p.b.batch_strides[d];
        xc += sc;
        break;
      }
      xa -= (p.batch[d] - 1) * p.a.batch_strides[d];
      xb -= (p.batch[d] - 1) * p.b.batch_strides[d];
      xc -= (p.batch[d] - 1) * sc;
      idx[d] = 0;
    }
  }
  const int64_t out_stride = p.n * p.m;
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const std::size_t u = std::size_t(i);
      gemm_one<T>(p, a + oa[u], b + ob[u], c ? c + oc[u] : nullptr, out + i * out_stride);
    }
  };
  // Enough matrices for every thread: one GEMM per thread at a time (Eigen sees it is inside a
  // parallel region and stays single-threaded). Otherwise one at a time, each on Eigen's threads.
  if (num_threads() > 1 && batch >= num_threads()) {
    parallel_for(0, batch, 1, body);
  } else {
    body(0, batch);
  }
}

template void gemm<double>(const GemmProblem&);
template void gemm<float>(const GemmProblem&);
template void gemm<Half>(const GemmProblem&);
template void gemm<BFloat16>(const GemmProblem&);

}  // namespace mg::cpu
