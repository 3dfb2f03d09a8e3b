// CUDA kernels of the indexing ops: cat, index_select, gather, scatter_add, masked_fill, one_hot,
// for the dtypes the CPU registers (ops/cpu/indexing_kernels.cpp), and the embedding lookup
// (ops/cpu/norm_kernels.cpp: floating weights; its backward is scatter_add). Every operand may be strided
// (its byte offsets come from an OffsetCalculator over a loop plan, 64-bit index math).
//
// Decisions a reader must know:
// - Bit movers (cat, index_select, gather, masked_fill) are instantiated per element *size*
//   (1, 2, 4, 8 bytes), not per dtype: they copy bits, so u8/bool share one kernel, f16/bf16
//   another, and so on (4 kernels per op instead of 8; compile time on this machine matters).
// - Bad indices follow the CPU's rule and text (IndexError), and nothing is read or written out of
//   bounds. The check is *deferred*: a small kernel over the index tensor publishes the first bad
//   value to the device's report slot and the host raises it at its next wait for the device
//   (cuda/host/device_check_report.h), so an op with an index costs no host synchronisation and a
//   training step with an embedding stays sync-free. Meanwhile the op's kernel treats a bad index
//   as reading nothing (zeros out; scatter_add never matches it). MG_CUDA_SYNC=1 raises the
//   error at the op.
// - scatter_add is deterministic, with no atomics: one thread per output element (outer position,
//   target v) walks the whole index line along dim in order and adds the src terms whose index is
//   v, starting from self's value: the CPU's order (self, then the terms in index order), summed
//   sequentially in opmath (f32 for f16/bf16, f64 for f64; integers in their own type with
//   wrap-around, bool ORs) and rounded once on store. Cost: every output element reads the whole
//   index line, O(self.size(dim) * index.size(dim)) index reads per outer position (threads of a
//   warp read the same index element, a broadcast). Fine for the backward of index_select/gather
//   on modest vocabularies; BERT-base's word embeddings (V = 30522, D = 768, 4096 lookups) make
//   9.6e10 index reads per backward (~0.8 TB, mostly L2; estimated ~0.1 s, not measured) — a
//   sorted (CSR) path is the follow-up when that matters. Unlike
//   the CPU (cascade_sum leaves of kSumLeaf) the sum along one target is one sequential sum, so
//   floating results agree with the CPU's within the sequential-sum bound, not bit for bit.
#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/device_checks.h"
#include "mixgrad/cuda/index_math.h"
#include "mixgrad/cuda/kernels/device_check.cuh"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/loop_plan.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

using Calc1 = OffsetCalculator<1, int64_t>;
using Calc2 = OffsetCalculator<2, int64_t>;
using Calc3 = OffsetCalculator<3, int64_t>;

// The unsigned integer of `n` bytes: the storage a bit-moving kernel copies.
template <int n>
struct Bits;
template <>
struct Bits<1> { using type = uint8_t; };
template <>
struct Bits<2> { using type = uint16_t; };
template <>
struct Bits<4> { using type = uint32_t; };
template <>
struct Bits<8> { using type = uint64_t; };
template <typename T>
using bits_t = typename Bits<int(sizeof(T))>::type;

// A 0-d tensor behaves as shape [1] (as on the CPU).
Shape shape_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.shape(); }
Strides strides_1d(const Tensor& t) { return t.dim() == 0 ? Strides{0} : t.strides(); }

template <typename I>
__device__ int64_t load_index(const char* p) {
  return int64_t(*reinterpret_cast<const I*>(p));
}

// ---- index validation (deferred: no host wait; cuda/host/device_check_report.h) ----
// Publishes the first value of `index` (row-major) outside [lo, hi) to the device's report slot.
template <typename I>
__global__ void index_check_kernel(int64_t n, Calc1 calc, const char* index, int64_t lo, int64_t hi,
                                   CheckScratch* scratch, DeviceCheckSlot slot, DeviceCheck check, int64_t bound,
                                   int64_t extra) {
  int64_t first = -1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    calc.offsets(i, off);
    const int64_t v = load_index<I>(index + off[0]);
    if (v < lo || v >= hi) {
      first = i;
      break;
    }
  }
  note_first_bad(scratch, first);
  publish_first_bad(scratch, [&](int64_t position) {
    int64_t off[1];
    calc.offsets(position, off);
    publish_device_check(slot, check, load_index<I>(index + off[0]), bound, extra);
  });
}

