// CUDA kernels of the conv group — conv2d, conv2d_backward_input, conv2d_backward_weight and
// conv_transpose2d — in f64, f32, f16 and bf16. Each runs through cuDNN (cuda/dnn.h) unless
// conv_engine() (cuda/host/dnn_conv_plan.h) declares the im2col + cuBLASLt path for it: f64, a
// tensor beyond int indexing, a conv_transpose2d whose output_padding reaches the stride. The
// im2col lowering (geometry, chunks, GEMM shapes, order of steps) is cuda/host/conv_plan.h's host
// code; this file gives it the device: the kernels of cuda/kernels/im2col.h and run_gemm
// (cuda/blas.h). Everything runs on the current stream; no host synchronisation (except
// cuDNN's benchmark mode, once per configuration).
// Decisions: the cuDNN path computes in one layout, NHWC when any operand is channels-last (the
// strides of a permuted 4-D tensor), else NCHW; operands in the other layout are copied (inputs)
// or computed into a temporary of the conv's layout and copied out (outputs). A bias is written
// into the output first and cuDNN adds its result to it (beta 1): one rounding, as on the CPU.
// The im2col path makes inputs dense first (contiguous(), a no-op when they are) and takes its
// workspace from the caching allocator per call. Shapes were validated by the ops' infer rules
// (ops/conv.cpp).
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/blas.h"
#include "mixgrad/cuda/conv_settings.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/dnn.h"
#include "mixgrad/cuda/host/conv_plan.h"
#include "mixgrad/cuda/host/dnn_conv_plan.h"
#include "mixgrad/cuda/host/gemm_plan.h"
#include "mixgrad/cuda/kernels/im2col.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

// The drivers' device steps on `device`'s current stream, for a conv of dtype `dtype`.
class CudaConvDevice final : public ConvDevice {
 public:
  CudaConvDevice(Device device, DType dtype) : device_(device), dtype_(dtype) {}

  void im2col(const ConvDims& g, ColLayout layout, int64_t nb, const void* x, void* col) override {
    conv_im2col(g, layout, nb, dtype_, x, col, device_);
  }
  void col2im(const ConvDims& g, int64_t nb, const void* dcol, const void* bias, void* dx) override {
    conv_col2im(g, nb, dtype_, dcol, bias, dx, device_);
  }
  void fill_bias(const ConvDims& g, const void* bias, void* y) override { conv_fill_bias(g, dtype_, bias, y, device_); }
  void permute_grad(const ConvDims& g, int64_t nb, const void* gy, void* gp) override {
    conv_permute_grad(g, nb, dtype_, gy, gp, device_);
  }
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) override {
    conv_convert(dst, dst_dtype, src, src_dtype, n, device_);
  }
  void gemm(const GemmProblem& p, DType dtype, DType out_dtype) override {
    const GemmPlan plan = plan_gemm(p, dtype, {.allow_tf32 = allow_tf32(), .out_dtype = out_dtype});
    MG_ASSERT(!plan.copy_a && !plan.copy_b, "conv: a dense conv operand needs a copy: ", describe(plan));
    switch (plan.kind) {
      case GemmKind::Empty: return;
      case GemmKind::Zero:  // k = 0 (no input channels per group): the product is 0
        conv_convert(p.out, out_dtype, nullptr, out_dtype, shape_numel(p.batch) * p.n * p.m, device_);
        return;
      case GemmKind::ScaleC:  // k = 0 while accumulating into out: out stays
        MG_ASSERT(p.c.ptr == p.out && plan.beta == 1.0, "conv: unexpected c in ", describe(plan));
        return;
      case GemmKind::Matmul: break;
    }
    // CopyToOut here always means c is out itself (accumulate): nothing to copy.
    MG_ASSERT(plan.c_mode != GemmCMode::CopyToOut || p.c.ptr == p.out, "conv: c is not out in ", describe(plan));
    MG_CHECK(run_gemm(plan, device_.index), CudaError, "conv2d: cuBLASLt has no algorithm for ", describe(plan),
             " on ", device_.str());
  }

 private:
  Device device_;
  DType dtype_;
};

