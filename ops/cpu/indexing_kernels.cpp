// CPU kernels of the indexing ops. Index values are validated while they are read: an index out
// of range throws IndexError with the value and the valid range, never reads out of bounds.
#include "core/visit_dtype.h"
#include "ops/kernel_registry.h"
#include "ops/register.h"

namespace mg::cpu {
namespace {

// Calls f(index_offset, other_offsets...) for every element of `shape`, given strides per operand.
template <int N, typename F>
void for_each_index(const Shape& shape, const std::array<const Strides*, N>& strides, F&& f) {
  const int64_t nd = int64_t(shape.size());
  const int64_t numel = shape_numel(shape);
  std::vector<int64_t> idx(nd, 0);
  for (int64_t i = 0; i < numel; ++i) {
    std::array<int64_t, N> off{};
    for (int k = 0; k < N; ++k) {
      for (int64_t d = 0; d < nd; ++d) off[k] += idx[d] * (*strides[k])[d];
    }
    f(idx, off);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <typename I>
int64_t checked_index(const char* op, I raw, int64_t size, int64_t dim) {
  const int64_t v = int64_t(raw);
  MG_CHECK(v >= -size && v < size, IndexError, op, ": index ", v, " is out of bounds for dim ", dim,
           " with size ", size);
  return v < 0 ? v + size : v;
}

// out[i][j] = x[index[i][j]][j] (dim 0 shown)
template <typename T>
void gather_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &x = in[0], &index = in[1];
  const int64_t dim = x.dim() == 0 ? 0 : a.dim;
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = out[0].data<T>();
  const Strides& out_strides = out[0].strides();
  const Strides x_strides = x.dim() == 0 ? Strides{1} : x.strides();
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[dim];
  visit_dtype(index.dtype(), [&]<typename I>() {
    if constexpr (std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>) {
      const I* ip = static_cast<const I*>(index.data_ptr());
      for_each_index<2>(index.shape(), {&index.strides(), &out_strides},
                        [&](const std::vector<int64_t>& idx, const std::array<int64_t, 2>& off) {
                          const int64_t j = checked_index("gather", ip[off[0]], size, dim);
                          int64_t xo = 0;
                          for (std::size_t d = 0; d < idx.size(); ++d)
                            xo += (int64_t(d) == dim ? j : idx[d]) * x_strides[d];
                          op[off[1]] = xp[xo];
                        });
    }
  });
}

// out = self; out[index[i][j]][j] += src[i][j] (dim 0 shown), accumulated in opmath
template <typename T>
void scatter_add_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor &self = in[0], &index = in[1], &src = in[2];
  Tensor& o = out[0];
  if (o.data_ptr() != self.data_ptr()) {
    // Dense copy of self into the (fresh, contiguous) output.
    for_each_index<2>(self.shape(), {&self.strides(), &o.strides()},
                      [&](const std::vector<int64_t>&, const std::array<int64_t, 2>& off) {
                        o.data<T>()[off[1]] = static_cast<const T*>(self.data_ptr())[off[0]];
                      });
  }
  const int64_t dim = self.dim() == 0 ? 0 : a.dim;
  const int64_t size = self.dim() == 0 ? 1 : self.shape()[dim];
  const Strides o_strides = o.dim() == 0 ? Strides{1} : o.strides();
  T* op = static_cast<T*>(o.data_ptr());
  const T* sp = static_cast<const T*>(src.data_ptr());
  visit_dtype(index.dtype(), [&]<typename I>() {
    if constexpr (std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>) {
      const I* ip = static_cast<const I*>(index.data_ptr());
      for_each_index<2>(index.shape(), {&index.strides(), &src.strides()},
                        [&](const std::vector<int64_t>& idx, const std::array<int64_t, 2>& off) {
                          const int64_t j = checked_index("scatter_add", ip[off[0]], size, dim);
                          int64_t oo = 0;
                          for (std::size_t d = 0; d < idx.size(); ++d)
                            oo += (int64_t(d) == dim ? j : idx[d]) * o_strides[d];
                          op[oo] = static_cast<T>(static_cast<opmath_t<T>>(op[oo]) +
                                                  static_cast<opmath_t<T>>(sp[off[1]]));
                        });
    }
  });
}

}  // namespace

void register_indexing_kernels() {
#define MG_REG_INDEXING(E, n, T)                                                   \
  register_kernel(OpId::gather, DeviceType::CPU, DType::E, gather_kernel<T>);     \
  register_kernel(OpId::scatter_add, DeviceType::CPU, DType::E, scatter_add_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_INDEXING)
#undef MG_REG_INDEXING
}

}  // namespace mg::cpu