// Checks every value of `index` (i64 or i32, any strides) against [lo, hi) on the device: a bad
// one is raised as the CPU's IndexError at the host's next wait for the device (`check` and
// bound/extra give the message). Launches one check kernel on the current stream and waits for
// nothing; the op's own kernel reads nothing for an out-of-range index (zeros out; scatter_add
// never matches it), so nothing is read or written out of bounds meanwhile. Inside a CUDA graph
// capture the check kernel is captured too: a replay with a bad index reports it.
void check_index_values(const Tensor& index, int64_t lo, int64_t hi, DeviceCheck check, int64_t bound,
                        int64_t extra) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const Tensor scratch = zeros({kCheckScratchWords}, {.dtype = DType::I64, .device = index.device()});  // a CheckScratch
  const bool i64 = index.dtype() == DType::I64;
  const auto plan = make_plan<1>(shape_1d(index), {strides_1d(index)}, {i64 ? 8 : 4});
  const LaunchContext ctx(index.device());
  const auto calc = make_offset_calculator<1, int64_t>(plan);
  const auto* ip = static_cast<const char*>(index.data_ptr());
  auto* sp = static_cast<CheckScratch*>(scratch.data_ptr());
  const DeviceCheckSlot slot = detail::device_check_slot(index.device().index);
  if (i64) {
    index_check_kernel<int64_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, ip, lo, hi, sp, slot, check,
                                                                           bound, extra);
  } else {
    index_check_kernel<int32_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, ip, lo, hi, sp, slot, check,
                                                                           bound, extra);
  }
  MG_CUDA_CHECK_LAUNCH("index check kernel");
}

// The CPU's rule for index_select, gather and scatter_add: 0 <= index < size (PyTorch's).
void check_indices(DeviceCheck check, const Tensor& index, int64_t size, int64_t dim) {
  check_index_values(index, 0, size, check, size, dim);
}

// ---- strided bit copy: dst (src's shape, dst's strides) <- src ----
template <typename U>
__global__ void copy_bits_kernel(int64_t n, Calc2 calc, char* dst, const char* src) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    calc.offsets(i, off);
    *reinterpret_cast<U*>(dst + off[0]) = *reinterpret_cast<const U*>(src + off[1]);
  }
}

template <typename U>
void copy_bits(const Tensor& src, char* dst, const Strides& dst_strides) {
  const int64_t n = src.numel();
  if (n == 0) return;
  constexpr int64_t es = sizeof(U);
  const Strides ds = src.dim() == 0 ? Strides{0} : dst_strides;
  const auto plan = make_plan<2>(shape_1d(src), {ds, strides_1d(src)}, {es, es});
  const LaunchContext ctx(src.device());
  copy_bits_kernel<U><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, make_offset_calculator<2, int64_t>(plan), dst,
                                                                 static_cast<const char*>(src.data_ptr()));
  MG_CUDA_CHECK_LAUNCH("copy kernel");
}

// ---- cat: out = [x0 | x1 | ...] along dim; each xi (any strides) is copied into its slab ----
template <typename T>
void cat_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using U = bits_t<T>;
  const Tensor& o = out[0];
  char* base = static_cast<char*>(o.data_ptr());
  int64_t offset = 0;
  for (const Tensor& x : in) {
    copy_bits<U>(x, base + offset * o.strides()[a.dim] * int64_t(sizeof(T)), o.strides());
    offset += x.shape()[a.dim];
  }
}

// ---- index_select: out[.., j, ..] = x[.., index[j], ..] ----
// Operands over out's shape: 0 out, 1 x with its dim stride zeroed (added per index), 2 index
// (stride only along dim). Embedding launches it too (the same rule, 0 <= index < rows).
template <typename U, typename I>
__global__ void index_select_kernel_impl(int64_t n, Calc3 calc, char* out, const char* x, const char* index,
                                         int64_t size, int64_t x_dim_stride) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    calc.offsets(i, off);
    int64_t v = load_index<I>(index + off[2]);
    // A bad index (reported by check_index_values): read nothing, write zero.
    *reinterpret_cast<U*>(out + off[0]) = v >= 0 && v < size ? *reinterpret_cast<const U*>(x + off[1] + v * x_dim_stride) : U(0);
  }
}