Tensor dense(const Tensor& t) { return t.defined() ? contiguous(t) : t; }
const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
Tensor workspace(int64_t n, DType dtype, Device device) { return empty({n}, {.dtype = dtype, .device = device}); }

// ---- the im2col + cuBLASLt path (where conv_engine() declares it) ----

// y [N, O, Ho, Wo] = conv2d(x [N, C, H, W], w [O, C/groups, kH, kW]) + bias [O] (or undefined).
template <typename T>
void conv2d_im2col(const Tensor& x_in, const Tensor& w_in, const Tensor& bias_in, Tensor& y, const OpAttrs& attrs) {
  constexpr DType dt = dtype_v<T>;
  const Tensor x = dense(x_in), w = dense(w_in), bias = dense(bias_in);
  const ConvDims g = conv_dims(attrs.ints, x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3));
  if (y.numel() == 0) return;
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::Forward, g, dt));
  const Tensor col = workspace(nb * g.C * g.kk() * g.hw_out(), dt, x.device());  // [nb, G, K, Ho*Wo]
  CudaConvDevice dev(x.device(), dt);
  conv_forward_steps(g, dt, x.data_ptr(), w.data_ptr(), ptr_or_null(bias), y.data_ptr(), col.data_ptr(), nb, dev);
}

// dx [N, C, H, W] = col2im(w^T gy) + bias: gy [N, O, Ho, Wo], w [O, C/groups, kH, kW], {H, W} the
// input size, bias [C] or undefined.
template <typename T>
void transposed_conv_im2col(const Tensor& gy_in, const Tensor& w_in, const Tensor& bias_in, ConvDims g, Tensor& dx) {
  constexpr DType dt = dtype_v<T>;
  const Tensor gy = dense(gy_in), w = dense(w_in), bias = dense(bias_in);
  if (dx.numel() == 0) return;
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::BackwardInput, g, dt));
  const Tensor dcol = workspace(nb * g.C * g.kk() * g.hw_out(), conv_acc_dtype(dt), gy.device());  // f32 for f16/bf16
  CudaConvDevice dev(gy.device(), dt);
  conv_backward_input_steps(g, dt, gy.data_ptr(), w.data_ptr(), ptr_or_null(bias), dx.data_ptr(), dcol.data_ptr(),
                            nb, dev);
}

// dw [O, C/groups, kH, kW] from x [N, C, H, W] and gy [N, O, Ho, Wo].
template <typename T>
void conv2d_backward_weight_im2col(const Tensor& x_in, const Tensor& gy_in, const ConvDims& g, Tensor& dw) {
  constexpr DType dt = dtype_v<T>;
  const Tensor x = dense(x_in), gy = dense(gy_in);
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::BackwardWeight, g, dt));
  const Device d = x.device();
  const Tensor col = workspace(nb * g.C * g.kk() * g.hw_out(), dt, d);  // [G, K, nb*Ho*Wo]
  const Tensor gp = workspace(nb * g.O * g.hw_out(), dt, d);            // [G, og, nb*Ho*Wo]
  const DType acc_dt = conv_acc_dtype(dt);
  const Tensor acc = acc_dt == dt ? dw : workspace(dw.numel(), acc_dt, d);  // f32 for f16/bf16
  CudaConvDevice dev(d, dt);
  conv_backward_weight_steps(g, dt, x.data_ptr(), gy.data_ptr(), dw.data_ptr(), acc.data_ptr(), col.data_ptr(),
                             gp.data_ptr(), nb, dev);
}

// ---- the cuDNN path ----

LayoutMatch match_of(const Tensor& t) { return layout_match(t); }

// out itself when it is dense in `layout` and aligned for cuDNN, else a temporary that is (copied
// into out by finish).
Tensor output_in_layout(const Tensor& out, ConvLayout layout) {
  return match_of(out).matches(layout) && aligned_for_cudnn(out)
             ? out
             : empty_in_layout(out.shape(), out.dtype(), out.device(), layout);
}
void finish(Tensor& out, const Tensor& result) {
  if (!result.is_same(out)) out.copy_(result);
}

