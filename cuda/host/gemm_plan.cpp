// The cuBLASLt plan of a GemmProblem (cuda/host/gemm_plan.h): fold, layouts, batch, c and compute
// type. Plain C++: no CUDA header, built and tested in every build.
#include "mixgrad/cuda/host/gemm_plan.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "mixgrad/core/error.h"

namespace mg::cuda {
namespace {

// The column-major view of a [R, C] matrix whose element (r, c) lives at r * sr + c * sc: stored
// as is (unit row stride, columns ld >= R apart: op N) or as its transpose (unit column stride,
// rows ld >= C apart: op T). Strides of size-1 dims do not matter. False when neither fits.
bool lt_layout(int64_t R, int64_t C, int64_t sr, int64_t sc, LtMatrix& x) {
  if ((R == 1 || sr == 1) && (C == 1 || sc >= R)) {
    x.transpose = false;
    x.rows = R;
    x.cols = C;
    x.ld = C == 1 ? R : sc;
    return true;
  }
  if ((C == 1 || sc == 1) && (R == 1 || sr >= C)) {
    x.transpose = true;
    x.rows = C;
    x.cols = R;
    x.ld = R == 1 ? C : sr;
    return true;
  }
  return false;
}

// A batch over a shared b (every non-1 batch dim has b stride 0) whose batch dims and rows of a
// merge into one row stride, with a's columns contiguous: the batch becomes rows, one GEMM
// [batch * n, k] @ [k, m] (the output is dense, so its rows merge too). c does not matter here: a
// row bias is the same for every row, and a general c is copied into out before the GEMM.
void fold_batch(GemmProblem& p) {
  const int64_t batch = shape_numel(p.batch);
  if (p.batch.empty() || batch <= 1) return;
  if (!(p.a.cs == 1 || p.k == 1)) return;
  const std::size_t nd = p.batch.size();
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, a's stride) of a's batch dims and rows
  for (std::size_t d = 0; d < nd; ++d) {
    if (p.batch[d] == 1) continue;
    if (p.b.batch_strides[d] != 0) return;
    dims.push_back({p.batch[d], p.a.batch_strides[d]});
  }
  if (p.n != 1) dims.push_back({p.n, p.a.rs});
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
    if (dims[i].second != dims[i + 1].second * dims[i + 1].first) return;
  }
  p.a.rs = dims.back().second;
  p.n *= batch;
  if (p.c.ptr) p.c.rs = 0;  // only a row bias can reach the GEMM (see above)
  p.batch.clear();
  p.a.batch_strides.clear();
  p.b.batch_strides.clear();
  p.c.batch_strides.clear();
}

}  // namespace

int alignment_of(const void* address, const std::vector<int64_t>& byte_offsets) {
  uint64_t bits = reinterpret_cast<uintptr_t>(address) | 256u;
  for (int64_t o : byte_offsets) bits |= uint64_t(o < 0 ? -o : o);
  return int(bits & (~bits + 1));  // the lowest set bit
}

