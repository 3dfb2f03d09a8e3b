// Factories: each describes its values as a FillSpec (core/fill_values.h) and fills the output on
// its own device: the CPU loop below, or the function the device's backend registered
// (core/device_fill.h; CUDA: a kernel on the current stream). Both run fill_item(), so a seed
// gives the same bits on every device, and a random factory advances the generator by the same
// number of Philox blocks wherever it runs.
// Decision: the output is allocated before the generator is advanced, so a factory that fails for
// want of a device (DeviceError) leaves the stream where it was.
#include "mixgrad/core/factory.h"
#include "mixgrad/core/graph_rng.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mixgrad/core/device_fill.h"
#include "mixgrad/core/fill_values.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/visit_dtype.h"

namespace mg {
namespace {

template <FillKind K, typename T>
void fill_cpu_kind(T* p, int64_t n, const FillSpec& s) {
  const int64_t items = fill_item_count(K, dtype_v<T>, n);
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / fill_per_item(K, dtype_v<T> == DType::F64));
  parallel_for(0, items, grain, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) fill_item<K>(p, n, s, it);
  });
}

// The CPU filler: `t` dense on the CPU.
void fill_cpu(Tensor& t, const FillSpec& s) {
  visit_dtype(t.dtype(), [&]<typename T>() {
    T* p = t.data<T>();
    const int64_t n = t.numel();
    switch (s.kind) {
      case FillKind::Full: return fill_cpu_kind<FillKind::Full>(p, n, s);
      case FillKind::Arange: return fill_cpu_kind<FillKind::Arange>(p, n, s);
      case FillKind::Linspace: return fill_cpu_kind<FillKind::Linspace>(p, n, s);
      case FillKind::Eye: return fill_cpu_kind<FillKind::Eye>(p, n, s);
      case FillKind::Rand: return fill_cpu_kind<FillKind::Rand>(p, n, s);
      case FillKind::Randn: return fill_cpu_kind<FillKind::Randn>(p, n, s);
      case FillKind::Randint: return fill_cpu_kind<FillKind::Randint>(p, n, s);
    }
  });
}

bool is_random(FillKind k) { return k == FillKind::Rand || k == FillKind::Randn || k == FillKind::Randint; }

// Allocates the output on options.device, reserves the random kinds' Philox blocks of `gen` (the
// default generator when null), and fills it there.
Tensor make_filled(const Shape& shape, TensorOptions options, FillSpec spec, Generator* gen = nullptr) {
  // zeros/ones/full honour options.memory_format (their values do not depend on the order); the
  // random draws, arange, linspace and eye are defined in the logical order, and a channels-last
  // randn holding other values than randn(...).to(ChannelsLast) would surprise: refused.
  MG_CHECK(options.memory_format == MemoryFormat::Contiguous || spec.kind == FillKind::Full, Error,
           "rand, randn, randint, arange, linspace and eye make contiguous tensors; got memory_format ",
           memory_format_name(options.memory_format), " for shape ", shape,
           "\n  hint: convert the result with .to(MemoryFormat::ChannelsLast)");
  Tensor out = empty(shape, {.dtype = options.dtype, .device = options.device, .memory_format = options.memory_format});
  const int64_t n = out.numel();
  if (is_random(spec.kind)) {
    Generator& g = gen ? *gen : default_generator();
    check_not_captured(g, "a random factory (rand, randn, randint)");
    const Generator::Position p = g.draw(uint64_t(fill_item_count(spec.kind, options.dtype, n)));
    spec.seed = p.seed;
    spec.offset = p.offset;
  }
  if (n > 0) {
    if (out.device().is_cpu()) {
      fill_cpu(out, spec);
    } else if (DeviceFillFn fn = device_fill_fn(out.device().type)) {
      fn(out, spec);
    } else {  // a backend without fill kernels: the same values, filled here and copied
      Tensor cpu = empty(shape, {.dtype = options.dtype});
      fill_cpu(cpu, spec);
      copy_bytes(out.data_ptr(), out.device(), cpu.data_ptr(), cpu.device(), std::size_t(n) * cpu.element_size());
    }
  }
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}

}  // namespace

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

bool fill_value_holds(DType t, double v) {
  if (is_integral(t)) return integral_holds(t, v);
  double max = 0;
  switch (t) {
    case DType::F32: max = 0x1.fffffep127; break;
    case DType::F16: max = 65504.0; break;
    case DType::BF16: max = 0x1.fep127; break;
    default: return true;  // f64 and bool hold every double
  }
  return !std::isfinite(v) || std::fabs(v) <= max;
}

Tensor full(const Shape& shape, double value, TensorOptions options) {
  MG_CHECK(fill_value_holds(options.dtype, value), Error, "full: value ", value, " cannot be converted to ",
           dtype_name(options.dtype), " without overflow");
  return make_filled(shape, options, {.kind = FillKind::Full, .value = value});
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }

