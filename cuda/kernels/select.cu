// CUDA kernels of the comparisons (bool output), where(cond, a, b) and fill, over every dtype.
#include "mixgrad/cuda/kernels/elementwise.cuh"
#include "mixgrad/cuda/kernels/register_helpers.h"
#include "mixgrad/ops/functor_from_attrs.h"

namespace mg::cuda {
namespace {

template <typename T, typename F>
void compare_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  launch_binary<bool, T>(in[0], in[1], out[0], F{});
}

template <typename Index, typename T>
__global__ void where_kernel_impl(Index n, OffsetCalculator<4, Index> calc, char* out, const char* cond,
                                  const char* a, const char* b) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[4];
    calc.offsets(i, off);
    const bool c = *reinterpret_cast<const bool*>(cond + off[1]);
    *reinterpret_cast<T*>(out + off[0]) = c ? *reinterpret_cast<const T*>(a + off[2])
                                            : *reinterpret_cast<const T*>(b + off[3]);
  }
}

template <typename T>
void where_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor& o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  const auto plan = make_elementwise_plan<4>(o.shape(),
                                 {o.strides(), broadcast_strides(in[0], o.shape()), broadcast_strides(in[1], o.shape()),
                                  broadcast_strides(in[2], o.shape())},
                                 {int64_t(sizeof(T)), 1, int64_t(sizeof(T)), int64_t(sizeof(T))});
  const LaunchContext ctx(o.device());
  auto* po = static_cast<char*>(o.data_ptr());
  auto* pc = static_cast<const char*>(in[0].data_ptr());
  auto* pa = static_cast<const char*>(in[1].data_ptr());
  auto* pb = static_cast<const char*>(in[2].data_ptr());
  if (fits_int32<4>(plan)) {
    where_kernel_impl<int32_t, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        int32_t(n), make_offset_calculator<4, int32_t>(plan), po, pc, pa, pb);
  } else {
    where_kernel_impl<int64_t, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        n, make_offset_calculator<4, int64_t>(plan), po, pc, pa, pb);
  }
  MG_CUDA_CHECK_LAUNCH("where kernel");
}

template <typename Index, typename T>
__global__ void fill_kernel_impl(Index n, OffsetCalculator<1, Index> calc, char* out, T value) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    Index off[1];
    calc.offsets(i, off);
    *reinterpret_cast<T*>(out + off[0]) = value;
  }
}

// Writes the output only (possibly strided, when run in place by fill_); the value is converted
// as on the CPU: to opmath first, then to the storage type.
template <typename T>
void fill_kernel(const Tensors&, Tensors& out, const OpAttrs& attrs) {
  const Tensor& o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  const T v = static_cast<T>(static_cast<opmath_t<T>>(attrs.alpha));
  const auto plan = make_elementwise_plan<1>(o.shape(), {o.strides()}, {int64_t(sizeof(T))});
  const LaunchContext ctx(o.device());
  if (fits_int32<1>(plan)) {
    fill_kernel_impl<int32_t, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        int32_t(n), make_offset_calculator<1, int32_t>(plan), static_cast<char*>(o.data_ptr()), v);
  } else {
    fill_kernel_impl<int64_t, T><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
        n, make_offset_calculator<1, int64_t>(plan), static_cast<char*>(o.data_ptr()), v);
  }
  MG_CUDA_CHECK_LAUNCH("fill kernel");
}

template <typename F>
struct CompareK {
  template <typename T>
  static constexpr KernelFn fn = compare_kernel<T, F>;
};
struct WhereK {
  template <typename T>
  static constexpr KernelFn fn = where_kernel<T>;
};
struct FillK {
  template <typename T>
  static constexpr KernelFn fn = fill_kernel<T>;
};

}  // namespace

void register_select_kernels() {
#define MG_UNARY(op, F, dtypes)
#define MG_BINARY(op, F, dtypes)
#define MG_COMPARE(op, F) register_cuda_All<CompareK<fn::F>>(OpId::op);
#include "mixgrad/ops/elementwise_ops.def"
#undef MG_UNARY
#undef MG_BINARY
#undef MG_COMPARE
  register_cuda_All<WhereK>(OpId::where);
  register_cuda_All<FillK>(OpId::fill);
}

}  // namespace mg::cuda