GemmPlan plan_gemm(const GemmProblem& problem, DType dtype, GemmPlanOptions options) {
  MG_ASSERT(dtype == DType::F64 || dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16,
            "plan_gemm: no cuBLASLt GEMM for ", dtype_name(dtype));
  const DType out_dtype = options.out_dtype.value_or(dtype);
  MG_ASSERT(out_dtype == dtype || (out_dtype == DType::F32 && (dtype == DType::F16 || dtype == DType::BF16)),
            "plan_gemm: no cuBLASLt GEMM from ", dtype_name(dtype), " inputs to a ", dtype_name(out_dtype), " output");
  GemmPlan plan;
  plan.dtype = dtype;
  plan.out_dtype = out_dtype;
  plan.compute = dtype == DType::F64                      ? GemmCompute::F64
                 : dtype == DType::F32 && options.allow_tf32 ? GemmCompute::F32FastTf32
                                                             : GemmCompute::F32;
  plan.f32_reductions_only = dtype == DType::F16 || dtype == DType::BF16;
  plan.alpha = problem.alpha;
  if (shape_numel(problem.batch) == 0 || problem.n == 0 || problem.m == 0) return plan;  // Empty
  const bool use_c = problem.c.ptr != nullptr && problem.beta != 0.0;
  if (problem.k == 0) {
    // An empty sum: out = beta * c, or zeros (cuBLASLt is not asked about k = 0).
    plan.kind = use_c ? GemmKind::ScaleC : GemmKind::Zero;
    plan.beta = use_c ? problem.beta : 0.0;
    return plan;
  }
  plan.kind = GemmKind::Matmul;

  GemmProblem p = problem;
  fold_batch(p);
  const int64_t n = p.n, k = p.k, m = p.m;
  plan.M = m;
  plan.N = n;
  plan.K = k;
  // cuBLAS's A = b^T [m, k]: element (j, l) at j * b.cs + l * b.rs; B = a^T [k, n] at
  // l * a.cs + i * a.rs; D = out^T [m, n], dense: ld m.
  plan.copy_b = !lt_layout(m, k, p.b.cs, p.b.rs, plan.A);
  plan.copy_a = !lt_layout(k, n, p.a.cs, p.a.rs, plan.B);
  if (plan.copy_a || plan.copy_b) return plan;  // the caller copies, then plans again
  plan.D = {.ptr = p.out, .transpose = false, .rows = m, .cols = n, .ld = m};
  plan.A.ptr = p.b.ptr;
  plan.B.ptr = p.a.ptr;

  // Batch dims: size-1 dims dropped; the longest run of trailing dims that merge for a, b and
  // out (stride[d] == stride[d+1] * size[d+1]; out is dense) is the strided batch of one call,
  // the leading dims left over a host loop.
  struct Dim {
    int64_t size, a, b, out;
  };
  std::vector<Dim> dims;
  int64_t out_stride = n * m;
  for (std::size_t d = p.batch.size(); d-- > 0;) {
    if (p.batch[d] != 1) dims.insert(dims.begin(), {p.batch[d], p.a.batch_strides[d], p.b.batch_strides[d], out_stride});
    out_stride *= p.batch[d];
  }
  std::size_t first = dims.size();  // dims [first, end) form the strided batch
  int64_t count = 1;
  while (first > 0) {
    const Dim& d = dims[first - 1];
    if (first < dims.size()) {
      const Dim& e = dims[first];
      const bool merges = d.a == e.a * e.size && d.b == e.b * e.size && d.out == e.out * e.size;
      if (!merges) break;
    }
    if (count > std::numeric_limits<int32_t>::max() / d.size) break;  // cuBLASLt's count is int32
    count *= d.size;
    --first;
  }
  plan.batch_count = count;
  if (first < dims.size()) {
    plan.B.batch_stride = dims.back().a;
    plan.A.batch_stride = dims.back().b;
    plan.D.batch_stride = dims.back().out;
  }
  for (std::size_t i = 0; i < first; ++i) {
    plan.loop.push_back(dims[i].size);
    plan.loop_a.push_back(dims[i].a);
    plan.loop_b.push_back(dims[i].b);
    plan.loop_out.push_back(dims[i].out);
  }

  // Alignment of every matrix any call touches: the base pointer and every batch/loop offset.
  auto offsets = [&](int64_t batch_stride, const Strides& loop, DType dt) {
    const int64_t es = int64_t(dtype_size(dt));
    std::vector<int64_t> o{batch_stride * es};
    for (int64_t s : loop) o.push_back(s * es);
    return o;
  };
  plan.A.alignment = alignment_of(plan.A.ptr, offsets(plan.A.batch_stride, plan.loop_b, dtype));
  plan.B.alignment = alignment_of(plan.B.ptr, offsets(plan.B.batch_stride, plan.loop_a, dtype));
  plan.D.alignment = alignment_of(plan.D.ptr, offsets(plan.D.batch_stride, plan.loop_out, out_dtype));

  // c. The bias epilogue only where it is simplest for cuBLASLt (one matrix, every dim > 1, a
  // packed 16-byte-aligned bias, not f64); anything else copies c into out and uses beta.
  if (use_c) {
    const bool bias = p.c_is_row_bias && options.allow_bias_epilogue && p.beta == 1.0 &&
                      dtype != DType::F64 && (p.c.cs == 1 || m == 1) && count == 1 && plan.loop.empty() &&
                      m > 1 && n > 1 && k > 1 && alignment_of(p.c.ptr) >= 16;
    if (bias) {
      plan.c_mode = GemmCMode::Bias;
      plan.bias = p.c.ptr;
      plan.bias_alignment = alignment_of(p.c.ptr);
      plan.no_split_k = plan.f32_reductions_only;
    } else {
      plan.c_mode = GemmCMode::CopyToOut;
      plan.beta = p.beta;
    }
  }
  return plan;
}

std::vector<int64_t> heuristic_key(const GemmPlan& plan, int device) {
  std::vector<int64_t> key{device,
                           int64_t(plan.dtype),
                           int64_t(plan.out_dtype),
                           int64_t(plan.compute),
                           plan.f32_reductions_only,
                           plan.no_split_k,
                           int64_t(plan.c_mode),
                           plan.bias_alignment,
                           plan.M,
                           plan.N,
                           plan.K,
                           plan.batch_count};
  for (const LtMatrix* x : {&plan.A, &plan.B, &plan.D}) {
    key.insert(key.end(), {x->transpose, x->rows, x->cols, x->ld, x->batch_stride, x->alignment});
  }
  return key;
}

std::string describe(const GemmPlan& plan) {
  static const char* kinds[] = {"empty", "zero", "scale c", "matmul"};
  static const char* computes[] = {"64F", "32F", "32F_FAST_TF32"};
  static const char* cmodes[] = {"none", "bias epilogue", "copied into out"};
  std::ostringstream s;
  s << kinds[int(plan.kind)] << " " << dtype_name(plan.dtype);
  if (plan.out_dtype != plan.dtype) s << " -> " << dtype_name(plan.out_dtype);
  if (plan.kind != GemmKind::Matmul) return s.str();
  if (plan.copy_a || plan.copy_b) {
    s << ": copy" << (plan.copy_a ? " a" : "") << (plan.copy_b ? " b" : "") << " first";
    return s.str();
  }
  auto mat = [&](const LtMatrix& x) {
    s << "[" << x.rows << "x" << x.cols << (x.transpose ? " T" : " N") << " ld " << x.ld << " stride "
      << x.batch_stride << " align " << x.alignment << "]";
  };
  s << " compute " << computes[int(plan.compute)] << " D[m=" << plan.M << ", n=" << plan.N << ", k=" << plan.K
    << "] = A";
  mat(plan.A);
  s << " B";
  mat(plan.B);
  s << " D";
  mat(plan.D);
  s << " x batch " << plan.batch_count;
  if (!plan.loop.empty()) s << " in a loop over " << shape_str(plan.loop);
  s << ", c " << cmodes[int(plan.c_mode)] << ", alpha " << plan.alpha << ", beta " << plan.beta;
  return s.str();
}

}  // namespace mg::cuda
