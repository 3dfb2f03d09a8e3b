// CUDA kernels of the unary elementwise ops of ops/elementwise_ops.def (and gelu's two forms):
// the shared functors through launch_unary, so the CPU and the GPU run one formula.
#include "mixgrad/cuda/kernels/elementwise.cuh"
#include "mixgrad/cuda/kernels/register_helpers.h"
#include "mixgrad/ops/functor_from_attrs.h"

namespace mg::cuda {
namespace {

template <typename T, typename F>
void unary_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  launch_unary<T, T>(in[0], out[0], functor_from_attrs<F>(attrs));
}

template <typename T>
void gelu_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  if (attrs.mode == 0) {
    launch_unary<T, T>(in[0], out[0], fn::GeluErf{});
  } else {
    launch_unary<T, T>(in[0], out[0], fn::GeluTanh{});
  }
}

template <typename F>
struct UnaryK {
  template <typename T>
  static constexpr KernelFn fn = unary_kernel<T, F>;
};
struct GeluK {
  template <typename T>
  static constexpr KernelFn fn = gelu_kernel<T>;
};

}  // namespace

void register_unary_kernels() {
#define MG_UNARY(op, F, dtypes) register_cuda_##dtypes<UnaryK<fn::F>>(OpId::op);
#define MG_BINARY(op, F, dtypes)
#define MG_COMPARE(op, F)
#include "mixgrad/ops/elementwise_ops.def"
#undef MG_UNARY
#undef MG_BINARY
#undef MG_COMPARE
  register_cuda_Floating<GeluK>(OpId::gelu);
}

}  // namespace mg::cuda