// y [N, K, H, W] = bias [K] broadcast (bias undefined: 0).
void fill_bias_or_zero(Tensor& y, const Tensor& bias) {
  if (!bias.defined()) {
    y.zero_();
    return;
  }
  y.copy_(bias.reshape({1, bias.size(0), 1, 1}).expand(y.shape()));
}

DnnConvProblem problem(ConvDirection dir, DType dt, const ConvDims& g, ConvLayout layout, Device device,
                       const std::vector<const void*>& ptrs) {
  DnnConvProblem p = make_dnn_conv_problem(dir, dt, g, layout,
                                           {.allow_tf32 = allow_tf32(),
                                            .deterministic = cudnn_deterministic(),
                                            .benchmark = cudnn_benchmark(),
                                            .device = device.index});
  p.alignment = pointer_alignment(ptrs);
  return p;
}

// in = (x [N, C, H, W], w [O, C/groups, kH, kW][, bias [O]]); out = y [N, O, Ho, Wo].
template <typename T>
void conv2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  NoGradGuard no_grad;  // copies and workspaces are part of the kernel, not of the graph
  constexpr DType dt = dtype_v<T>;
  const Tensor &x = in[0], &w = in[1], bias = in.size() > 2 ? in[2] : Tensor();
  const ConvDims g = conv_dims(attrs.ints, x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3));
  if (conv_engine(ConvDirection::Forward, dt, g).engine == ConvEngine::Im2col) {
    Tensor y = output_in_layout(out[0], ConvLayout::NCHW);  // the im2col path writes dense NCHW
    conv2d_im2col<T>(x, w, bias, y, attrs);
    finish(out[0], y);
    return;
  }
  switch (conv_trivial(ConvDirection::Forward, g)) {
    case ConvTrivial::Empty: return;
    case ConvTrivial::Zero: fill_bias_or_zero(out[0], bias); return;
    case ConvTrivial::None: break;
  }
  const ConvLayout layout = choose_conv_layout({match_of(x), match_of(w), match_of(out[0])});
  const Tensor xl = in_layout(x, layout), wl = in_layout(w, layout);
  Tensor y = output_in_layout(out[0], layout);
  if (bias.defined()) fill_bias_or_zero(y, bias);
  const DnnConvProblem p =
      problem(ConvDirection::Forward, dt, g, layout, x.device(), {xl.data_ptr(), wl.data_ptr(), y.data_ptr()});
  run_dnn_conv("conv2d", p, xl.data_ptr(), wl.data_ptr(), y.data_ptr(), bias.defined());
  finish(out[0], y);
}

// dx [N, C, H, W] = the input gradient of gy [N, O, Ho, Wo] through w [O, C/groups, kH, kW], plus
// bias [C] (or undefined); {H, W} the input size. conv2d_backward_input and conv_transpose2d.
template <typename T>
void transposed_conv(const char* op, const Tensor& gy, const Tensor& w, const Tensor& bias, int64_t H, int64_t W,
                     Tensor& dx, const OpAttrs& attrs) {
  NoGradGuard no_grad;
  constexpr DType dt = dtype_v<T>;
  ConvDims g = conv_dims(attrs.ints, gy.size(0), w.size(1) * attrs.ints[6], H, W, w.size(0), w.size(2), w.size(3));
  // gy's own size: with an output_padding not below the stride (conv_transpose2d allows it below
  // the dilation) the formula from {H, W} gives one more row or column than gy has (as on the CPU).
  g.Ho = gy.size(2);
  g.Wo = gy.size(3);
  if (conv_engine(ConvDirection::BackwardInput, dt, g).engine == ConvEngine::Im2col) {
    Tensor r = output_in_layout(dx, ConvLayout::NCHW);
    transposed_conv_im2col<T>(gy, w, bias, g, r);
    finish(dx, r);
    return;
  }
  switch (conv_trivial(ConvDirection::BackwardInput, g)) {
    case ConvTrivial::Empty: return;
    case ConvTrivial::Zero: fill_bias_or_zero(dx, bias); return;
    case ConvTrivial::None: break;
  }
  const ConvLayout layout = choose_conv_layout({match_of(gy), match_of(w), match_of(dx)});
  const Tensor gl = in_layout(gy, layout), wl = in_layout(w, layout);
  Tensor r = output_in_layout(dx, layout);
  if (bias.defined()) fill_bias_or_zero(r, bias);
  const DnnConvProblem p =
      problem(ConvDirection::BackwardInput, dt, g, layout, gy.device(), {gl.data_ptr(), wl.data_ptr(), r.data_ptr()});
  run_dnn_conv(op, p, r.data_ptr(), wl.data_ptr(), gl.data_ptr(), bias.defined());
  finish(dx, r);
}

