// unbind: the slices of a tensor along a dim, as separate tensors whose backward is one stack.
// The slices of select/narrow each backpropagate into a zero tensor of the whole input's size, so
// differentiating T slices of a [T, ...] tensor cost O(T^2) (an RNN's per-step inputs); here the
// T gradients are stacked once: O(T).
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/custom_function.h"
#include "mixgrad/ops/ops.h"

namespace mg {

namespace {

// The slices along dim 0 (views of the input), and their gradients stacked back (missing ones
// arrive as zeros).
struct UnbindDim0 : Function<UnbindDim0> {
  static constexpr CastPolicy policy = CastPolicy::Keep;
  static constexpr const char* name = "unbind";
  static Tensors forward(FunctionCtx&, const Tensors& in) {
    Tensors out;
    for (int64_t i = 0; i < in[0].size(0); ++i) out.push_back(select(in[0], 0, i));
    return out;
  }
  static Tensors backward(FunctionCtx&, const Tensors& grads) { return {stack(grads, 0)}; }
};

}  // namespace

Tensors unbind(const Tensor& x, int64_t dim) {
  MG_CHECK(x.defined(), Error, "unbind: got an undefined tensor");
  MG_CHECK(x.dim() >= 1, ShapeError, "unbind: expected a tensor of at least 1 dim, got ", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  if (x.size(d) == 0) return {};
  Tensor moved = x;
  if (d != 0) {  // dim d first, the others in their order
    std::vector<int64_t> order{d};
    for (int64_t k = 0; k < x.dim(); ++k) {
      if (k != d) order.push_back(k);
    }
    moved = permute(x, order);
  }
  return UnbindDim0::apply({moved});
}

}  // namespace mg
