#include "mixgrad/ops/weighted_loss.h"

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/op.h"
#include "mixgrad/ops/ops.h"

namespace mg::detail {
namespace {

// `x` after `op`'s autocast policy: the dtype its loss is returned in.
DType result_dtype(OpId op, const Tensor& x) {
  Tensors in{x};
  apply_autocast(op_policy(op), op_name(op), in);
  return in[0].dtype();
}

// Whether `from` broadcasts to `to` without changing it (trailing dims equal or 1).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (std::size_t k = 1; k <= from.size(); ++k) {
    const int64_t f = from[from.size() - k];
    if (f != 1 && f != to[to.size() - k]) return false;
  }
  return true;
}

DType opmath_of(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

Tensor reduce(const Tensor& per_element, Reduction r, const Tensor& mean_denominator) {
  switch (r) {
    case Reduction::None: return per_element;
    case Reduction::Sum: return sum(per_element);
    default: {
      if (!mean_denominator.defined()) return mean(per_element);
      // A zero denominator (every target ignored) gives a NaN loss with a zero gradient, as
      // PyTorch's: the division runs on a safe denominator and where() picks NaN, so no 0/0 (and
      // no inf * 0 in the backward) reaches the inputs' gradients.
      const Tensor& d = mean_denominator;
      const Tensor none = eq(d, scalar_like(0.0, d));
      const Tensor q = sum(per_element) / where(none, scalar_like(1.0, d), d);
      return where(none, scalar_like(std::numeric_limits<double>::quiet_NaN(), q), q);
    }
  }
}

void check_class_weight(const char* op, const Tensor& weight, const Tensor& input) {
  MG_CHECK(input.dim() >= 1, ShapeError, op, ": expected input [N, C] or [N, C, d1, ...] (or [C]), got ",
           describe(input));
  const int64_t classes = input.size(input.dim() == 1 ? 0 : 1);
  MG_CHECK(weight.is_floating_point(), DTypeError, op, ": expected a floating class weight, got weight ",
           describe(weight));
  MG_CHECK(weight.dim() == 1 && weight.size(0) == classes, ShapeError, op, ": expected a class weight of shape [",
           classes, "] (one per class of input ", describe(input), "), got weight ", describe(weight));
  MG_CHECK(weight.device() == input.device(), DeviceError, op, ": weight is on ", weight.device(),
           " but input is on ", input.device());
}

}  // namespace

Tensor weighted_class_loss(const char* op, const Tensor& input, const Tensor& target, const Tensor& weight,
                           Reduction reduction, int64_t ignore_index, double eps, bool from_logits) {
  check_class_weight(op, weight, input);
  const DType out = result_dtype(from_logits ? OpId::cross_entropy : OpId::nll_loss, input);
  AutocastOffGuard no_autocast;  // the policy is applied above, once; the math runs in opmath
  const DType acc = opmath_of(input);
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(cdim);
  const Tensor x = input.dtype() == acc ? input : to(input, acc);
  const Tensor lp = from_logits ? log_softmax(x, cdim) : x;
  const Tensor w = weight.dtype() == acc ? weight : to(weight, acc);
  // -lp[t] (0 where ignored) by the op itself: it checks the target's shape, dtype and range. Its
  // errors name the op the caller called (cross_entropy), not this inner one.
  Tensor nll;
  try {
    nll = nll_loss(lp, target, Reduction::None, ignore_index);
  } catch (const Error& e) {
    if (!from_logits) throw;
    std::string msg = e.what();
    if (msg.rfind("nll_loss", 0) == 0) msg.replace(0, 8, "cross_entropy");
    if (dynamic_cast<const IndexError*>(&e)) throw IndexError(msg);
    if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(msg);
    if (dynamic_cast<const DTypeError*>(&e)) throw DTypeError(msg);
    throw Error(msg);
  }
  const Tensor t = target.dtype() == DType::I64 ? target : to(target, DType::I64);
  const Tensor valid = ne(t, scalar_like(double(ignore_index), t));
  const Tensor safe = where(valid, t, zeros_like(t));
  const Tensor wt = where(valid, reshape(index_select(w, 0, reshape(safe, {-1})), t.shape()), zeros_like(nll));
  Tensor loss = nll * wt;
  if (eps > 0.0) {
    Shape wshape(std::size_t(lp.dim()), 1);
    wshape[std::size_t(cdim)] = classes;
    const Tensor smooth = where(valid, -sum(lp * reshape(w, wshape), {cdim}), zeros_like(nll));
    loss = loss * (1.0 - eps) + smooth * (eps / double(classes));
  }
  const Tensor r = reduce(loss, reduction, reduction == Reduction::Mean ? sum(wt) : Tensor());
  return r.dtype() == out ? r : to(r, out);
}

