// The host side of the cuDNN convolution (cuda/host/dnn_conv_plan.h): engine choice, layouts,
// descriptor parameters, cache keys, algorithm filtering and fallback order, error texts. Plain
// C++: no CUDA header, built and tested in every build.
#include "mixgrad/cuda/host/dnn_conv_plan.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

bool fits_int32(int64_t n) { return n <= int64_t(INT32_MAX); }

// The forward output size along one axis (the conv formula).
int64_t forward_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

std::string pair_str(int64_t a, int64_t b) { return str_cat("[", a, ", ", b, "]"); }

}  // namespace

ConvEngineChoice conv_engine(ConvDirection dir, DType dtype, const ConvDims& g) {
  if (dtype == DType::F64) return {ConvEngine::Im2col, "f64 is not a Tensor Core dtype: it keeps the im2col reference path"};
  const int64_t x = g.N * g.C * g.H * g.W, w = g.O * g.cg() * g.kk(), y = g.N * g.O * g.Ho * g.Wo;
  if (!fits_int32(x) || !fits_int32(w) || !fits_int32(y)) {
    return {ConvEngine::Im2col, "a tensor of more than 2^31 - 1 elements (cuDNN's legacy descriptors take int strides)"};
  }
  if (dir == ConvDirection::BackwardInput &&
      (g.Ho != forward_size(g.H, g.kH, g.sh, g.ph, g.dh) || g.Wo != forward_size(g.W, g.kW, g.sw, g.pw, g.dw))) {
    return {ConvEngine::Im2col,
            "the gradient is not the forward size of the input (conv_transpose2d with output_padding >= stride)"};
  }
  return {ConvEngine::Cudnn, nullptr};
}

ConvTrivial conv_trivial(ConvDirection dir, const ConvDims& g) {
  const bool x_empty = g.N * g.C * g.H * g.W == 0, y_empty = g.N * g.O * g.Ho * g.Wo == 0,
             w_empty = g.O * g.cg() * g.kk() == 0;
  switch (dir) {
    case ConvDirection::Forward:  // y from x and w
      return y_empty ? ConvTrivial::Empty : (x_empty || w_empty) ? ConvTrivial::Zero : ConvTrivial::None;
    case ConvDirection::BackwardInput:  // dx from dy and w
      return x_empty ? ConvTrivial::Empty : (y_empty || w_empty) ? ConvTrivial::Zero : ConvTrivial::None;
    case ConvDirection::BackwardWeight:  // dw from x and dy
      return w_empty ? ConvTrivial::Empty : (x_empty || y_empty) ? ConvTrivial::Zero : ConvTrivial::None;
  }
  return ConvTrivial::None;
}

bool dnn_status_refuses(int status) {
  switch (status) {
    case 3000:  // CUDNN_STATUS_NOT_SUPPORTED
    case 3001:  // _GRAPH_PATTERN
    case 3002:  // _SHAPE
    case 3003:  // _DATA_TYPE
    case 3004:  // _LAYOUT
    case 3010:  // _SHARED_MEMORY_INSUFFICIENT
    case 3011:  // _PADDING
    case 3012:  // _BAD_LAUNCH_PARAM
    case 3014:  // _INVALID_DYNAMIC_SHAPE
      return true;
    default:  // success, errors, and 3005-3009, 3013: the installation, not the problem
      return false;
  }
}

const char* layout_name(ConvLayout layout) { return layout == ConvLayout::NCHW ? "NCHW" : "NHWC"; }

std::array<int64_t, 4> layout_strides(const std::array<int64_t, 4>& d, ConvLayout layout) {
  // Memory order, outer to inner: NCHW = N C H W; NHWC = N H W C.
  const int order_nchw[4] = {0, 1, 2, 3}, order_nhwc[4] = {0, 2, 3, 1};
  const int* order = layout == ConvLayout::NCHW ? order_nchw : order_nhwc;
  std::array<int64_t, 4> s{};
  int64_t step = 1;
  for (int i = 3; i >= 0; --i) {
    s[std::size_t(order[i])] = step;
    step *= std::max<int64_t>(d[std::size_t(order[i])], 1);
  }
  return s;
}

LayoutMatch layout_match(const Shape& shape, const Strides& strides) {
  MG_ASSERT(shape.size() == 4 && strides.size() == 4, "layout_match: expected a 4-D tensor, got ", shape_str(shape));
  LayoutMatch m;
  if (shape_numel(shape) == 0) return {true, true};
  const std::array<int64_t, 4> d{shape[0], shape[1], shape[2], shape[3]};
  for (const ConvLayout l : {ConvLayout::NCHW, ConvLayout::NHWC}) {
    const std::array<int64_t, 4> want = layout_strides(d, l);
    bool ok = true;
    for (std::size_t i = 0; i < 4; ++i) ok = ok && (d[i] == 1 || strides[i] == want[i]);  // a size-1 dim's stride is free
    (l == ConvLayout::NCHW ? m.nchw : m.nhwc) = ok;
  }
  return m;
}

