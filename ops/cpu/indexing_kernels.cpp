// CPU kernels of the shape and indexing ops: cat, index_select, gather, scatter_add, masked_fill,
// one_hot. They move bits (no arithmetic) except scatter_add, which adds in opmath and rounds
// each output element once after all its additions. A floating scatter_add sums what reaches one
// output element (self, then the terms in index order) by the summation rule (core/cascade_sum.h):
// in-order leaves of kSumLeaf per target, combined pairwise — so embedding backward (10^6 lookups
// of one row) is accurate to O(log n) ulps, whatever the thread count; below kSumLeaf terms per
// target it is the plain in-order sum.
//
// Index values are validated while they are read: an index out of range throws IndexError with
// the value and the valid range, and nothing is ever read or written out of bounds. The range is
// 0 <= index < size, as PyTorch's: a negative index is an error, not a count from the end (a -100
// padding label given to gather would otherwise read a real row silently).
//
// Speed: every kernel walks its operands with the strided plans of ops/cpu/loops.h (contiguous
// dims merged), copies contiguous rows with memcpy, and for gather/scatter_add runs whole lines
// along `dim` per outer position, so no per-element offset recomputation is needed. scatter_add
// parallelises over outer positions only: two outer positions never write the same output line.
// A floating scatter_add runs its lines in one pass that adds and counts leaves together, blocks of
// lines at a time when they are adjacent in memory (ops/cpu/scatter_add_lines.h); one whose index
// rows each hold one target (embedding backward) runs row by row instead
// (ops/cpu/scatter_add_rows.h): the same sums, read and added a contiguous row at a time.
#include <cstring>
#include <vector>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/cpu/loops.h"
#include "mixgrad/ops/cpu/reducers.h"
#include "mixgrad/ops/cpu/scatter_add_lines.h"
#include "mixgrad/ops/cpu/scatter_add_rows.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

// A 0-d tensor behaves as shape [1] in the indexing kernels.
Shape shape_1d(const Tensor& t) { return t.dim() == 0 ? Shape{1} : t.shape(); }
Strides strides_1d(const Tensor& t) { return t.dim() == 0 ? Strides{1} : t.strides(); }

template <typename I>
int64_t checked_index(const char* op, I raw, int64_t size, int64_t dim) {
  const int64_t v = int64_t(raw);
  MG_CHECK(v >= 0 && v < size, IndexError, op, ": index ", v, " is out of range for dim ", dim,
           " of size ", size, " (expected 0 <= index < ", size, ")");
  return v;
}

// Calls f.template operator()<I>() with I = int64_t or int32_t, the index tensor's type.
template <typename F>
void visit_index(DType t, F&& f) {
  if (t == DType::I64) {
    f.template operator()<int64_t>();
  } else {
    MG_ASSERT(t == DType::I32, "index dtype ", dtype_name(t));
    f.template operator()<int32_t>();
  }
}

// dst (given by its first element and strides, src's shape) <- src, elementwise copy of T; runs
// that are contiguous on both sides go through memcpy.
template <typename T>
void copy_strided(const Tensor& src, char* dst, const Strides& dst_strides) {
  if (src.numel() == 0) return;
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<2>(shape_1d(src), {dst_strides.empty() ? Strides{1} : dst_strides, strides_1d(src)},
                                 {es, es});
  run_plan<2>(plan, {dst, static_cast<char*>(src.data_ptr())},
              [&](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                if (s[0] == es && s[1] == es) {
                  std::memcpy(p[0], p[1], std::size_t(n * es));
                } else {
                  for (int64_t i = 0; i < n; ++i)
                    std::memcpy(p[0] + i * s[0], p[1] + i * s[1], std::size_t(es));
                }
              });
}

// ---- cat ----
// out = [x0 | x1 | ...] along dim: each input xi [..., ni, ...] (any strides) is copied into its
// slab out[..., offset_i : offset_i + ni, ...] of the dense output [..., sum ni, ...].
template <typename T>
void cat_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor& o = out[0];
  const int64_t dim = a.dim;
  char* base = static_cast<char*>(o.data_ptr());
  int64_t offset = 0;
  for (const Tensor& x : in) {
    copy_strided<T>(x, base + offset * o.strides()[dim] * int64_t(sizeof(T)), o.strides());
    offset += x.shape()[dim];
  }
}

