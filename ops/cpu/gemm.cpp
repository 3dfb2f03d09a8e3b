// The CPU GEMM driver (see ops/cpu/gemm.h): strided operands passed to oneDNN or Eigen without
// copies where the layout allows it, and batches run either in parallel (batch >= threads) or one
// GEMM at a time on the library's own threads.
//
// Decision: f32 and bf16 products of at least 32^3 multiply-adds run oneDNN's BLAS-like GEMM
// (dnnl_sgemm; dnnl_gemm_bf16bf16f32 on AMX with f32 accumulators, the f32 result rounded to bf16
// once; on processors without AMX bf16 is converted to f32 like f16, measured faster below); f64
// and smaller products run Eigen; f16 is converted to f32 and runs the f32 GEMM. Some shapes run
// oneDNN's matmul primitive instead, where it measured faster (bf16 on AMX, and on AMD's
// AVX512-BF16 from 2 threads on; f32 weight gradients at aliasing strides:
// ops/cpu/onednn_matmul.cpp).
// Measured on 2 threads, oneDNN vs Eigen f32 alternately in one process, GFLOP/s (ranges over
// runs on the shared host):
//   2048^3                                      f32 237-318 vs 171-268    bf16 597-1380
//   [4096,256] @ [1024,256]^T (BERT-mini FFN)       234-240 vs 152-173         314-410
//   [16,144] @ [144,784] on each thread (conv)      231-236 vs 137-141
//   [16,100352] @ [100352,144]^T (conv dW)           54-65  vs  40-43
//   32^3 about equal, 16^3 15 vs 35, 4^3 0.3 vs 2 (oneDNN costs ~0.4 us a call)
// Through mg::matmul at 2048^3 (bench_ops): f32 167-185 -> 215-254, bf16 134-162 -> 551-577.
//
// On an AVX2-only processor (AMD Zen 3, 1 thread, bench_gemm and torch_gemm_peer.py on the MLP and
// BERT-mini GEMM shapes, GFLOP/s): oneDNN's matmul primitive runs the same jit sgemm there
// ("gemm:jit", equal to dnnl_sgemm within noise, its bias post-op no faster than beta = 1) and has no
// bf16 implementation at all; PyTorch's f32 mm (MKL) is within noise of dnnl_sgemm (38-90 vs
// 53-95) except where sgemm suffers the leading-dimension aliasing fixed below (pad_for_aliasing_*);
// its bf16 mm runs at 1-25. So f32 stays on dnnl_sgemm and bf16 is converted to f32 (the
// conversions cost 0-10% at k >= 256; a cache of converted weights measured no clear gain in
// bench_gemm's "bf16c32" column).
//
// On a Xeon with AVX512-BF16 and AVX512-FP16 but no AMX exposed (Intel family 6 model 207 in a VM,
// oneDNN ISA avx512_core_bf16; 1 thread, throwaway probe through mg::matmul, best of 5x3 calls,
// two runs, 2026-12-03), GFLOP/s f32 / bf16 on oneDNN's bf16 GEMM / bf16 converted to f32 for
// dnnl_sgemm:
//   MLP  256x784 @ 784x1024 120-125 / 71-73 / 109-126, dW 1024x256^T @ 256x1024 129-146 / 73-74 /
//        125-131, head 256x1024 @ 1024x10 53-80 / 20-24 / 53-54
//   BERT-mini FFN up 4096x256 @ 256x1024 133-139 / 72-75 / 123-126, FFN down 4096x1024 @ 1024x256
//        118-145 / 73-80 / 101-137, decoder 4096x256 @ 256x8192 137-149 / 72 / 116-123, its dW
//        8192x4096^T @ 4096x256 88-100 / 69-71 / 80-87, its dX 4096x8192 @ 8192x256 140-152 / 77-78 /
//        115-123
// (oneDNN's matmul primitive ran the bf16 shapes no faster than its bf16 GEMM, 36-80; PyTorch 2.15's
// bf16 mm 66-81, its f32 mm 95-147). oneDNN's bf16 GEMM reaches about half the GFLOP/s of its f32
// GEMM there, so bf16 runs the native GEMM only where oneDNN has AMX.
#include "mixgrad/ops/cpu/gemm.h"