template <typename T>
void index_select_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using U = bits_t<T>;
  const Tensor &x = in[0], &index = in[1];
  const Tensor& o = out[0];
  const int64_t dim = a.dim, size = x.shape()[dim];
  check_indices(DeviceCheck::IndexSelect, index, size, dim);
  const int64_t n = o.numel();
  if (n == 0) return;
  Strides xs = x.strides();
  xs[dim] = 0;
  Strides is(o.dim(), 0);
  is[dim] = index.dim() == 0 ? 0 : index.strides()[0];
  const bool i64 = index.dtype() == DType::I64;
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<3>(o.shape(), {o.strides(), xs, is}, {es, es, i64 ? 8 : 4});
  const auto calc = make_offset_calculator<3, int64_t>(plan);
  const LaunchContext ctx(o.device());
  auto* op = static_cast<char*>(o.data_ptr());
  const auto* xp = static_cast<const char*>(x.data_ptr());
  const auto* ip = static_cast<const char*>(index.data_ptr());
  const int64_t xsd = x.strides()[dim] * es;
  if (i64) {
    index_select_kernel_impl<U, int64_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, xp, ip, size, xsd);
  } else {
    index_select_kernel_impl<U, int32_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, xp, ip, size, xsd);
  }
  MG_CUDA_CHECK_LAUNCH("index_select kernel");
}

// ---- embedding: out [..., D] = weight [V, D] (any strides) at the rows of indices [...] ----
// The index_select kernel over out viewed as [n, D], the indices flattened to a dense [n].
template <typename T>
void embedding_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  using U = bits_t<T>;
  const Tensor& w = in[0];
  const Tensor& o = out[0];
  const int64_t v = w.shape()[0], d = w.shape()[1];
  check_index_values(in[1], 0, v, DeviceCheck::Embedding, v, 0);
  const int64_t n = o.numel();
  if (n == 0) return;
  NoGradGuard no_grad;  // the flattened copy is not part of the graph
  const Tensor index = contiguous(reshape(in[1], {-1}));  // [rows]
  const int64_t rows = index.numel();
  const bool i64 = index.dtype() == DType::I64;
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<3>({rows, d}, {Strides{d, 1}, Strides{0, w.strides()[1]}, Strides{1, 0}},
                                 {es, es, i64 ? 8 : 4});
  const auto calc = make_offset_calculator<3, int64_t>(plan);
  const LaunchContext ctx(o.device());
  auto* op = static_cast<char*>(o.data_ptr());
  const auto* wp = static_cast<const char*>(w.data_ptr());
  const auto* ip = static_cast<const char*>(index.data_ptr());
  const int64_t wsd = w.strides()[0] * es;
  if (i64) {
    index_select_kernel_impl<U, int64_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, wp, ip, v, wsd);
  } else {
    index_select_kernel_impl<U, int32_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, wp, ip, v, wsd);
  }
  MG_CUDA_CHECK_LAUNCH("embedding kernel");
}

// ---- gather: out[i][j] = x[index[i][j]][j] (dim 0 shown) ----
// Operands over index's shape: 0 out, 1 index, 2 x with its dim stride zeroed (added per index).
template <typename U, typename I>
__global__ void gather_kernel_impl(int64_t n, Calc3 calc, char* out, const char* index, const char* x,
                                   int64_t size, int64_t x_dim_stride) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    calc.offsets(i, off);
    int64_t v = load_index<I>(index + off[1]);
    // A bad index (reported by check_index_values): read nothing, write zero.
    *reinterpret_cast<U*>(out + off[0]) = v >= 0 && v < size ? *reinterpret_cast<const U*>(x + off[2] + v * x_dim_stride) : U(0);
  }
}

