// CPU kernels for clone / to_dtype / to_device / copy: a strided converting copy. Dense
// f32 <-> f16/bf16 conversions use the bulk converters (F16C/AVX-512 when available).
#include <algorithm>
#include <cstring>
#include <vector>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/parallel.h"
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

// Whether src is a dense tensor of dst's shape with its last two dimensions swapped in memory
// (x.transpose(-1, -2) of a contiguous tensor: strides [..., 1, R] for [..., R, C]) and dst is
// contiguous: then transposed_copy moves it in tiles.
bool is_tile_transpose(const Tensor& src, const Tensor& dst) {
  const int64_t d = src.dim();
  if (d < 2 || src.shape() != dst.shape() || !dst.is_contiguous()) return false;
  const Shape& sh = src.shape();
  const int64_t rows = sh[std::size_t(d - 2)], cols = sh[std::size_t(d - 1)];
  if (rows < 8 || cols < 8) return false;  // a thin matrix gains nothing from tiles
  const auto& st = src.strides();
  if (st[std::size_t(d - 2)] != 1 || st[std::size_t(d - 1)] != rows) return false;
  int64_t expected = rows * cols;
  for (int64_t k = d - 3; k >= 0; --k) {
    if (sh[std::size_t(k)] != 1 && st[std::size_t(k)] != expected) return false;
    expected *= sh[std::size_t(k)];
  }
  return true;
}

// dst[..., r, c] = cast(src[..., r, c]) for is_tile_transpose's layouts, in 32 x 32 tiles so that
// both sides stay in cache: the element loop strode through src at every step (a [256, 1024] bf16
// transpose took 0.3 ms, 1 ns per element). The same per-element cast as unary_loop's.
template <typename D, typename S, typename Cast>
void transposed_copy(const Tensor& src, const Tensor& dst, Cast cast) {
  constexpr int64_t kTile = 32;
  const int64_t d = src.dim(), rows = src.shape()[std::size_t(d - 2)], cols = src.shape()[std::size_t(d - 1)];
  const int64_t batch = src.numel() / (rows * cols), row_tiles = (rows + kTile - 1) / kTile;
  const S* in = static_cast<const S*>(src.data_ptr());  // [batch][cols][rows]
  D* out = static_cast<D*>(dst.data_ptr());            // [batch][rows][cols]
  parallel_for(0, batch * row_tiles, std::max<int64_t>(1, kDefaultGrain / (kTile * cols)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / row_tiles, r0 = (t % row_tiles) * kTile, r1 = std::min(rows, r0 + kTile);
      const S* ib = in + b * rows * cols;
      D* ob = out + b * rows * cols;
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) ob[r * cols + c] = cast(ib[c * rows + r]);
        }
      }
    }
  });
}

// dst (any layout, the output shape) <- src broadcast and converted.
template <typename S>
void convert_into(const Tensor& src, const Tensor& dst) {
  const bool tiles = is_tile_transpose(src, dst);
  if (src.dtype() == dst.dtype()) {
    if (tiles) {
      transposed_copy<S, S>(src, dst, [](S x) { return x; });  // the bits as they are
      return;
    }
    copy_bits(src, dst);
    return;
  }
  if (bulk_convert(src, dst)) return;
  visit_dtype(dst.dtype(), [&]<typename D>() {
    if constexpr (std::is_same_v<D, bool>) {
      unary_loop<bool, S>(src, dst, [](auto x) { return x != decltype(x)(0); });
    } else {
      const auto cast = [](auto x) { return fn::cast_value<opmath_t<D>>(x); };
      if (tiles) {
        transposed_copy<D, S>(src, dst, [&](S x) { return static_cast<D>(cast(static_cast<opmath_t<S>>(x))); });
      } else {
        unary_loop<D, S>(src, dst, cast);
      }
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
