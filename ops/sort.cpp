#include "mixgrad/ops/sort.h"

#include "mixgrad/core/error.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/infer.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg {
namespace {

// argsort: any numeric dtype (bool has no order to speak of here), indices of x's shape.
InferResult infer_argsort(const Tensors& in, const OpAttrs&) {
  const Tensor& x = in[0];
  MG_CHECK(x.dtype() != DType::Bool, DTypeError, "argsort: expected a numeric tensor, got ", describe(x),
           "\n  hint: convert a mask with to(m, DType::U8) to sort it");
  return {{{x.shape(), DType::I64}}, x.dtype()};
}

}  // namespace

void register_sort_rules() { set_op_rule(OpId::argsort, {.infer = infer_argsort}); }

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  MG_CHECK(x.defined(), Error, "argsort: got an undefined tensor");
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "argsort");
    return zeros({}, {.dtype = DType::I64, .device = x.device()});
  }
  const int64_t d = wrap_dim(dim, x.dim(), "argsort");
  const int64_t last = x.dim() - 1;
  const OpAttrs a{.mode = descending ? 1 : 0};
  if (d == last) return dispatch1(OpId::argsort, {x}, a);
  // The op sorts the last dim: move `d` there and the indices back.
  return contiguous(transpose(dispatch1(OpId::argsort, {transpose(x, d, last)}, a), d, last));
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  const Tensor indices = argsort(x, dim, descending);
  if (x.dim() == 0) return {x.clone(), indices};
  return {gather(x, dim, indices), indices};
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  MG_CHECK(x.defined(), Error, "topk: got an undefined tensor");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MG_CHECK(k >= 0 && k <= n, Error, "topk: k (", k, ") must be in [0, ", n, "], the size of dim ", dim, " of ",
           describe(x));
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::I64, .device = x.device()})};
  const Tensor indices = contiguous(narrow(argsort(x, d, largest), d, 0, k));
  return {gather(x, d, indices), indices};
}

}  // namespace mg