Tensor arange(int64_t start, int64_t end, int64_t step, TensorOptions options) {
  MG_CHECK(step != 0, Error, "arange: step must be non-zero");
  // A step away from `end` gives an empty range (as Python's range and NumPy; PyTorch refuses).
  // In 128 bits: end - start + step overflowed int64 near its ends (arange(INT64_MIN, INT64_MAX)).
  const __int128 span = step > 0 ? __int128(end) - start : __int128(start) - end;
  const __int128 by = step > 0 ? __int128(step) : -__int128(step);
  const __int128 count = span <= 0 ? 0 : (span + by - 1) / by;
  MG_CHECK(count <= std::numeric_limits<int64_t>::max(), Error, "arange: [", start, ", ", end, ") by ", step,
           " has more elements than a tensor can hold");
  const int64_t n = int64_t(count);
  return make_filled({n}, options, {.kind = FillKind::Arange, .start = start, .step = step});
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  MG_CHECK(steps >= 0, Error, "linspace: steps must be >= 0, got ", steps);
  // Every value lies between the ends (each is computed from the nearer one), so checking the ends
  // keeps an integer dtype's conversions defined.
  MG_CHECK(integral_holds(options.dtype, start) && integral_holds(options.dtype, end), Error, "linspace: start ",
           start, " or end ", end, " cannot be converted to ", dtype_name(options.dtype), " without overflow");
  // An integer dtype takes its ends as integers first (truncated), as PyTorch's: linspace(0.5,
  // 3.7, 3) in i64 steps from 0 to 3 by 1.5, giving [0, 1, 3].
  if (is_integral(options.dtype) && options.dtype != DType::Bool) {
    start = std::trunc(start);
    end = std::trunc(end);
  }
  const double d = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  return make_filled({steps}, options,
                     {.kind = FillKind::Linspace, .lin_start = start, .lin_end = end, .lin_delta = d});
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  MG_CHECK(m >= -1, Error, "eye: m must be >= 0 (or -1: m = n), got ", m);
  if (m < 0) m = n;
  MG_CHECK(n >= 0, Error, "eye: n must be >= 0, got ", n);
  return make_filled({n, m}, options, {.kind = FillKind::Eye, .cols = m});
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(is_floating(options.dtype), DTypeError, "rand: expected a floating dtype, got ",
           dtype_name(options.dtype));
  return make_filled(shape, options, {.kind = FillKind::Rand}, gen);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(is_floating(options.dtype), DTypeError, "randn: expected a floating dtype, got ",
           dtype_name(options.dtype));
  return make_filled(shape, options, {.kind = FillKind::Randn}, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* gen) {
  MG_CHECK(high > low, Error, "randint: expected low < high, got low=", low, " high=", high);
  // The drawn values are low..high-1; each must be a value of the dtype (bool: 0 and 1).
  // (i64 holds every int64; double(high - 1) could round up to 2^63.)
  const bool fits = options.dtype == DType::Bool  ? low >= 0 && high <= 2
                    : options.dtype == DType::I64 ? true
                                                  : integral_holds(options.dtype, double(low)) &&
                                                        integral_holds(options.dtype, double(high - 1));
  MG_CHECK(fits, Error, "randint: the range [", low, ", ", high, ") does not fit in ", dtype_name(options.dtype));
  return make_filled(shape, options,
                     {.kind = FillKind::Randint, .low = low, .range = uint64_t(high) - uint64_t(low)}, gen);
}

// PyTorch's default memory_format=torch.preserve_format: a channels-last input gives a
// channels-last result, anything else a contiguous one (mixgrad's tensors are dense in one of the
// two; a view with other strides gets its suggested format, as PyTorch's non-dense inputs do).
static TensorOptions like_options(const Tensor& t) {
  return {.dtype = t.dtype(), .device = t.device(), .memory_format = t.suggest_memory_format()};
}
Tensor empty_like(const Tensor& t) { return empty(t.shape(), like_options(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), like_options(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), like_options(t)); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, like_options(t)); }

Tensor from_buffer(const void* data, const Shape& shape, TensorOptions options) {
  MG_CHECK(data != nullptr || shape_numel(shape) == 0, Error, "from_buffer: null data pointer");
  MG_CHECK(options.memory_format == MemoryFormat::Contiguous, Error, "from_buffer: the data is in row-major order, "
           "so the tensor is contiguous; got memory_format ", memory_format_name(options.memory_format),
           "\n  hint: convert the result with .to(MemoryFormat::ChannelsLast)");
  Tensor out = empty(shape, {.dtype = options.dtype, .device = options.device});
  // Host memory straight into the output (one copy, host to device when the device is not the CPU).
  if (out.numel()) copy_bytes(out.data_ptr(), out.device(), data, Device::cpu(), std::size_t(out.numel()) * out.element_size());
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}

// Not a fill: the scalar of `x op v` overflows to inf as PyTorch's arithmetic does, so only the
// integer dtypes' check applies.
Tensor scalar_tensor(double value, TensorOptions options) {
  MG_CHECK(integral_holds(options.dtype, value), Error, "scalar_tensor: value ", value, " cannot be converted to ",
           dtype_name(options.dtype), " without overflow");
  return make_filled({}, options, {.kind = FillKind::Full, .value = value});
}

}  // namespace mg