Tensor probability_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                                 int64_t ignore_index, double eps) {
  const char* op = "cross_entropy";
  MG_CHECK(input.is_floating_point() && target.is_floating_point(), DTypeError, op,
           ": class-probability targets need a floating input and target, got input ", describe(input), " and target ",
           describe(target));
  MG_CHECK(input.dim() >= 1, ShapeError, op, ": expected input [N, C] or [N, C, d1, ...] (or [C]), got ",
           describe(input));
  if (target.shape() != input.shape()) {
    Shape labels = input.shape();  // the shape class indices would have: without the class dim
    labels.erase(labels.begin() + (input.dim() == 1 ? 0 : 1));
    MG_THROW(ShapeError, op, ": a floating target holds class probabilities and must have the input's shape ",
             input.shape(), ", got target ", describe(target), " for input ", describe(input),
             target.shape() == labels
                 ? "\n  hint: it has the shape of class indices: convert them with to(target, DType::I64)"
                 : "\n  hint: class indices are an i64 target of the input's shape without the class dim");
  }
  MG_CHECK(target.device() == input.device(), DeviceError, op, ": target is on ", target.device(),
           " but input is on ", input.device());
  MG_CHECK(ignore_index == -100, Error, op, ": ignore_index (", ignore_index,
           ") is not supported with class-probability targets, as in PyTorch",
           "\n  hint: give an ignored position a zero probability row instead");
  if (weight.defined()) check_class_weight(op, weight, input);
  const DType out = result_dtype(OpId::cross_entropy, input);
  AutocastOffGuard no_autocast;  // the policy is applied above, once; the math runs in opmath
  const DType acc = opmath_of(input);
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(cdim);
  const Tensor lp = log_softmax(input.dtype() == acc ? input : to(input, acc), cdim);
  Tensor t = target.dtype() == acc ? target : to(target, acc);
  if (eps > 0.0) t = t * (1.0 - eps) + eps / double(classes);  // PyTorch smooths the probabilities
  Tensor terms = lp * t;
  if (weight.defined()) {
    Shape wshape(std::size_t(lp.dim()), 1);
    wshape[std::size_t(cdim)] = classes;
    terms = terms * reshape(weight.dtype() == acc ? weight : to(weight, acc), wshape);
  }
  // Mean divides by the number of samples (positions), not by a sum of weights, as PyTorch.
  const Tensor r = reduce(-sum(terms, {cdim}), reduction, Tensor());
  return r.dtype() == out ? r : to(r, out);
}

Tensor weighted_binary_loss(const char* op, const Tensor& input, const Tensor& target, const Tensor& pos_weight,
                            const Tensor& weight, Reduction reduction, bool from_logits) {
  MG_CHECK(weight.is_floating_point(), DTypeError, op, ": expected a floating weight, got weight ", describe(weight));
  MG_CHECK(weight.device() == input.device(), DeviceError, op, ": weight is on ", weight.device(),
           " but input is on ", input.device());
  MG_CHECK(broadcasts_to(weight.shape(), input.shape()), ShapeError, op,
           ": weight ", describe(weight), " must broadcast to the input's shape, got input ", describe(input));
  const Tensor per = from_logits ? binary_cross_entropy_with_logits(input, target, pos_weight, Reduction::None)
                                 : binary_cross_entropy(input, target, Reduction::None);
  // per is in the op's result dtype; weight and reduction in opmath, rounded once at the end
  AutocastOffGuard no_autocast;
  const DType acc = opmath_of(per);
  const Tensor lw = to(per, acc) * (weight.dtype() == acc ? weight : to(weight, acc));
  const Tensor r = reduce(lw, reduction, Tensor());
  return r.dtype() == per.dtype() ? r : to(r, per.dtype());
}

}  // namespace mg::detail