template <typename T>
void gather_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using U = bits_t<T>;
  const Tensor &x = in[0], &index = in[1];
  const Tensor& o = out[0];
  const int64_t dim = a.dim, size = shape_1d(x)[dim];
  check_indices(DeviceCheck::Gather, index, size, dim);
  const int64_t n = o.numel();
  if (n == 0) return;
  Strides xs = strides_1d(x);
  const int64_t xsd = xs[dim] * int64_t(sizeof(T));
  xs[dim] = 0;
  const bool i64 = index.dtype() == DType::I64;
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<3>(shape_1d(index), {strides_1d(o), strides_1d(index), xs}, {es, i64 ? 8 : 4, es});
  const auto calc = make_offset_calculator<3, int64_t>(plan);
  const LaunchContext ctx(o.device());
  auto* op = static_cast<char*>(o.data_ptr());
  const auto* xp = static_cast<const char*>(x.data_ptr());
  const auto* ip = static_cast<const char*>(index.data_ptr());
  if (i64) {
    gather_kernel_impl<U, int64_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, ip, xp, size, xsd);
  } else {
    gather_kernel_impl<U, int32_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, calc, op, ip, xp, size, xsd);
  }
  MG_CUDA_CHECK_LAUNCH("gather kernel");
}

// ---- scatter_add: out = self; out[index[i][j]][j] += src[i][j] (dim 0 shown) ----
// How one output element accumulates: opmath for floating types (f32 for f16/bf16), the type
// itself for integers (wrap-around, as on the CPU), OR for bool.
template <typename T>
struct ScatterAcc {
  using type = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, opmath_t<T>, T>;
  __device__ static type add(type acc, T v) {
    if constexpr (std::is_same_v<T, bool>) {
      return acc || v;
    } else if constexpr (std::is_floating_point_v<type>) {
      return acc + static_cast<type>(v);
    } else {
      return fn::wrapping_add(acc, static_cast<type>(v));  // integers wrap, as the CPU's (no UB)
    }
  }
};

// Thread i handles target v = i / outer and outer position o = i % outer (consecutive threads:
// consecutive outer positions, so an embedding backward's writes and src reads coalesce).
// Operands over the outer positions (index's shape with dim collapsed): 0 out, 1 index, 2 src;
// their strides along dim (bytes) are passed separately.
template <typename T, typename I>
__global__ void scatter_add_kernel_impl(int64_t n, int64_t outer, Calc3 calc, char* out, const char* index,
                                        const char* src, int64_t size, int64_t k, int64_t out_d, int64_t index_d,
                                        int64_t src_d) {
  using A = ScatterAcc<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = i / outer, o = i % outer;
    int64_t off[3];
    calc.offsets(o, off);
    T* dst = reinterpret_cast<T*>(out + off[0] + v * out_d);
    // the sum of (self, the terms with index v in index order), in A::type (opmath for floats)
    typename A::type acc = static_cast<typename A::type>(*dst);
    for (int64_t j = 0; j < k; ++j) {
      int64_t t = load_index<I>(index + off[1] + j * index_d);
      if (t == v) acc = A::add(acc, *reinterpret_cast<const T*>(src + off[2] + j * src_d));
    }
    *dst = static_cast<T>(acc);
  }
}

template <typename T>
void scatter_add_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &self = in[0], &index = in[1], &src = in[2];
  const Tensor& o = out[0];
  const int64_t dim = a.dim, size = shape_1d(self)[dim];
  check_indices(DeviceCheck::ScatterAdd, index, size, dim);
  if (o.data_ptr() != self.data_ptr()) copy_bits<bits_t<T>>(self, static_cast<char*>(o.data_ptr()), strides_1d(o));
  if (index.numel() == 0) return;
  Shape outer_shape = shape_1d(index);
  const int64_t k = outer_shape[dim];
  outer_shape[dim] = 1;
  const int64_t outer = shape_numel(outer_shape);
  const int64_t n = outer * size;
  const Strides os = strides_1d(o), is = strides_1d(index), ss = strides_1d(src);
  const bool i64 = index.dtype() == DType::I64;
  const int64_t isz = i64 ? 8 : 4;
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<3>(outer_shape, {os, is, ss}, {es, isz, es});
  const auto calc = make_offset_calculator<3, int64_t>(plan);
  const LaunchContext ctx(o.device());
  auto* op = static_cast<char*>(o.data_ptr());
  const auto* ip = static_cast<const char*>(index.data_ptr());
  const auto* sp = static_cast<const char*>(src.data_ptr());
  const int64_t od = os[dim] * es, idd = is[dim] * isz, sd = ss[dim] * es;
  if (i64) {
    scatter_add_kernel_impl<T, int64_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, outer, calc, op, ip, sp, size,
                                                                                    k, od, idd, sd);
  } else {
    scatter_add_kernel_impl<T, int32_t><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(n, outer, calc, op, ip, sp, size,
                                                                                    k, od, idd, sd);
  }
  MG_CUDA_CHECK_LAUNCH("scatter_add kernel");
}