// ---- index_select ----
// Copies a block of `shape` with source byte strides into a dense destination, merging dims
// once up front; a fully contiguous block is one memcpy.
struct BlockCopier {
  Shape shape;      // merged dims, size-1 dims dropped
  Strides strides;  // source, in bytes
  int64_t bytes;    // bytes of the whole block
  int64_t es;
  bool dense;

  BlockCopier(const Shape& block, const Strides& src_strides, int64_t elem_size) : es(elem_size) {
    const auto plan = make_plan<2>(block, {contiguous_strides(block), src_strides}, {es, es});
    shape = plan.shape;
    strides = plan.strides[1];
    bytes = shape_numel(block) * es;
    dense = shape.size() == 1 && strides[0] == es;
  }

  void copy(char* dst, const char* src) const {
    if (dense) {
      std::memcpy(dst, src, std::size_t(bytes));
      return;
    }
    const int64_t nd = int64_t(shape.size());
    const int64_t inner = shape.back(), inner_stride = strides.back();
    std::vector<int64_t> idx(nd, 0);
    const int64_t rows = bytes / es / inner;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t off = 0;
      for (int64_t d = 0; d + 1 < nd; ++d) off += idx[d] * strides[d];
      const char* s = src + off;
      for (int64_t i = 0; i < inner; ++i, dst += es) std::memcpy(dst, s + i * inner_stride, std::size_t(es));
      for (int64_t d = nd - 2; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
  }
};

// out[o, j, i] = x[o, index[j], i]: x [outer, size, inner] around dim (any strides), index [k]
// (or 0-d), out dense [outer, k, inner]. Each (o, j) row of `inner` elements is one memcpy when
// x's inner block is contiguous.
template <typename T>
void index_select_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &x = in[0], &index = in[1];
  const Tensor& o = out[0];
  MG_ASSERT(o.is_contiguous(), "index_select writes a dense output");
  const int64_t dim = a.dim;
  const int64_t size = x.shape()[dim];
  const int64_t k = index.numel();
  // Read and validate every index value before touching the output.
  std::vector<int64_t> idx(static_cast<std::size_t>(k));
  visit_index(index.dtype(), [&]<typename I>() {
    const I* ip = static_cast<const I*>(index.data_ptr());
    const int64_t is = index.dim() == 0 ? 0 : index.strides()[0];
    for (int64_t j = 0; j < k; ++j) idx[j] = checked_index("index_select", ip[j * is], size, dim);
  });
  if (o.numel() == 0) return;

  constexpr int64_t es = sizeof(T);
  const Shape outer_shape(x.shape().begin(), x.shape().begin() + dim);
  const Strides outer_strides(x.strides().begin(), x.strides().begin() + dim);
  const Shape inner_shape(x.shape().begin() + dim + 1, x.shape().end());
  const Strides inner_strides(x.strides().begin() + dim + 1, x.strides().end());
  const BlockCopier block(inner_shape, inner_strides, es);
  const int64_t inner = shape_numel(inner_shape);
  const int64_t outer = shape_numel(outer_shape);
  const int64_t xs_dim = x.strides()[dim] * es;
  const char* xp = static_cast<const char*>(x.data_ptr());
  char* op = static_cast<char*>(o.data_ptr());
  const int64_t rows = outer * k;
  const int64_t grain = std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(inner, 1));
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    int64_t cur_outer = -1, outer_off = 0;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t oi = r / k, j = r % k;
      if (oi != cur_outer) {
        // Byte offset of outer position oi in x.
        cur_outer = oi;
        outer_off = 0;
        int64_t rem = oi;
        for (int64_t d = int64_t(outer_shape.size()) - 1; d >= 0; --d) {
          outer_off += (rem % outer_shape[d]) * outer_strides[d] * es;
          rem /= outer_shape[d];
        }
      }
      const char* src = xp + outer_off + idx[j] * xs_dim;
      char* dst = op + r * inner * es;
      if (inner == 1) {
        std::memcpy(dst, src, std::size_t(es));
      } else {
        block.copy(dst, src);
      }
    }
  });
}

