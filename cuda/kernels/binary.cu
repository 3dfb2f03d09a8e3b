// CUDA kernels of the binary elementwise ops of ops/elementwise_ops.def (with broadcasting), its
// fused activation backwards, gelu_backward and relu_backward: the shared functors through
// launch_binary.
#include "mixgrad/cuda/kernels/elementwise.cuh"
#include "mixgrad/cuda/kernels/register_helpers.h"
#include "mixgrad/ops/functor_from_attrs.h"

namespace mg::cuda {
namespace {

template <typename T, typename F>
void binary_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  launch_binary<T, T>(in[0], in[1], out[0], functor_from_attrs<F>(attrs));
}

// (grad, x) -> grad * gelu'(x), computed in opmath and rounded once.
template <typename T>
void gelu_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  if (attrs.mode == 0) {
    launch_binary<T, T>(in[0], in[1], out[0], fn::GeluErfBackward{});
  } else {
    launch_binary<T, T>(in[0], in[1], out[0], fn::GeluTanhBackward{});
  }
}

// (grad, x) -> grad * f'(x) of the table's MG_ACTIVATION_BACKWARD ops, in opmath, rounded once.
template <typename T, typename F>
void activation_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  launch_binary<T, T>(in[0], in[1], out[0], functor_from_attrs<F>(attrs));
}

template <typename T>
void relu_backward_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  launch_binary<T, T>(in[0], in[1], out[0], fn::ReluBackward{});
}

template <typename F>
struct BinaryK {
  template <typename T>
  static constexpr KernelFn fn = binary_kernel<T, F>;
};
template <typename F>
struct ActivationBackwardK {
  template <typename T>
  static constexpr KernelFn fn = activation_backward_kernel<T, F>;
};
struct GeluBackwardK {
  template <typename T>
  static constexpr KernelFn fn = gelu_backward_kernel<T>;
};
struct ReluBackwardK {
  template <typename T>
  static constexpr KernelFn fn = relu_backward_kernel<T>;
};


}  // namespace

void register_binary_kernels() {
#define MG_UNARY(op, F, dtypes)
#define MG_BINARY(op, F, dtypes) register_cuda_##dtypes<BinaryK<fn::F>>(OpId::op);
#define MG_COMPARE(op, F)
#include "mixgrad/ops/elementwise_ops.def"
#undef MG_UNARY
#undef MG_BINARY
#undef MG_COMPARE
#define MG_ACTIVATION_BACKWARD(op, F) register_cuda_Floating<ActivationBackwardK<fn::F>>(OpId::op);
#include "mixgrad/ops/activation_backward_ops.def"
#undef MG_ACTIVATION_BACKWARD
  // bool + bool and bool * bool: logical or / and, as PyTorch (C++'s bool conversion of 2 is true).
  register_kernel(OpId::add, DeviceType::CUDA, DType::Bool, binary_kernel<bool, fn::Add>);
  register_kernel(OpId::mul, DeviceType::CUDA, DType::Bool, binary_kernel<bool, fn::Mul>);
  register_cuda_Floating<GeluBackwardK>(OpId::gelu_backward);
  register_cuda_Floating<ReluBackwardK>(OpId::relu_backward);
}

}  // namespace mg::cuda