// in = (g [N, O, Ho, Wo], w [O, C/groups, kH, kW]); attrs.ints[7..8] = {H, W}.
template <typename T>
void conv2d_backward_input_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>("conv2d_backward_input", in[0], in[1], Tensor(), attrs.ints[7], attrs.ints[8], out[0], attrs);
}

// in = (x [N, Cin, H, W], w [Cin, Cout/groups, kH, kW][, bias [Cout]]): the input gradient of a
// conv from [N, Cout, Hout, Wout] with weight w, plus bias.
template <typename T>
void conv_transpose2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>("conv_transpose2d", in[0], in[1], in.size() > 2 ? in[2] : Tensor(), out[0].size(2),
                     out[0].size(3), out[0], attrs);
}

// in = (x [N, C, H, W], g [N, O, Ho, Wo]); attrs.ints[7..8] = {kH, kW}; out = dw [O, C/groups, kH, kW].
template <typename T>
void conv2d_backward_weight_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  NoGradGuard no_grad;
  constexpr DType dt = dtype_v<T>;
  const Tensor &x = in[0], &gy = in[1];
  const ConvDims g =
      conv_dims(attrs.ints, x.size(0), x.size(1), x.size(2), x.size(3), gy.size(1), attrs.ints[7], attrs.ints[8]);
  if (conv_engine(ConvDirection::BackwardWeight, dt, g).engine == ConvEngine::Im2col) {
    Tensor dw = output_in_layout(out[0], ConvLayout::NCHW);
    conv2d_backward_weight_im2col<T>(x, gy, g, dw);
    finish(out[0], dw);
    return;
  }
  switch (conv_trivial(ConvDirection::BackwardWeight, g)) {
    case ConvTrivial::Empty: return;
    case ConvTrivial::Zero: out[0].zero_(); return;
    case ConvTrivial::None: break;
  }
  const ConvLayout layout = choose_conv_layout({match_of(x), match_of(gy), match_of(out[0])});
  const Tensor xl = in_layout(x, layout), gl = in_layout(gy, layout);
  Tensor dw = output_in_layout(out[0], layout);
  const DnnConvProblem p =
      problem(ConvDirection::BackwardWeight, dt, g, layout, x.device(), {xl.data_ptr(), gl.data_ptr(), dw.data_ptr()});
  run_dnn_conv("conv2d_backward_weight", p, xl.data_ptr(), dw.data_ptr(), gl.data_ptr(), false);
  finish(out[0], dw);
}

template <typename T>
void reg() {
  constexpr DType d = dtype_v<T>;
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::conv2d, cuda, d, conv2d_kernel<T>);
  register_kernel(OpId::conv2d_backward_input, cuda, d, conv2d_backward_input_kernel<T>);
  register_kernel(OpId::conv2d_backward_weight, cuda, d, conv2d_backward_weight_kernel<T>);
  register_kernel(OpId::conv_transpose2d, cuda, d, conv_transpose2d_kernel<T>);
}

}  // namespace

void register_conv_kernels() {
  reg<double>();
  reg<float>();
  reg<Half>();
  reg<BFloat16>();
}

}  // namespace mg::cuda