LayoutMatch layout_match(const Tensor& t) { return layout_match(t.shape(), t.strides()); }

bool aligned_for_cudnn(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

Tensor in_layout(const Tensor& t, ConvLayout layout) {
  if (layout_match(t).matches(layout) && aligned_for_cudnn(t)) return t;
  if (layout == ConvLayout::NCHW) return clone(t);                     // dense NCHW
  return permute(clone(permute(t, {0, 2, 3, 1})), {0, 3, 1, 2});  // [N, H, W, C] in memory
}

Tensor empty_in_layout(const Shape& s, DType dtype, Device device, ConvLayout layout) {
  if (layout == ConvLayout::NCHW) return empty(s, {.dtype = dtype, .device = device});
  return permute(empty({s[0], s[2], s[3], s[1]}, {.dtype = dtype, .device = device}), {0, 3, 1, 2});
}

ConvLayout choose_conv_layout(const std::vector<LayoutMatch>& operands) {
  for (const LayoutMatch& m : operands) {
    if (m.nhwc && !m.nchw) return ConvLayout::NHWC;
  }
  return ConvLayout::NCHW;
}

const char* dnn_math_name(DnnMath m) {
  switch (m) {
    case DnnMath::Default: return "Default";
    case DnnMath::TensorOp: return "TensorOp";
    case DnnMath::TensorOpAllowConversion: return "TensorOpAllowConversion";
    case DnnMath::Fma: return "Fma";
  }
  return "?";
}

DnnMath conv_math(DType dtype, bool allow_tf32) {
  if (dtype == DType::F16 || dtype == DType::BF16) return DnnMath::TensorOp;
  if (dtype == DType::F32 && allow_tf32) return DnnMath::Default;
  return DnnMath::Fma;
}

DType conv_compute_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }

DnnConvProblem make_dnn_conv_problem(ConvDirection dir, DType dtype, const ConvDims& g, ConvLayout layout,
                                     const DnnConvFlags& f) {
  DnnConvProblem p;
  p.dir = dir;
  p.dtype = dtype;
  p.layout = layout;
  p.math = conv_math(dtype, f.allow_tf32);
  p.deterministic = f.deterministic;
  p.benchmark = f.benchmark;
  p.g = g;
  p.device = f.device;
  return p;
}

int pointer_alignment(const std::vector<const void*>& ptrs) {
  for (const int a : {16, 8, 4, 2}) {
    bool all = true;
    for (const void* q : ptrs) all = all && reinterpret_cast<std::uintptr_t>(q) % std::uintptr_t(a) == 0;
    if (all) return a;
  }
  return 1;
}

std::vector<int64_t> dnn_conv_key(const DnnConvProblem& p) {
  const ConvDims& g = p.g;
  return {int64_t(p.dir), int64_t(p.dtype), int64_t(p.layout), int64_t(p.math), p.deterministic ? 1 : 0,
          p.benchmark ? 1 : 0, g.N, g.C, g.H, g.W, g.O, g.kH, g.kW, g.Ho, g.Wo, g.sh, g.sw, g.ph, g.pw, g.dh,
          g.dw, g.groups, p.device, p.alignment};
}

DnnTensorParams dnn_x_params(const DnnConvProblem& p) {
  DnnTensorParams t;
  t.dims = {p.g.N, p.g.C, p.g.H, p.g.W};
  t.strides = layout_strides(t.dims, p.layout);
  return t;
}

DnnTensorParams dnn_y_params(const DnnConvProblem& p) {
  DnnTensorParams t;
  t.dims = {p.g.N, p.g.O, p.g.Ho, p.g.Wo};
  t.strides = layout_strides(t.dims, p.layout);
  return t;
}

std::array<int64_t, 4> dnn_filter_dims(const DnnConvProblem& p) { return {p.g.O, p.g.cg(), p.g.kH, p.g.kW}; }

const char* dnn_direction_name(ConvDirection dir) {
  switch (dir) {
    case ConvDirection::Forward: return "forward";
    case ConvDirection::BackwardInput: return "backward-data";
    case ConvDirection::BackwardWeight: return "backward-filter";
  }
  return "?";
}