// gcc 12 reports false -Wmaybe-uninitialized warnings inside its AVX-512 intrinsics when inlining
// Eigen's GEMM kernels; they are not about this file's code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/cpu/onednn_matmul.h"

// oneDNN 2.6 exports its bf16 GEMM (row-major, like dnnl_sgemm) but declares it only in its own
// tests; mg::BFloat16 has the same 16-bit layout as its bfloat16_t.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                               dnnl_dim_t K, float alpha, const mg::BFloat16* A,
                                               dnnl_dim_t lda, const mg::BFloat16* B, dnnl_dim_t ldb,
                                               float beta, float* C, dnnl_dim_t ldc);

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


// One scratch buffer of at least the size asked for, its storage from the CPU caching allocator
// (core/storage.cpp) and not value-initialised. Measured: as a std::vector, a released large
// buffer (the padded copy of BERT-mini's decoder dY^T, 134 MB) came back as fresh pages and was
// zero-filled by resize() before the copy, on every call; page faults were about 12% of the
// samples of a BERT-mini O0 step (perf, 1 thread).
template <typename C>
class ScratchBuf {
 public:
  void resize(std::size_t n) {
    if (n <= size_) return;
    t_ = empty({int64_t(n)}, {.dtype = dtype_v<C>});  // [n]
    size_ = n;
  }
  C* data() { return t_.defined() ? t_.data<C>() : nullptr; }
  C& operator[](std::size_t i) { return data()[i]; }
  std::size_t capacity() const { return size_; }
  // Back to the caching allocator, which hands the same block to the next call of this size.
  void release() {
    t_ = Tensor();
    size_ = 0;
  }

 private:
  Tensor t_;
  std::size_t size_ = 0;
};

