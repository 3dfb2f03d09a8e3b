// CPU kernels of the remaining reductions (prod, amax, amin, max_dim, min_dim, argmax, argmin,
// var, std, norm, logsumexp) and of cumsum. The reductions are reducers (ops/cpu/reducers.h) run
// by reduce_loop; cumsum is a prefix sum per line along attrs.dim, in parallel over lines.
// Accumulation: f32 for f16/bf16/f32, f64 for f64, i64 for integers; one rounding on store.
#include <algorithm>
#include <vector>

#include "mixgrad/ops/cpu/reduce_loop.h"
#include "mixgrad/ops/cpu/reducers.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// Output dtype of prod and cumsum: the input's for floats, i64 for integers and bool.
template <typename T>
using int_widened_t = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, T, int64_t>;

// reduce_loop, plus empty reductions (a reduced dim of size 0), which give finish(init(), 0)
// for every output: prod 1, norm 0, logsumexp -inf, var NaN.
template <typename T, typename O, typename R>
void reduce_or_fill(const Tensor& x, const std::vector<int64_t>& dims, O* out, const R& r) {
  int64_t red_numel = 1, out_numel = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    (reduced ? red_numel : out_numel) *= x.shape()[d];
  }
  if (red_numel == 0) {
    for (int64_t o = 0; o < out_numel; ++o) out[o] = r.finish(r.init(), 0);
    return;
  }
  reduce_loop<T>(x, dims, out, r);
}

template <typename T>
void prod_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  reduce_or_fill<T>(in[0], a.dims, out[0].data<O>(), ProdReducer<T, O>{});
}

template <typename T, bool kMax>
void extremum_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  reduce_or_fill<T>(in[0], a.dims, out[0].data<T>(), ExtremumReducer<T, kMax>{});
}

// Reduced dims of an op along attrs.dim (none for a 0-d input).
std::vector<int64_t> dim_as_dims(const Tensor& x, const OpAttrs& a) {
  return x.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{a.dim};
}

// max_dim / min_dim: out[0] values [kept] T, out[1] indices [kept] i64.
template <typename T, bool kMax>
void max_dim_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  std::vector<ValueIndex<T>> best(out[0].numel());
  reduce_or_fill<T>(in[0], dim_as_dims(in[0], a), best.data(), ArgReducer<T, kMax>{});
  T* values = out[0].data<T>();
  int64_t* indices = out[1].data<int64_t>();
  for (std::size_t o = 0; o < best.size(); ++o) {
    values[o] = static_cast<T>(best[o].value);
    indices[o] = best[o].index;
  }
}

template <typename T, bool kMax>
void arg_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  reduce_or_fill<T>(in[0], dim_as_dims(in[0], a), out[0].data<int64_t>(), ArgIndexReducer<T, kMax>{});
}

template <typename T, bool kStd>
void var_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  VarReducer<T, kStd> r;
  r.correction = a.alpha;
  reduce_or_fill<T>(in[0], a.dims, out[0].data<T>(), r);
}

template <typename T, NormKind kKind>
void norm_with(const Tensors& in, Tensors& out, const OpAttrs& a) {
  NormReducer<T, kKind> r;
  r.p = static_cast<acc_t<T>>(a.alpha);
  reduce_or_fill<T>(in[0], a.dims, out[0].data<T>(), r);
}

template <typename T>
void norm_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const double p = a.alpha;
  if (p == 0.0) return norm_with<T, NormKind::Zero>(in, out, a);
  if (p == 1.0) return norm_with<T, NormKind::One>(in, out, a);
  if (p == 2.0) return norm_with<T, NormKind::Two>(in, out, a);
  if (std::isinf(p)) {
    return p > 0 ? norm_with<T, NormKind::Inf>(in, out, a) : norm_with<T, NormKind::NegInf>(in, out, a);
  }
  norm_with<T, NormKind::General>(in, out, a);
}

template <typename T>
void logsumexp_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  reduce_or_fill<T>(in[0], a.dims, out[0].data<T>(), LogSumExpReducer<T>{});
}

// out [same shape as x, contiguous]: out[..., j, ...] = sum_{i <= j} x[..., i, ...] along attrs.dim.
template <typename T>
void cumsum_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using O = int_widened_t<T>;
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  const Tensor& x = in[0];
  const T* xp = static_cast<const T*>(x.data_ptr());
  O* op = out[0].data<O>();
  if (x.dim() == 0) {
    op[0] = static_cast<O>(static_cast<Acc>(xp[0]));
    return;
  }
  const int64_t dim = a.dim;
  const int64_t size = x.shape()[dim];
  const int64_t x_stride = x.strides()[dim];
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  // The kept dims of a reduction over `dim` enumerate the lines in the output's order.
  const ReduceGeometry g = reduce_geometry(x, {dim});
  if (size == 0 || g.out_numel == 0) return;
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / size);
  parallel_for(0, g.out_numel, grain, [&](int64_t b, int64_t e) {
    for (int64_t line = b; line < e; ++line) {
      const T* src = xp + kept_offset(g, line);
      O* dst = op + (line / inner) * size * inner + line % inner;
      Acc acc = Acc(0);
      for (int64_t i = 0; i < size; ++i) {
        acc = wrapping_add(acc, static_cast<Acc>(src[i * x_stride]));
        dst[i * inner] = static_cast<O>(acc);
      }
    }
  });
}

template <typename T>
void reg_ordered() {
  constexpr DType t = dtype_v<T>;
  register_kernel(OpId::amax, DeviceType::CPU, t, extremum_kernel<T, true>);
  register_kernel(OpId::amin, DeviceType::CPU, t, extremum_kernel<T, false>);
  register_kernel(OpId::max_dim, DeviceType::CPU, t, max_dim_kernel<T, true>);
  register_kernel(OpId::min_dim, DeviceType::CPU, t, max_dim_kernel<T, false>);
  register_kernel(OpId::argmax, DeviceType::CPU, t, arg_kernel<T, true>);
  register_kernel(OpId::argmin, DeviceType::CPU, t, arg_kernel<T, false>);
}

template <typename T>
void reg_floating() {
  constexpr DType t = dtype_v<T>;
  register_kernel(OpId::var, DeviceType::CPU, t, var_kernel<T, false>);
  register_kernel(OpId::std, DeviceType::CPU, t, var_kernel<T, true>);
  register_kernel(OpId::norm, DeviceType::CPU, t, norm_kernel<T>);
  register_kernel(OpId::logsumexp, DeviceType::CPU, t, logsumexp_kernel<T>);
}

}  // namespace

void register_reduce_kernels_extra() {
  // prod and cumsum: every dtype (integers and bool give i64).
#define MG_REG_PROD_CUMSUM(E, n, T)                                         \
  register_kernel(OpId::prod, DeviceType::CPU, DType::E, prod_kernel<T>); \
  register_kernel(OpId::cumsum, DeviceType::CPU, DType::E, cumsum_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_PROD_CUMSUM)
#undef MG_REG_PROD_CUMSUM
  // max/min family: floating and integer dtypes.
  reg_ordered<double>();
  reg_ordered<float>();
  reg_ordered<Half>();
  reg_ordered<BFloat16>();
  reg_ordered<int64_t>();
  reg_ordered<int32_t>();
  reg_ordered<uint8_t>();
  // var, std, norm, logsumexp: floating dtypes.
  reg_floating<double>();
  reg_floating<float>();
  reg_floating<Half>();
  reg_floating<BFloat16>();
}

}  // namespace mg::cpu