// ---- masked_fill: out = mask ? value : x; mask bool broadcast to x's shape ----
template <typename U>
__global__ void masked_fill_kernel_impl(int64_t n, Calc3 calc, char* out, const char* x, const char* mask, U value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    calc.offsets(i, off);
    *reinterpret_cast<U*>(out + off[0]) =
        *reinterpret_cast<const bool*>(mask + off[2]) ? value : *reinterpret_cast<const U*>(x + off[1]);
  }
}

template <typename T>
void masked_fill_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using U = bits_t<T>;
  const Tensor &x = in[0], &mask = in[1];
  const Tensor& o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  T value;  // converted as on the CPU
  if constexpr (std::is_same_v<T, bool>) {
    value = a.alpha != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    value = static_cast<T>(a.alpha);  // range checked by the op's inference
  } else {
    value = static_cast<T>(static_cast<opmath_t<T>>(a.alpha));
  }
  U bits;
  std::memcpy(&bits, &value, sizeof(U));
  constexpr int64_t es = sizeof(T);
  const auto plan =
      make_plan<3>(o.shape(), {o.strides(), x.strides(), broadcast_strides(mask, o.shape())}, {es, es, 1});
  const LaunchContext ctx(o.device());
  masked_fill_kernel_impl<U><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
      n, make_offset_calculator<3, int64_t>(plan), static_cast<char*>(o.data_ptr()),
      static_cast<const char*>(x.data_ptr()), static_cast<const char*>(mask.data_ptr()), bits);
  MG_CUDA_CHECK_LAUNCH("masked_fill kernel");
}

// ---- one_hot: out[e, c] = (index[e] == c); index i64/i32 [...], out dense i64 [..., classes] ----
template <typename I>
__global__ void one_hot_kernel_impl(int64_t n, int64_t classes, Calc1 calc, int64_t* out, const char* index) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    calc.offsets(i / classes, off);
    out[i] = load_index<I>(index + off[0]) == i % classes ? 1 : 0;
  }
}

template <typename I>
void one_hot_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor& index = in[0];
  const Tensor& o = out[0];
  const int64_t classes = a.ints.at(0);
  check_index_values(index, 0, classes, DeviceCheck::OneHot, classes, 0);
  const int64_t n = o.numel();
  if (n == 0) return;
  const auto plan = make_plan<1>(shape_1d(index), {strides_1d(index)}, {int64_t(sizeof(I))});
  const LaunchContext ctx(o.device());
  one_hot_kernel_impl<I><<<ctx.blocks(n), kThreads, 0, ctx.stream>>>(
      n, classes, make_offset_calculator<1, int64_t>(plan), static_cast<int64_t*>(o.data_ptr()),
      static_cast<const char*>(index.data_ptr()));
  MG_CUDA_CHECK_LAUNCH("one_hot kernel");
}

}  // namespace

void register_indexing_kernels() {
#define MG_REG_CUDA_INDEXING(E, n, T)                                                     \
  register_kernel(OpId::cat, DeviceType::CUDA, DType::E, cat_kernel<T>);                  \
  register_kernel(OpId::index_select, DeviceType::CUDA, DType::E, index_select_kernel<T>); \
  register_kernel(OpId::gather, DeviceType::CUDA, DType::E, gather_kernel<T>);            \
  register_kernel(OpId::scatter_add, DeviceType::CUDA, DType::E, scatter_add_kernel<T>);  \
  register_kernel(OpId::masked_fill, DeviceType::CUDA, DType::E, masked_fill_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_CUDA_INDEXING)
#undef MG_REG_CUDA_INDEXING
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {  // the CPU's dtypes: floating weights
    register_kernel(OpId::embedding, DeviceType::CUDA, dt,
                    dt == DType::F64 ? embedding_kernel<double>
                    : dt == DType::F32 ? embedding_kernel<float>
                    : dt == DType::F16 ? embedding_kernel<Half>
                                       : embedding_kernel<BFloat16>);
  }
  register_kernel(OpId::one_hot, DeviceType::CUDA, DType::I64, one_hot_kernel<int64_t>);
  register_kernel(OpId::one_hot, DeviceType::CUDA, DType::I32, one_hot_kernel<int32_t>);
}

}  // namespace mg::cuda