// Returns an operand in compute type C. When T == C and the layout maps onto Eigen, the operand
// itself; otherwise a dense copy in `buf` (converted to f32 for f16/bf16, with the bulk
// converters where rows or columns are contiguous). With `pad` > 0 a row- or col-major operand is
// always copied, with a leading dimension `pad` elements longer than dense (see pad_for_aliasing).
template <typename T, typename C>
MatRef<C> load(const T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, ScratchBuf<C>& buf,
               int64_t pad = 0) {
  int64_t ld = 0;
  const bool row = as_row_major(rows, cols, rs, cs, ld);
  const bool col = !row && as_col_major(rows, cols, rs, cs, ld);
  // Dense leading dimension of a copy, and the number of lines it holds.
  const int64_t dld = (row ? cols : rows) + ((row || col) ? pad : 0), lines = row ? rows : cols;
  if constexpr (std::is_same_v<T, C>) {
    if (row && pad == 0) return {p, Layout::Row, ld};
    if (col && pad == 0) return {p, Layout::Col, ld};
    if (row || col) {
      // A copy with a longer leading dimension, line by line.
      const int64_t len = row ? cols : rows;
      buf.resize(std::size_t(dld * lines));
      for (int64_t j = 0; j < lines; ++j) std::copy(p + j * ld, p + j * ld + len, buf.data() + j * dld);
      return {buf.data(), row ? Layout::Row : Layout::Col, dld};
    }
    // General strides (a step slice, a broadcast row): copy into a dense row-major matrix.
    buf.resize(std::size_t(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) buf[std::size_t(i * cols + j)] = p[i * rs + j * cs];
    }
    return {buf.data(), Layout::Row, cols};
  } else {
    if (row || col) {
      const int64_t len = row ? cols : rows;
      buf.resize(std::size_t(dld * lines));
      C* d = buf.data();
      if (ld == len && dld == len) {
        load_f32(p, d, rows * cols);
      } else {
        for (int64_t j = 0; j < lines; ++j) load_f32(p + j * ld, d + j * dld, len);
      }
      return {d, row ? Layout::Row : Layout::Col, dld};
    }
    buf.resize(std::size_t(rows * cols));
    C* d = buf.data();
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

// out[n, m] (dense row-major f32) = alpha * A @ B + beta * out through oneDNN's row-major API,
// where a Col-layout operand is the transpose of a row-major one. out is not read when beta == 0.
// Inside a parallel region oneDNN runs on the calling thread only (it checks omp_in_parallel, as
// Eigen does); otherwise it uses omp_get_max_threads() threads of the same OpenMP runtime.
template <typename T>
void onednn_gemm(const MatRef<T>& a, const MatRef<T>& b, float* out, int64_t n, int64_t k, int64_t m,
                 float alpha, float beta) {
  const char ta = a.layout == Layout::Row ? 'N' : 'T';
  const char tb = b.layout == Layout::Row ? 'N' : 'T';
  dnnl_status_t st;
  if constexpr (std::is_same_v<T, float>) {
    st = dnnl_sgemm(ta, tb, n, m, k, alpha, a.p, a.ld, b.p, b.ld, beta, out, m);
  } else {
    st = dnnl_gemm_bf16bf16f32(ta, tb, n, m, k, alpha, a.p, a.ld, b.p, b.ld, beta, out, m);
  }
  MG_ASSERT(st == dnnl_success, "oneDNN gemm (", ta, tb, " [", n, ", ", k, "] @ [", k, ", ", m, "], lda ",
            a.ld, ", ldb ", b.ld, ") returned ", dnnl_status2str(st));
}

// Whether oneDNN has a native bf16 GEMM on this processor. oneDNN 2.6 implements
// dnnl_gemm_bf16bf16f32 only from avx512_core up (AVX512-BF16 and AMX run it natively); on an
// AVX2-only processor it answers dnnl_unimplemented, so bf16 products there are converted to f32 and
// run the f32 GEMM: the same products, f32 accumulation and one rounding, only the summation order
// differs. Probed once with a 1x1x1 product.
bool probe_onednn_bf16_gemm() {
  const mg::BFloat16 one(1.0f);
  float c = 0.0f;
  return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == dnnl_success && c == 1.0f;
}

// Products with fewer multiply-adds than this stay on Eigen, where oneDNN's per-call cost (about
// 0.4 us) would dominate.
constexpr int64_t kOnednnMinWork = 32 * 32 * 32;

// The paths in use: -1 while detection rules, else the bits of a forced GemmPaths.
std::atomic<int> g_forced_paths{-1};
constexpr int kBf16Native = 1, kPadAliased = 2, kBf16Matmul = 4, kF32Matmul = 8;

// The leading-dimension padding (in elements) that oneDNN's AVX2 sgemm wants for its operands: 16
// floats where it runs about 2x slower because the lines it reads lie a multiple of 1-2 KiB apart
// and fall into the same cache sets, 0 otherwise. The copy costs one move per element of the
// operand against 2 n k m flops. Two cases, measured (1 thread, process CPU time, dnnl_sgemm on
// operands allocated with and without the padding, best of 3-15 alternating, GFLOP/s):
// - `a` ([n, k]) col-major (transposed: a weight gradient dY^T @ x) with a leading dimension that
//   is a multiple of 512 floats, or of 256 floats when k >= 2048, and m < 512 (wider products run
//   another blocking that is not affected):
//     dW of BERT-mini's decoder [8192,4096]^T @ [4096,256]  35 -> 60 (2 threads 32 -> 58)
//     dW of its FFN-up 1024x4096x256                         35 -> 68 (2 threads 37 -> 68)
//     dW of its attention projections 256x4096x256 (ld 256)  61 -> 77
//     1024x1024xm for m = 64 / 128 / 256 / 512 / 1024        40/37/38/78/81 -> 63/66/76/81/78
//     n x 1024 x 256 for n = 256 / 768 / 1000 / 1536 / 2048  66/64/69/58/32 -> 63/64/76/68/59
// - `b` ([k, m]) row-major (a plain weight or activation) with a leading dimension that is a
//   multiple of 256 floats and k >= 512:
//     the MLP's hidden-layer dX 256x1024x1024 NN              42-44 -> 76-94
//     BERT-mini's FFN-down dW 256x4096x1024 TN                38 -> 79
//     256x512x1024 / 128x1024x1024 / 256x2048x512 NN        44/44/63 -> 91/96/93
//     its FFN-down dX 4096x1024x256 NN                       79-80 -> 86-89
//     with both operands padded: decoder dW 64 -> 82, attention dW 77 -> 85
//     unaffected (within noise): 1024x1024x1024 and 4096x1024x1024 NN, 4096x8192x256 NN
int64_t pad_for_aliasing_a(const GemmPaths& paths, bool a_col_major, int64_t ld, int64_t n, int64_t k, int64_t m) {
  if (!paths.pad_aliased || !a_col_major || n * k * m < kOnednnMinWork || m >= 512) return 0;
  return (ld % 512 == 0 || (ld % 256 == 0 && k >= 2048)) ? 16 : 0;
}
int64_t pad_for_aliasing_b(const GemmPaths& paths, bool b_row_major, int64_t ld, int64_t n, int64_t k, int64_t m) {
  if (!paths.pad_aliased || !b_row_major || n * k * m < kOnednnMinWork) return 0;
  return (ld % 256 == 0 && k >= 512) ? 16 : 0;
}

// Whether `a` ([rows, cols] with strides (rs, cs)) reaches the GEMM col-major without a copy.
bool col_major_view(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t& ld) {
  return !as_row_major(rows, cols, rs, cs, ld) && as_col_major(rows, cols, rs, cs, ld);
}

// out[n, m] (dense row-major) = alpha * A @ B, or += when `accumulate`, in C = float or double.
// Every f32 product (f32, f16, small bf16) goes through here, so an f16 GEMM equals the f32 GEMM
// of the same values rounded once.
template <typename C>
void gemm_compute(const MatRef<C>& a, const MatRef<C>& b, C* out, int64_t n, int64_t k, int64_t m, C alpha,
                  bool accumulate) {
  if constexpr (std::is_same_v<C, float>) {
    if (n * k * m >= kOnednnMinWork) {
      const float beta = accumulate ? 1.0f : 0.0f;
      // Products whose transposed operand (dY^T of a weight gradient, W^T of a forward) sgemm reads
      // at aliasing strides run the matmul primitive (ops/cpu/onednn_matmul.cpp); it declines
      // shapes it has no brgemm kernel for.
      const bool a_col = a.layout == Layout::Col;
      if (gemm_paths().f32_matmul && matmul_f32_picks(a_col, a.ld, b.layout == Layout::Col, b.ld, n, k, m) &&
          matmul_f32(a.p, a_col, a.ld, b.p, b.layout == Layout::Col, b.ld, out, n, k, m, alpha, beta)) {
        return;
      }
      onednn_gemm<float>(a, b, out, n, k, m, alpha, beta);
      return;
    }
  }
  eigen_gemm<C>(a, b, out, n, k, m, alpha, accumulate);
}

// Per-thread scratch, reused across calls (batch-parallel calls each use their own thread's).
template <typename C>
struct Scratch {
  ScratchBuf<C> a, b, out;
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
  for (ScratchBuf<C>* v : {&s.a, &s.b, &s.out}) {
    if (v->capacity() > kKeepScratch) v->release();
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

// o[n, m] (dense, compute type C) = beta * c: the accumulator the GEMM then adds alpha * a @ b to.
template <typename T, typename C>
void load_beta_c(const GemmProblem& p, const T* c, C* o) {
  const C beta = static_cast<C>(p.beta);
  for_rows(p.n, p.m, [&](int64_t i) {
    for (int64_t j = 0; j < p.m; ++j) o[i * p.m + j] = beta * static_cast<C>(c[i * p.c.rs + j * p.c.cs]);
  });
}

// One matrix: out = beta * c + alpha * a @ b, out in T (rounded once) or, for gemm_acc, in the
// accumulation type O = acc_t<T> (f16/bf16 sums then stay in f32, unrounded).
template <typename T, typename O>
void gemm_one(const GemmProblem& p, const T* a, const T* b, const T* c, O* out) {
  const int64_t n = p.n, k = p.k, m = p.m;
  const bool use_c = c != nullptr && p.beta != 0.0;
  const GemmPaths paths = gemm_paths();
  int64_t lda = 0;
  const bool a_col = col_major_view(n, k, p.a.rs, p.a.cs, lda);
  const int64_t a_pad = pad_for_aliasing_a(paths, a_col, lda, n, k, m);
  int64_t ldb = 0;
  const bool b_row = as_row_major(k, m, p.b.rs, p.b.cs, ldb);
  const int64_t b_pad = pad_for_aliasing_b(paths, b_row, ldb, n, k, m);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    Scratch<T>& s = scratch<T>();
    const MatRef<T> A = load<T, T>(a, n, k, p.a.rs, p.a.cs, s.a, std::is_same_v<T, float> ? a_pad : 0);
    const MatRef<T> B = load<T, T>(b, k, m, p.b.rs, p.b.cs, s.b, std::is_same_v<T, float> ? b_pad : 0);
    if (use_c) load_beta_c(p, c, out);
    gemm_compute<T>(A, B, out, n, k, m, static_cast<T>(p.alpha), use_c);
    release_if_large(s);
  } else {
    // f16/bf16: f32 accumulation into f32 scratch, beta * c added in f32, one rounding on store.
    Scratch<float>& s = scratch<float>();
    float* o = nullptr;
    if constexpr (std::is_same_v<O, float>) {
      o = out;  // gemm_acc: the f32 sums are the result
    } else {
      s.out.resize(std::size_t(n * m));
      o = s.out.data();
    }
    if (use_c) load_beta_c(p, c, o);
    const bool bf16_onednn = std::is_same_v<T, BFloat16> && n * k * m >= kOnednnMinWork && paths.bf16_native;
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (bf16_onednn) {
        // bf16 operands go to oneDNN as they are (AMX tiles, f32 accumulators). The products are
        // exact in f32 but summed in another order than the f32 GEMM's (pairs first, and K may be
        // split over threads), so the f32 sums can differ from it in their last bits.
        Scratch<T>& h = scratch<T>();
        const MatRef<T> A = load<T, T>(a, n, k, p.a.rs, p.a.cs, h.a);
        const MatRef<T> B = load<T, T>(b, k, m, p.b.rs, p.b.cs, h.b);
        const bool a_col = A.layout == Layout::Col;
        const float alpha = static_cast<float>(p.alpha), beta = use_c ? 1.0f : 0.0f;
        if (!(paths.bf16_matmul && matmul_bf16_picks(a_col, n, k, m) &&
              matmul_bf16(A.p, a_col, A.ld, B.p, B.layout == Layout::Col, B.ld, o, n, k, m, alpha, beta))) {
          onednn_gemm<T>(A, B, o, n, k, m, alpha, beta);
        }
        release_if_large(h);
      }
    }
    if (!bf16_onednn) {
      // f16 (and small bf16, or any bf16 without a native bf16 GEMM) operands converted to f32:
      // the f32 GEMM of the same values (operands converted with the padded leading dimension the
      // AVX2 sgemm wants: no extra pass).
      const MatRef<float> A = load<T, float>(a, n, k, p.a.rs, p.a.cs, s.a, a_pad);
      const MatRef<float> B = load<T, float>(b, k, m, p.b.rs, p.b.cs, s.b, b_pad);
      gemm_compute<float>(A, B, o, n, k, m, static_cast<float>(p.alpha), use_c);
    }
    if constexpr (!std::is_same_v<O, float>) store_f32(o, out, n * m);
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

bool onednn_bf16_gemm_available() {
  static const bool available = probe_onednn_bf16_gemm();
  return available;
}

GemmPaths gemm_detected_paths() {
  // AVX2's sgemm gets the padded copies for its aliasing strides; avx512_core and up run other
  // sgemm kernels, whose measured aliasing cases (a transposed dY or W) the f32 matmul primitive
  // takes.
  const bool avx512_sgemm = onednn_f32_brgemm_available();
  // Native bf16 where the processor's bf16 dot products outrun its f32 FMAs (AMX; AMD's
  // AVX512-BF16): elsewhere oneDNN's bf16 GEMM measured slower than converting to f32 for its sgemm.
  // The matmul primitive's bf16 shapes (matmul_bf16_picks) were measured where bf16 is native.
  static const bool native_bf16 = onednn_bf16_gemm_available() && native_bf16_preferred();
  return {.bf16_native = native_bf16, .pad_aliased = !avx512_sgemm, .bf16_matmul = native_bf16,
          .f32_matmul = avx512_sgemm};
}

GemmPaths gemm_paths() {
  const int forced = g_forced_paths.load(std::memory_order_relaxed);
  if (forced < 0) return gemm_detected_paths();
  return {.bf16_native = (forced & kBf16Native) != 0 && onednn_bf16_gemm_available(),
          .pad_aliased = (forced & kPadAliased) != 0,
          .bf16_matmul = (forced & kBf16Matmul) != 0 && gemm_detected_paths().bf16_matmul,
          .f32_matmul = (forced & kF32Matmul) != 0 && gemm_detected_paths().f32_matmul};
}

void gemm_force_paths(const std::optional<GemmPaths>& paths) {
  g_forced_paths.store(paths ? (paths->bf16_native ? kBf16Native : 0) | (paths->pad_aliased ? kPadAliased : 0) |
                                   (paths->bf16_matmul ? kBf16Matmul : 0) | (paths->f32_matmul ? kF32Matmul : 0)
                             : -1,
                       std::memory_order_relaxed);
}

namespace {

// The batch loop of gemm (O = T) and gemm_acc (O = acc_t<T>).
template <typename T, typename O>
void gemm_batched(const GemmProblem& problem) {
  GemmProblem p = problem;
  fold_batch(p);
  const int64_t batch = shape_numel(p.batch);
  if (batch == 0 || p.n == 0 || p.m == 0) return;
  const T* a = static_cast<const T*>(p.a.ptr);
  const T* b = static_cast<const T*>(p.b.ptr);
  const T* c = static_cast<const T*>(p.c.ptr);
  O* out = static_cast<O*>(p.out);
  if (batch == 1) {
    gemm_one<T, O>(p, a, b, c, out);
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
      gemm_one<T, O>(p, a + oa[u], b + ob[u], c ? c + oc[u] : nullptr, out + i * out_stride);
    }
  };
  // Enough matrices for every thread: one GEMM per thread at a time (oneDNN and Eigen see they are
  // inside a parallel region and stay single-threaded). Otherwise one at a time, each on all
  // threads.
  if (num_threads() > 1 && batch >= num_threads()) {
    parallel_for(0, batch, 1, body);
  } else {
    body(0, batch);
  }
}

}  // namespace

template <typename T>
void gemm(const GemmProblem& p) {
  gemm_batched<T, T>(p);
}
template <typename T>
void gemm_acc(const GemmProblem& p) {
  gemm_batched<T, acc_t<T>>(p);
}

template void gemm<double>(const GemmProblem&);
template void gemm<float>(const GemmProblem&);
template void gemm<Half>(const GemmProblem&);
template void gemm<BFloat16>(const GemmProblem&);
template void gemm_acc<double>(const GemmProblem&);
template void gemm_acc<float>(const GemmProblem&);
template void gemm_acc<Half>(const GemmProblem&);
template void gemm_acc<BFloat16>(const GemmProblem&);

}  // namespace mg::cpu
