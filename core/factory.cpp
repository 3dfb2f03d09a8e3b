// Factories: fill on the CPU, then move to the requested device.
#include "mixgrad/core/factory.h"

#include <cmath>
#include <cstring>

#include "mixgrad/core/parallel.h"
#include "mixgrad/core/philox.h"
#include "mixgrad/core/visit_dtype.h"

namespace mg {
namespace {

// Makes a CPU tensor, lets `fill` write it, then moves it to options.device.
template <typename Fill>
Tensor make_filled(const Shape& shape, TensorOptions options, Fill&& fill) {
  Tensor cpu = empty(shape, {.dtype = options.dtype});
  fill(cpu);
  Tensor out = cpu;
  if (!options.device.is_cpu()) {
    out = empty(shape, {.dtype = options.dtype, .device = options.device});
    copy_bytes(out.data_ptr(), out.device(), cpu.data_ptr(), cpu.device(),
               std::size_t(cpu.numel()) * cpu.element_size());
  }
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}

template <typename T>
void fill_value(T* p, int64_t n, double v) {
  const T tv = static_cast<T>(static_cast<opmath_t<T>>(v));
  parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = tv;
  });
}

Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }

}  // namespace

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

Tensor full(const Shape& shape, double value, TensorOptions options) {
  return make_filled(shape, options, [&](Tensor& t) {
    visit_dtype(t.dtype(), [&]<typename T>() { fill_value(t.data<T>(), t.numel(), value); });
  });
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor arange(int64_t start, int64_t end, int64_t step, TensorOptions options) {
  MG_CHECK(step != 0, Error, "arange: step must be non-zero");
  const int64_t n = step > 0 ? std::max<int64_t>(0, (end - start + step - 1) / step)
                             : std::max<int64_t>(0, (start - end - step - 1) / -step);
  return make_filled({n}, options, [&](Tensor& t) {
    visit_dtype(t.dtype(), [&]<typename T>() {
      T* p = t.data<T>();
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<opmath_t<T>>(start + i * step));
    });
  });
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  MG_CHECK(steps >= 0, Error, "linspace: steps must be >= 0, got ", steps);
  return make_filled({steps}, options, [&](Tensor& t) {
    visit_dtype(t.dtype(), [&]<typename T>() {
      T* p = t.data<T>();
      const double d = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
      // Fill from both ends so the last value is exactly `end`.
      for (int64_t i = 0; i < steps; ++i) {
        const double v = i < (steps + 1) / 2 ? start + d * double(i) : end - d * double(steps - 1 - i);
        p[i] = static_cast<T>(static_cast<opmath_t<T>>(v));
      }
    });
  });
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  if (m < 0) m = n;
  MG_CHECK(n >= 0, Error, "eye: n must be >= 0, got ", n);
  return make_filled({n, m}, options, [&](Tensor& t) {
    visit_dtype(t.dtype(), [&]<typename T>() {
      T* p = t.data<T>();
      fill_value(p, n * m, 0.0);
      for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = static_cast<T>(static_cast<opmath_t<T>>(1));
    });
  });
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(is_floating(options.dtype), DTypeError, "rand: expected a floating dtype, got ",
           dtype_name(options.dtype));
  const int64_t n = shape_numel(shape);
  Generator& g = gen_or_default(gen);
  // f64 takes two words per value (53 random bits, as PyTorch), the others one (24 bits).
  const bool wide = options.dtype == DType::F64;
  const uint64_t seed = g.seed(), offset = g.reserve(uint64_t(wide ? (n + 1) / 2 : (n + 3) / 4));
  return make_filled(shape, options, [&](Tensor& t) {
    visit_floating(t.dtype(), "rand", [&]<typename T>() {
      T* p = t.data<T>();
      parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          if constexpr (std::is_same_v<T, double>) {
            const Philox4 r = philox_block(seed, offset, uint64_t(i / 2));
            p[i] = i % 2 == 0 ? philox_uniform_double(r.v[0], r.v[1]) : philox_uniform_double(r.v[2], r.v[3]);
            continue;
          }
          const Philox4 r = philox_block(seed, offset, uint64_t(i / 4));
          T v = static_cast<T>(static_cast<opmath_t<T>>(philox_uniform(r.v[i % 4])));
          // f16/bf16 round values within half an ulp of 1 up to 1.0; keep the range [0, 1).
          if constexpr (std::is_same_v<T, Half>) {
            if (float(v) >= 1.0f) v = Half::from_bits(0x3bff);  // 1 - 2^-11
          } else if constexpr (std::is_same_v<T, BFloat16>) {
            if (float(v) >= 1.0f) v = BFloat16::from_bits(0x3f7f);  // 1 - 2^-8
          }
          p[i] = v;
        }
      });
    });
  });
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(is_floating(options.dtype), DTypeError, "randn: expected a floating dtype, got ",
           dtype_name(options.dtype));
  const int64_t n = shape_numel(shape);
  Generator& g = gen_or_default(gen);
  // One block (4 words) gives two normals by Box-Muller on two pairs of words.
  const uint64_t seed = g.seed(), offset = g.reserve(uint64_t((n + 1) / 2));
  return make_filled(shape, options, [&](Tensor& t) {
    visit_floating(t.dtype(), "randn", [&]<typename T>() {
      T* p = t.data<T>();
      // Work on pairs (2k, 2k+1) so each block's Box-Muller transform is computed once.
      const int64_t pairs = (n + 1) / 2;
      parallel_for(0, pairs, kDefaultGrain / 2, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const Philox4 r = philox_block(seed, offset, uint64_t(k));
          const double u1 = 1.0 - philox_uniform_double(r.v[0], r.v[1]);  // (0, 1]
          const double u2 = philox_uniform_double(r.v[2], r.v[3]);
          const double rad = std::sqrt(-2.0 * std::log(u1));
          const double angle = 6.283185307179586 * u2;
          p[2 * k] = static_cast<T>(static_cast<opmath_t<T>>(rad * std::cos(angle)));
          if (2 * k + 1 < n) p[2 * k + 1] = static_cast<T>(static_cast<opmath_t<T>>(rad * std::sin(angle)));
        }
      });
    });
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(high > low, Error, "randint: expected low < high, got low=", low, " high=", high);
  const int64_t n = shape_numel(shape);
  Generator& g = gen_or_default(gen);
  const uint64_t seed = g.seed(), offset = g.reserve(uint64_t((n + 1) / 2));
  const uint64_t range = uint64_t(high - low);
  return make_filled(shape, options, [&](Tensor& t) {
    visit_dtype(t.dtype(), [&]<typename T>() {
      T* p = t.data<T>();
      parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const Philox4 r = philox_block(seed, offset, uint64_t(i / 2));
          const uint64_t w = i % 2 == 0 ? (uint64_t(r.v[0]) << 32 | r.v[1])
                                        : (uint64_t(r.v[2]) << 32 | r.v[3]);
          // Modulo bias is below 2^-40 for any range that fits in 24 bits.
          p[i] = static_cast<T>(static_cast<opmath_t<T>>(low + int64_t(w % range)));
        }
      });
    });
  });
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}

Tensor from_buffer(const void* data, const Shape& shape, TensorOptions options) {
  MG_CHECK(data != nullptr || shape_numel(shape) == 0, Error, "from_buffer: null data pointer");
  return make_filled(shape, options, [&](Tensor& t) {
    if (t.numel()) std::memcpy(t.data_ptr(), data, std::size_t(t.numel()) * t.element_size());
  });
}

Tensor scalar_tensor(double value, TensorOptions options) { return full({}, value, options); }

}  // namespace mg
