// CPU kernels for clone / to_dtype / to_device / copy: a strided converting copy. Dense
// f32 <-> f16/bf16 conversions use the bulk converters (F16C/AVX-512 when available).
#include <cstring>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/cpu/loops.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {


// Dense f32 <-> 16-bit conversions through the bulk converters; false when not applicable.
// Both operands dense in one memory format (contiguous, or both channels-last) are flat arrays
// in the same element order.
bool bulk_convert(const Tensor& src, const Tensor& dst) {
  if (src.shape() != dst.shape()) return false;
  const bool flat = (src.is_contiguous() && dst.is_contiguous()) ||
                    (src.is_contiguous(MemoryFormat::ChannelsLast) && dst.is_contiguous(MemoryFormat::ChannelsLast));
  if (!flat) return false;
  const DType s = src.dtype(), d = dst.dtype();
  const int64_t n = src.numel();
  const void* in = src.data_ptr();
  void* out = dst.data_ptr();
  auto run = [&](auto convert, auto* typed_in, auto* typed_out) {
    parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) { convert(typed_in + b, typed_out + b, e - b); });
  };
  if (s == DType::F32 && d == DType::F16) {
    run(convert_f32_to_f16, static_cast<const float*>(in), static_cast<Half*>(out));
  } else if (s == DType::F16 && d == DType::F32) {
    run(convert_f16_to_f32, static_cast<const Half*>(in), static_cast<float*>(out));
  } else if (s == DType::F32 && d == DType::BF16) {
    run(convert_f32_to_bf16, static_cast<const float*>(in), static_cast<BFloat16*>(out));
  } else if (s == DType::BF16 && d == DType::F32) {
    run(convert_bf16_to_f32, static_cast<const BFloat16*>(in), static_cast<float*>(out));
  } else {
    return false;
  }
  return true;
}

// Same dtype: the bytes are copied as they are, runs with memcpy. Through f32, an f16/bf16
// signalling NaN came back quiet (a loaded state dict differed from the file; PyTorch keeps it).
void copy_bits(const Tensor& src, const Tensor& dst) {
  const int64_t es = dst.element_size();
  const auto plan = make_elementwise_plan<2>(dst.shape(), {dst.strides(), broadcast_strides(src, dst.shape())}, {es, es});
  run_plan<2>(plan, {static_cast<char*>(dst.data_ptr()), static_cast<char*>(src.data_ptr())},
              [es](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                if (s[0] == es && s[1] == es) {
                  std::memcpy(p[0], p[1], std::size_t(n * es));
                  return;
                }
                for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], std::size_t(es));
              });
}

// dst (any layout, the output shape) <- src broadcast and converted.
template <typename S>
void convert_into(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype()) {
    copy_bits(src, dst);
    return;
  }
  if (bulk_convert(src, dst)) return;
  visit_dtype(dst.dtype(), [&]<typename D>() {
    if constexpr (std::is_same_v<D, bool>) {
      unary_loop<bool, S>(src, dst, [](auto x) { return x != decltype(x)(0); });
    } else {
      unary_loop<D, S>(src, dst, [](auto x) { return fn::cast_value<opmath_t<D>>(x); });
    }
  });
}

template <typename S>
void clone_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  convert_into<S>(in[0], out[0]);
}

// copy(dst, src) -> out: out may be dst itself (copy_).
template <typename S>
void copy_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  convert_into<S>(in[1], out[0]);
}

}  // namespace

void register_copy_kernels() {
#define MG_REG_COPY(E, n, T)                                                         \
  register_kernel(OpId::clone, DeviceType::CPU, DType::E, clone_kernel<T>);          \
  register_kernel(OpId::to_dtype, DeviceType::CPU, DType::E, clone_kernel<T>);       \
  register_kernel(OpId::to_device, DeviceType::CPU, DType::E, clone_kernel<T>);      \
  register_kernel(OpId::copy, DeviceType::CPU, DType::E, copy_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_COPY)
#undef MG_REG_COPY
}

}  // namespace mg::cpu
