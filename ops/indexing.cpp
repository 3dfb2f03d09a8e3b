// Shape and indexing ops: gather / scatter_add (and, from the indexing work, cat, stack, split,
// chunk, index_select, masked_fill, one_hot).
#include "ops/backward_ctx.h"
#include "ops/dispatcher.h"
#include "ops/infer.h"
#include "ops/ops.h"
#include "ops/register.h"

namespace mg {
namespace {

// gather/scatter shape rule: index has the input's rank, and index.size(d) <= input.size(d) for
// every d != dim (PyTorch's rule); for scatter also index.size(d) <= src.size(d) for all d.
void check_gather_shapes(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         const Tensor* src) {
  check_index_dtype(op, index);
  MG_CHECK(index.dim() == x.dim(), ShapeError, op, ": index must have the same number of dims as the input; got index ",
           describe(index), " and input ", describe(x));
  for (int64_t d = 0; d < x.dim(); ++d) {
    MG_CHECK(d == dim || index.shape()[d] <= x.shape()[d], ShapeError, op, ": index ", describe(index),
             " is larger than input ", describe(x), " in dim ", d);
    if (src) {
      MG_CHECK(index.shape()[d] <= src->shape()[d], ShapeError, op, ": index ", describe(index),
               " is larger than src ", describe(*src), " in dim ", d);
    }
  }
}

InferResult infer_gather(const Tensors& in, const OpAttrs& a) {
  check_gather_shapes("gather", in[0], a.dim, in[1], nullptr);
  return {{{in[1].shape(), in[0].dtype()}}, in[0].dtype()};
}

InferResult infer_scatter_add(const Tensors& in, const OpAttrs& a) {
  check_same_dtype("scatter_add", in[0], in[2]);
  check_gather_shapes("scatter_add", in[0], a.dim, in[1], &in[2]);
  return {{{in[0].shape(), in[0].dtype()}}, in[0].dtype()};
}

// d gather = scatter_add of the gradient into zeros at the gathered positions
Tensors gather_bw(const BackwardCtx& c, const Tensors& g) {
  const Tensor index = c.input(1);
  const Tensor base = zeros(c.input_shape(0), {.dtype = g[0].dtype(), .device = g[0].device()});
  return {scatter_add(base, c.attrs().dim, index, g[0]), Tensor()};
}

// d scatter_add = (identity for self, gather at the scattered positions for src)
Tensors scatter_add_bw(const BackwardCtx& c, const Tensors& g) {
  Tensor gsrc;
  if (c.needs_grad(2)) {
    gsrc = gather(g[0], c.attrs().dim, c.input(1));
    // src may be larger than index: its positions outside index get no gradient.
    MG_CHECK(gsrc.shape() == c.input_shape(2), NotImplementedError,
             "scatter_add: the gradient for a src larger than index is not supported; got src ",
             c.input_shape(2), " and index ", gsrc.shape());
  }
  return {g[0], Tensor(), gsrc};
}

}  // namespace

void register_indexing_rules() {
  set_op_rule(OpId::gather, {.infer = infer_gather, .backward = gather_bw, .save = kSaveInput(1)});
  set_op_rule(OpId::scatter_add, {.infer = infer_scatter_add, .backward = scatter_add_bw, .save = kSaveInput(1)});
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  MG_CHECK(x.defined() && index.defined(), Error, "gather: undefined tensor argument");
  return dispatch1(OpId::gather, {x, index}, {.dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "gather")});
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  MG_CHECK(self.defined() && index.defined() && src.defined(), Error, "scatter_add: undefined tensor argument");
  const DType t = promote_types(self.dtype(), src.dtype());
  return dispatch1(OpId::scatter_add, {to(self, t), index, to(src, t)},
                   {.dim = wrap_dim(dim, std::max<int64_t>(self.dim(), 1), "scatter_add")});
}

}  // namespace mg