// ---- gather / scatter_add: whole lines along dim per outer position ----
// The outer iteration runs over index's shape with dim collapsed to 1; for each outer position
// the kernel walks index.size(dim) elements along dim.
struct LineGeometry {
  Shape outer;     // index shape with shape[dim] = 1
  int64_t k;       // index.size(dim)
  int64_t size;    // size of dim in the indexed tensor (x for gather, self for scatter_add)
  int64_t dim;
};

LineGeometry line_geometry(const Tensor& indexed, const Tensor& index, int64_t dim_attr) {
  LineGeometry g;
  g.dim = indexed.dim() == 0 ? 0 : dim_attr;
  g.outer = shape_1d(index);
  g.k = g.outer[g.dim];
  g.outer[g.dim] = 1;
  g.size = shape_1d(indexed)[g.dim];
  return g;
}

// out[i][j] = x[index[i][j]][j] (dim 0 shown); index and out have the same shape, x the same rank.
template <typename T>
void gather_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &x = in[0], &index = in[1];
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  const LineGeometry g = line_geometry(x, index, a.dim);
  const Strides os = strides_1d(o), xs = strides_1d(x), is = strides_1d(index);
  const int64_t os_d = os[g.dim], xs_d = xs[g.dim], is_d = is[g.dim];
  visit_index(index.dtype(), [&]<typename I>() {
    const auto plan = make_plan<3>(g.outer, {os, is, xs}, {int64_t(sizeof(T)), int64_t(sizeof(I)), int64_t(sizeof(T))});
    run_plan<3>(
        plan,
        {static_cast<char*>(o.data_ptr()), static_cast<char*>(index.data_ptr()), static_cast<char*>(x.data_ptr())},
        [&](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
          for (int64_t t = 0; t < n; ++t) {
            T* op = reinterpret_cast<T*>(p[0] + t * s[0]);
            const I* ip = reinterpret_cast<const I*>(p[1] + t * s[1]);
            const T* xp = reinterpret_cast<const T*>(p[2] + t * s[2]);
            for (int64_t j = 0; j < g.k; ++j) {
              op[j * os_d] = xp[checked_index("gather", ip[j * is_d], g.size, g.dim) * xs_d];
            }
          }
        },
        std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(g.k, 1)));
  });
}

// The row path of a floating scatter_add (ops/cpu/scatter_add_rows.h): along dim 0, index and src
// contiguous with one shape, the output contiguous with the same row shape, and every index row
// one target (embedding backward). Reads each index row once, validating its target; returns
// false at the first row that holds two targets (the general kernel then runs, and validates).
template <typename T>
bool scatter_add_by_rows(const Tensor& o, const Tensor& index, const Tensor& src, int64_t dim) {
  if (dim != 0 || index.dim() < 2 || !index.is_contiguous() || !src.is_contiguous() || !o.is_contiguous() ||
      src.shape() != index.shape() || o.dim() != index.dim()) {
    return false;
  }
  for (int64_t k = 1; k < index.dim(); ++k) {
    if (o.shape()[k] != index.shape()[k]) return false;
  }
  const int64_t n = index.shape()[0], d = index.numel() / n, size = o.shape()[0];
  if (d < 16) return false;  // narrow rows: the general kernel is as fast
  std::vector<int64_t> target(static_cast<std::size_t>(n));
  bool one_target_per_row = true;
  visit_index(index.dtype(), [&]<typename I>() {
    const I* ip = static_cast<const I*>(index.data_ptr());
    for (int64_t i = 0; i < n && one_target_per_row; ++i) {
      const I* row = ip + i * d;
      I differ = 0;
      for (int64_t j = 1; j < d; ++j) differ |= row[j] ^ row[0];
      one_target_per_row = differ == 0;
      if (one_target_per_row) target[std::size_t(i)] = checked_index("scatter_add", row[0], size, dim);
    }
  });
  if (!one_target_per_row) return false;
  scatter_add_rows<opmath_t<T>>(static_cast<T*>(o.data_ptr()), d, static_cast<const T*>(src.data_ptr()), d,
                                target.data(), n, d, size);
  return true;
}