std::string describe(const DnnConvProblem& p) {
  const ConvDims& g = p.g;
  return str_cat("x ", shape_str({g.N, g.C, g.H, g.W}), " ", dtype_name(p.dtype), " ", layout_name(p.layout), ", w ",
                 shape_str({g.O, g.cg(), g.kH, g.kW}), ", y ", shape_str({g.N, g.O, g.Ho, g.Wo}), ", stride ",
                 pair_str(g.sh, g.sw), ", padding ", pair_str(g.ph, g.pw), ", dilation ", pair_str(g.dh, g.dw),
                 ", groups ", g.groups, ", math ", dnn_math_name(p.math), p.deterministic ? ", deterministic" : "");
}

std::vector<DnnAlgoChoice> filter_conv_algos(const std::vector<DnnAlgoResult>& results, const DnnConvProblem& p,
                                             bool by_time, DnnFilterStats* stats) {
  DnnFilterStats s;
  std::vector<DnnAlgoChoice> out;
  std::vector<float> times;
  for (const DnnAlgoResult& r : results) {
    if (!r.ok) {
      ++s.failed;
      continue;
    }
    if (p.deterministic && !r.deterministic) {
      ++s.nondeterministic;
      continue;
    }
    DnnMath math = r.math;
    if (math == DnnMath::TensorOpAllowConversion && p.dtype != DType::F16) {
      // Inputs rounded to f16 inside: a no-op for f16 data, a loss of precision (f32) or of range
      // (bf16) for the others.
      ++s.wrong_math;
      continue;
    }
    if (p.math == DnnMath::Fma) {
      // Strict f32: FMA algorithms, run with FMA math (a Default entry is run as FMA too, never as TF32).
      if (math == DnnMath::TensorOp) {
        ++s.wrong_math;
        continue;
      }
      math = DnnMath::Fma;
    }
    const DnnAlgoChoice c{r.algo, r.workspace, math};
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const DnnAlgoChoice& o) { return o.algo == c.algo && o.math == c.math; });
    if (seen) continue;
    out.push_back(c);
    times.push_back(r.time_ms);
  }
  if (by_time) {
    std::vector<std::size_t> idx(out.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
    std::vector<DnnAlgoChoice> sorted;
    for (const std::size_t i : idx) sorted.push_back(out[i]);
    out = std::move(sorted);
  }
  if (stats) *stats = s;
  return out;
}

int next_workspace_fallback(const std::vector<DnnAlgoChoice>& c, std::size_t failed) {
  MG_ASSERT(failed < c.size(), "next_workspace_fallback: candidate ", failed, " of ", c.size());
  for (std::size_t i = failed + 1; i < c.size(); ++i) {
    if (c[i].workspace < c[failed].workspace) return int(i);
  }
  return -1;
}

DnnRunResult run_candidates(const std::vector<DnnAlgoChoice>& c, DnnRunner& runner) {
  MG_ASSERT(!c.empty(), "run_candidates: no candidates");
  DnnRunResult r;
  std::size_t i = 0;
  while (true) {
    r.index = i;
    if (!runner.take_workspace(c[i].workspace)) {
      const int next = next_workspace_fallback(c, i);
      if (next < 0) {
        r.outcome = DnnRunOutcome::OutOfMemory;
        return r;
      }
      i = std::size_t(next);
      continue;
    }
    if (runner.run(c[i])) {
      r.outcome = DnnRunOutcome::Ran;
      return r;
    }
    r.refused.push_back(i);
    if (i + 1 >= c.size()) {
      r.outcome = DnnRunOutcome::AllRefused;
      return r;
    }
    ++i;
  }
}

std::size_t find_workspace_bytes(const std::vector<DnnAlgoResult>& heuristic, std::size_t cap) {
  std::size_t most = 0;
  for (const DnnAlgoResult& r : heuristic) {
    if (r.ok) most = std::max(most, r.workspace);
  }
  return std::min(most, cap);
}

std::string dnn_no_algo_message(const char* op, const DnnConvProblem& p, const DnnFilterStats& s, int offered) {
  std::string hint;
  if (s.nondeterministic > 0) {
    hint = "set_cudnn_deterministic(false) allows the nondeterministic algorithms cuDNN offers for it";
  } else if (s.wrong_math > 0 && p.dtype == DType::F32 && p.math == DnnMath::Fma) {
    hint = "set_allow_tf32(true) allows the TF32 algorithms cuDNN offers for it";
  } else {
    hint = "try the other layout (NCHW or channels-last) or another dtype";
  }
  return str_cat(op, ": cuDNN has no ", dnn_direction_name(p.dir), " algorithm for ", describe(p), " (it offered ",
                 offered, ": ", s.failed, " failed, ", s.nondeterministic, " nondeterministic, ", s.wrong_math,
                 " with a math type not allowed",
                 s.no_workspace > 0 ? str_cat(", ", s.no_workspace, " without a workspace size") : std::string(),
                 ")\n  hint: ", hint);
}

}  // namespace mg::cuda
