// CUDA kernels of var, std (attrs.alpha = correction), norm (attrs.alpha = p: 0, 1, 2, ±inf or any
// real) and logsumexp (cuda/kernels/reduce.cuh over cuda/host/reducers.h). Accumulation: f32 for
// f16/bf16/f32, f64 for f64. var/std: Welford per term, Chan's merge between partials.
#include <cmath>

#include "mixgrad/cuda/kernels/reduce.cuh"
#include "mixgrad/ops/kernel_registry.h"

namespace mg::cuda {
namespace {

// out[0] [kept] = Σ (x - mean)² / max(0, N - correction), or its square root (kStd)
template <typename T, bool kStd>
void var_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], a.dims, VarOp<T>{out[0].data<T>(), a.alpha, kStd});
}

// out[0] [kept] = (Σ |x|^p)^(1/p); p = 0: the count of nonzeros; p = ±inf: max / min |x|
template <typename T>
void norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const double p = a.alpha;
  NormKind kind = NormKind::General;
  if (p == 0.0) kind = NormKind::Zero;
  if (p == 1.0) kind = NormKind::One;
  if (p == 2.0) kind = NormKind::Two;
  if (std::isinf(p)) kind = p > 0 ? NormKind::Inf : NormKind::NegInf;
  launch_reduce<T>(in[0], a.dims, NormOp<T>{out[0].data<T>(), kind, static_cast<acc_t<T>>(p)});
}

// out[0] [kept] = log Σ e^x over a.dims (-inf for an empty reduction)
template <typename T>
void logsumexp_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  launch_reduce<T>(in[0], a.dims, LogSumExpOp<T>{out[0].data<T>()});
}

template <typename T>
void reg_floating() {
  constexpr DType t = dtype_v<T>;
  register_kernel(OpId::var, DeviceType::CUDA, t, var_kernel<T, false>);
  register_kernel(OpId::std, DeviceType::CUDA, t, var_kernel<T, true>);
  register_kernel(OpId::norm, DeviceType::CUDA, t, norm_kernel<T>);
  register_kernel(OpId::logsumexp, DeviceType::CUDA, t, logsumexp_kernel<T>);
}

}  // namespace

void register_reduce_stats_kernels() {
  reg_floating<double>();
  reg_floating<float>();
  reg_floating<Half>();
  reg_floating<BFloat16>();
}

}  // namespace mg::cuda