// out = self; out[index[i][j]][j] += src[i][j] (dim 0 shown). Floating types sum each target's
// sequence (self, its terms in index order) by the rule (scatter_add_lines; in opmath, f32 for
// f16/bf16, with one rounding on store); up to kSumLeaf - 1 terms per target that is the plain
// in-order sum. Integers add in order (exact up to wrap-around), bool ORs.
template <typename T>
void scatter_add_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &self = in[0], &index = in[1], &src = in[2];
  const Tensor& o = out[0];
  if (o.data_ptr() != self.data_ptr()) copy_strided<T>(self, static_cast<char*>(o.data_ptr()), o.strides());
  if (index.numel() == 0) return;
  using C = opmath_t<T>;
  constexpr bool kFloating = std::is_floating_point_v<C>;
  if constexpr (kFloating) {
    if (scatter_add_by_rows<T>(o, index, src, self.dim() == 0 ? 0 : a.dim)) return;
  }
  const LineGeometry g = line_geometry(self, index, a.dim);
  const Strides os = strides_1d(o), ss = strides_1d(src), is = strides_1d(index);
  const int64_t os_d = os[g.dim], ss_d = ss[g.dim], is_d = is[g.dim];
  const ScatterLineGeom geom{.k = g.k, .size = g.size, .os_d = os_d, .is_d = is_d, .ss_d = ss_d};
  visit_index(index.dtype(), [&]<typename I>() {
    // The output operand's strides along the non-dim dims; its dim stride is applied per index.
    const auto plan = make_plan<3>(g.outer, {os, is, ss}, {int64_t(sizeof(T)), int64_t(sizeof(I)), int64_t(sizeof(T))});
    run_plan<3>(
        plan,
        {static_cast<char*>(o.data_ptr()), static_cast<char*>(index.data_ptr()), static_cast<char*>(src.data_ptr())},
        [&](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
          if constexpr (kFloating) {
            const int64_t es = sizeof(T), is_ = sizeof(I);
            MG_ASSERT(s[0] % es == 0 && s[1] % is_ == 0 && s[2] % es == 0, "scatter_add: unaligned line strides");
            scatter_add_lines<T, I>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const I*>(p[1]),
                                    reinterpret_cast<const T*>(p[2]), n, {s[0] / es, s[1] / is_, s[2] / es}, geom,
                                    [&](int64_t v) { return checked_index("scatter_add", v, g.size, g.dim); });
          } else {
            for (int64_t t = 0; t < n; ++t) {
              T* op = reinterpret_cast<T*>(p[0] + t * s[0]);
              const I* ip = reinterpret_cast<const I*>(p[1] + t * s[1]);
              const T* sp = reinterpret_cast<const T*>(p[2] + t * s[2]);
              for (int64_t j = 0; j < g.k; ++j) {
                T& dst = op[checked_index("scatter_add", ip[j * is_d], g.size, g.dim) * os_d];
                if constexpr (std::is_same_v<T, bool>) {
                  dst = dst || sp[j * ss_d];
                } else if constexpr (std::is_integral_v<T>) {
                  dst = wrapping_add(dst, sp[j * ss_d]);  // integers wrap, as PyTorch's (no UB)
                } else {
                  dst = static_cast<T>(dst + sp[j * ss_d]);
                }
              }
            }
          }
        },
        std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(g.k, 1)));
  });
}

