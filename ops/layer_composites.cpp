#include "mixgrad/ops/layer_composites.h"

#include "mixgrad/ops/composite.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

namespace mg {

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias) {
  MG_CHECK(x1.defined() && x2.defined() && weight.defined(), Error, "bilinear: got an undefined tensor");
  MG_CHECK(weight.dim() == 3, ShapeError, "bilinear: expected weight [out, in1, in2], got ", describe(weight));
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  MG_CHECK(x1.dim() >= 1 && x2.dim() == x1.dim() && x1.size(-1) == in1 && x2.size(-1) == in2 &&
               Shape(x1.shape().begin(), x1.shape().end() - 1) == Shape(x2.shape().begin(), x2.shape().end() - 1),
           ShapeError, "bilinear: expected x1 [*, ", in1, "] and x2 [*, ", in2, "] with the same leading dims (weight ",
           weight.shape(), "), got x1 ", x1.shape(), ", x2 ", x2.shape());
  MG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out), ShapeError, "bilinear: expected bias [",
           out, "], got ", describe(bias));
  const detail::CompositeInputs c = bias.defined() ? detail::composite_inputs("bilinear", {x1, x2, weight, bias})
                                                    : detail::composite_inputs("bilinear", {x1, x2, weight});
  Shape lead(x1.shape().begin(), x1.shape().end() - 1);
  // Sizes written out, not -1, which reshape cannot infer beside a 0 (out = 0, or no rows).
  const int64_t rows = shape_numel(lead);
  const Tensor a = c.math[0].reshape({rows, in1}), b = c.math[1].reshape({rows, in2});
  // t[n, o, j] = sum_i a[n, i] w[o, i, j]: one GEMM with w as [in1, out * in2].
  const Tensor t = matmul(a, c.math[2].permute({1, 0, 2}).reshape({in1, out * in2})).reshape({rows, out, in2});
  Tensor y = sum(t * b.unsqueeze(1), {2});
  if (bias.defined()) y = y + c.math[3];
  lead.push_back(out);
  return detail::round_result(y.reshape(lead), c);
}

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  MG_CHECK(size >= 1, Error, "local_response_norm: size must be >= 1, got ", size);
  MG_CHECK(x.defined() && x.dim() >= 3, ShapeError, "local_response_norm: expected x [N, C, *] (3 or more dims), got ",
           x.defined() ? describe(x) : "undefined");
  const detail::CompositeInputs c = detail::composite_inputs("local_response_norm", {x});
  const Tensor& a = c.math[0];
  if (a.numel() == 0) return detail::round_result(a, c);  // an empty batch or no channels, as PyTorch
  const int64_t n = a.size(0), ch = a.size(1);
  // x^2 as [N, C, rest], zero-padded along C, then each channel's window summed in order.
  const Tensor sq = pad((a * a).reshape({n, ch, -1}), {0, 0, size / 2, (size - 1) / 2});
  Tensor window = sq.narrow(1, 0, ch);
  for (int64_t i = 1; i < size; ++i) window = window + sq.narrow(1, i, ch);
  const Tensor div = pow(window.reshape(a.shape()) * (alpha / double(size)) + k, beta);
  return detail::round_result(a / div, c);
}

}  // namespace mg
