// CUDA kernels of the conv group — conv2d, conv2d_backward_input, conv2d_backward_weight and
// conv_transpose2d — in f64, f32, f16 and bf16, as im2col + cuBLASLt (cuDNN replaces this later).
// The lowering (geometry, chunks, GEMM shapes, order of steps) is cuda/host/conv_plan.h's host
// code; this file gives it the device: the kernels of cuda/kernels/im2col.h and run_gemm
// (cuda/blas.h), all on the current stream, no host synchronisation.
// Decision: inputs of any layout are made dense first (contiguous(), a no-op when they are), the
// workspace (columns, the permuted gradient, the f32 weight-gradient accumulator) is taken from the
// caching allocator per call and freed when the call returns — stream-ordered reuse, as the GEMM
// workspace. Shapes were validated by the ops' infer rules (ops/conv.cpp).
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/blas.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/host/conv_plan.h"
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

// in = (x [N, C, H, W], w [O, C/groups, kH, kW][, bias [O]]); out = y [N, O, Ho, Wo].
template <typename T>
void conv2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  NoGradGuard no_grad;  // the dense copies and workspaces are part of the kernel, not of the graph
  constexpr DType dt = dtype_v<T>;
  const Tensor x = dense(in[0]), w = dense(in[1]), bias = in.size() > 2 ? dense(in[2]) : Tensor();
  const ConvDims g = conv_dims(attrs.ints, x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3));
  if (out[0].numel() == 0) return;
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::Forward, g, dt));
  const Tensor col = workspace(nb * g.C * g.kk() * g.hw_out(), dt, x.device());  // [nb, G, K, Ho*Wo]
  CudaConvDevice dev(x.device(), dt);
  conv_forward_steps(g, dt, x.data_ptr(), w.data_ptr(), ptr_or_null(bias), out[0].data_ptr(), col.data_ptr(), nb, dev);
}

// dx [N, C, H, W] = col2im(w^T gy) + bias: gy [N, O, Ho, Wo], w [O, C/groups, kH, kW], {H, W} the
// input size, bias [C] or undefined.
template <typename T>
void transposed_conv(const Tensor& gy_in, const Tensor& w_in, const Tensor& bias_in, int64_t H, int64_t W,
                     Tensor& dx, const OpAttrs& attrs) {
  NoGradGuard no_grad;
  constexpr DType dt = dtype_v<T>;
  const Tensor gy = dense(gy_in), w = dense(w_in), bias = dense(bias_in);
  ConvDims g = conv_dims(attrs.ints, gy.size(0), w.size(1) * attrs.ints[6], H, W, w.size(0), w.size(2), w.size(3));
  // gy's own size: with an output_padding not below the stride (conv_transpose2d allows it below
  // the dilation) the formula from {H, W} gives one more row or column than gy has (as on the CPU).
  g.Ho = gy.size(2);
  g.Wo = gy.size(3);
  if (dx.numel() == 0) return;
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::BackwardInput, g, dt));
  const Tensor dcol = workspace(nb * g.C * g.kk() * g.hw_out(), conv_acc_dtype(dt), gy.device());  // f32 for f16/bf16
  CudaConvDevice dev(gy.device(), dt);
  conv_backward_input_steps(g, dt, gy.data_ptr(), w.data_ptr(), ptr_or_null(bias), dx.data_ptr(), dcol.data_ptr(),
                            nb, dev);
}

// in = (g [N, O, Ho, Wo], w [O, C/groups, kH, kW]); attrs.ints[7..8] = {H, W}.
template <typename T>
void conv2d_backward_input_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>(in[0], in[1], Tensor(), attrs.ints[7], attrs.ints[8], out[0], attrs);
}

// in = (x [N, Cin, H, W], w [Cin, Cout/groups, kH, kW][, bias [Cout]]): the input gradient of a
// conv from [N, Cout, Hout, Wout] with weight w, plus bias.
template <typename T>
void conv_transpose2d_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  transposed_conv<T>(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), out[0].size(2), out[0].size(3), out[0], attrs);
}

// in = (x [N, C, H, W], g [N, O, Ho, Wo]); attrs.ints[7..8] = {kH, kW}; out = dw [O, C/groups, kH, kW].
template <typename T>
void conv2d_backward_weight_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  NoGradGuard no_grad;
  constexpr DType dt = dtype_v<T>;
  const Tensor x = dense(in[0]), gy = dense(in[1]);
  const ConvDims g =
      conv_dims(attrs.ints, x.size(0), x.size(1), x.size(2), x.size(3), gy.size(1), attrs.ints[7], attrs.ints[8]);
  const int64_t nb = conv_chunk_images(g.N, conv_bytes_per_image(ConvDirection::BackwardWeight, g, dt));
  const Device d = x.device();
  const Tensor col = workspace(nb * g.C * g.kk() * g.hw_out(), dt, d);  // [G, K, nb*Ho*Wo]
  const Tensor gp = workspace(nb * g.O * g.hw_out(), dt, d);            // [G, og, nb*Ho*Wo]
  const DType acc_dt = conv_acc_dtype(dt);
  const Tensor acc = acc_dt == dt ? out[0] : workspace(out[0].numel(), acc_dt, d);  // f32 for f16/bf16
  CudaConvDevice dev(d, dt);
  conv_backward_weight_steps(g, dt, x.data_ptr(), gy.data_ptr(), out[0].data_ptr(), acc.data_ptr(), col.data_ptr(),
                             gp.data_ptr(), nb, dev);
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