// ---- masked_fill ----
// out = mask ? value : x; x and out [shape], mask bool broadcastable to [shape].
template <typename T>
void masked_fill_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &x = in[0], &mask = in[1];
  const Tensor& o = out[0];
  if (o.numel() == 0) return;
  T value;
  if constexpr (std::is_same_v<T, bool>) {
    value = a.alpha != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    value = static_cast<T>(a.alpha);  // range checked by the op's inference
  } else {
    value = static_cast<T>(static_cast<opmath_t<T>>(a.alpha));
  }
  constexpr int64_t es = sizeof(T);
  const auto plan = make_plan<3>(o.shape(), {o.strides(), x.strides(), broadcast_strides(mask, o.shape())},
                                 {es, es, int64_t(sizeof(bool))});
  run_plan<3>(plan,
              {static_cast<char*>(o.data_ptr()), static_cast<char*>(x.data_ptr()), static_cast<char*>(mask.data_ptr())},
              [&](const std::array<char*, 3>& p, int64_t n, const std::array<int64_t, 3>& s) {
                T* op = reinterpret_cast<T*>(p[0]);
                const T* xp = reinterpret_cast<const T*>(p[1]);
                const bool* mp = reinterpret_cast<const bool*>(p[2]);
                if (s[0] == es && s[1] == es && s[2] == 1) {
                  // bytes, not bool: gcc vectorizes loads of uint8_t only
                  const uint8_t* m8 = reinterpret_cast<const uint8_t*>(p[2]);
                  for (int64_t i = 0; i < n; ++i) op[i] = m8[i] != 0 ? value : xp[i];
                } else if (s[0] == es && s[1] == es && s[2] == 0) {
                  if (mp[0]) {
                    for (int64_t i = 0; i < n; ++i) op[i] = value;
                  } else {
                    std::memcpy(op, xp, std::size_t(n * es));
                  }
                } else {
                  const int64_t so = s[0] / es, sx = s[1] / es, sm = s[2];
                  for (int64_t i = 0; i < n; ++i) op[i * so] = mp[i * sm] ? value : xp[i * sx];
                }
              });
}

// ---- one_hot ----
// out[..., c] = (index[...] == c): index i64/i32 [...], out i64 [..., num_classes].
template <typename I>
void one_hot_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor& index = in[0];
  const Tensor& o = out[0];
  const int64_t classes = a.ints.at(0);
  if (o.numel() == 0) return;
  int64_t* op = o.data<int64_t>();
  std::memset(op, 0, std::size_t(o.numel()) * sizeof(int64_t));
  // Operand 0 is a row of the output (classes elements) per index element.
  const Shape shape = shape_1d(index);
  const auto plan = make_plan<2>(shape, {contiguous_strides(shape), strides_1d(index)},
                                 {classes * int64_t(sizeof(int64_t)), int64_t(sizeof(I))});
  run_plan<2>(plan, {reinterpret_cast<char*>(op), static_cast<char*>(index.data_ptr())},
              [&](const std::array<char*, 2>& p, int64_t n, const std::array<int64_t, 2>& s) {
                for (int64_t t = 0; t < n; ++t) {
                  const int64_t v = int64_t(*reinterpret_cast<const I*>(p[1] + t * s[1]));
                  MG_CHECK(v >= 0 && v < classes, IndexError, "one_hot: class value ", v,
                           " is out of range for num_classes = ", classes, " (expected 0 <= value < ",
                           classes, ")");
                  reinterpret_cast<int64_t*>(p[0] + t * s[0])[v] = 1;
                }
              });
}

}  // namespace

void register_indexing_kernels() {
#define MG_REG_INDEXING(E, n, T)                                                      \
  register_kernel(OpId::cat, DeviceType::CPU, DType::E, cat_kernel<T>);              \
  register_kernel(OpId::index_select, DeviceType::CPU, DType::E, index_select_kernel<T>); \
  register_kernel(OpId::gather, DeviceType::CPU, DType::E, gather_kernel<T>);        \
  register_kernel(OpId::scatter_add, DeviceType::CPU, DType::E, scatter_add_kernel<T>); \
  register_kernel(OpId::masked_fill, DeviceType::CPU, DType::E, masked_fill_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_INDEXING)
#undef MG_REG_INDEXING
  register_kernel(OpId::one_hot, DeviceType::CPU, DType::I64, one_hot_kernel<int64_t>);
  register_kernel(OpId::one_hot, DeviceType::CPU, DType::I32, one_hot_kernel<int32_t>);
}

}  // namespace mg::cpu
