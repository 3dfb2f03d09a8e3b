#include "mixgrad/ops/linear_cross_entropy.h"

#include <algorithm>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/custom_function.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// The options of the call in flight: forward runs synchronously inside apply(), on this thread.
thread_local const LinearCrossEntropyOptions* t_options = nullptr;

bool is_16bit(DType t) { return t == DType::F16 || t == DType::BF16; }

// inputs: x [N, in], weight [V, in], target [N], and bias [V] when there is one. Outputs the 0-d
// loss; saves the gradients of the inputs that need one, for an upstream gradient of 1.
struct ChunkedLinearCrossEntropy : Function<ChunkedLinearCrossEntropy> {
  static constexpr CastPolicy policy = CastPolicy::Lower;  // the GEMMs' policy (linear's)
  static constexpr const char* name = "linear_cross_entropy";

  static Tensors forward(FunctionCtx& ctx, const Tensors& in) {
    const LinearCrossEntropyOptions& o = *t_options;
    const Tensor &x = in[0], &w = in[1], &t = in[2];
    const Tensor bias = in.size() > 3 ? in[3] : Tensor();
    const int64_t n = x.size(0), v = w.size(0);
    const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;  // the loss's and the sums' dtype
    const bool need_x = ctx.needs_input_grad(0), need_w = ctx.needs_input_grad(1), need_b = ctx.needs_input_grad(3);
    // Default: the rows whose f32 logits fill 32 MiB, but at least twice the input features, below
    // which the GEMMs lose efficiency (measured: 256-row chunks of BERT-mini's head 8% slower).
    const int64_t chunk = o.chunk_rows > 0 ? o.chunk_rows
                                           : std::max({int64_t(1), (int64_t(32) << 20) / (4 * std::max<int64_t>(v, 1)),
                                                       2 * x.size(1)});
    const TensorOptions acc_opts{.dtype = acc, .device = x.device()};
    Tensor loss = zeros({}, acc_opts);
    Tensor dx = need_x ? empty({n, x.size(1)}, {.dtype = x.dtype(), .device = x.device()}) : Tensor();
    Tensor dw = need_w ? zeros({v, w.size(1)}, acc_opts) : Tensor();
    Tensor db = need_b ? zeros({v}, acc_opts) : Tensor();
    // Mean divides by the counted rows (none counted: NaN, as cross_entropy's Mean), without a host
    // read: the factor is the upstream gradient of each chunk's Sum backward, as the unfused
    // backward's grad / count.
    const Tensor scale = o.reduction == Reduction::Mean
                             ? ones({}, acc_opts) / sum(ne(t, scalar_like(double(o.ignore_index), t)).to(acc))
                             : ones({}, acc_opts);
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t end = std::min(n, start + chunk);
      const Tensor xc = x.slice(0, start, end), tc = t.slice(0, start, end);
      Tensor logits = linear(xc, w, bias);
      if (is_16bit(logits.dtype())) logits = logits.to(acc);  // the softmax in f32, as autocast's cross_entropy
      loss = loss + cross_entropy(logits, tc, Reduction::Sum, o.ignore_index, o.label_smoothing);
      if (!need_x && !need_w && !need_b) continue;
      // d(sum of the chunk's losses) / d logits: summed for the bias in f32, and in the GEMMs'
      // dtype for x and W, as the unfused backward's.
      const Tensor dl_acc = cross_entropy_backward(scale, logits, tc, Reduction::Sum, o.ignore_index, o.label_smoothing);
      if (need_b) db.add_(sum(dl_acc, {0}));
      if (!need_x && !need_w) continue;
      const Tensor dl = dl_acc.to(x.dtype());
      if (need_x) dx.slice(0, start, end).copy_(matmul(dl, w));
      if (need_w) dw.add_(matmul(dl.transpose(0, 1), xc).to(acc));
    }
    if (o.reduction == Reduction::Mean) loss = loss * scale;
    Tensors saved{dx, need_w ? dw.to(w.dtype()) : Tensor()};
    if (bias.defined()) saved.push_back(need_b ? db.to(bias.dtype()) : Tensor());  // one gradient per input
    ctx.save_for_backward(saved);
    return {loss};
  }

  static Tensors backward(FunctionCtx& ctx, const Tensors& g) {
    const Tensors s = ctx.saved();
    // In g's dtype (f32 for f16/bf16 gradients), rounded once: a scale that is not a power of two
    // (a loss weight) would otherwise be rounded to the gradient's dtype first.
    auto scaled = [&](const Tensor& grad) { return grad.defined() ? (grad.to(g[0].dtype()) * g[0]).to(grad.dtype()) : Tensor(); };
    Tensors grads{scaled(s[0]), scaled(s[1]), Tensor()};
    if (s.size() > 2) grads.push_back(scaled(s[2]));
    return grads;
  }
};

}  // namespace

Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& o) {
  MG_CHECK(input.defined() && weight.defined() && target.defined(), Error,
           "linear_cross_entropy: got an undefined input, weight or target");
  MG_CHECK(input.dim() >= 1 && input.is_floating_point(), ShapeError,
           "linear_cross_entropy: expected a floating input [..., in], got ", describe(input));
  MG_CHECK(weight.dim() == 2 && weight.size(1) == input.size(-1), ShapeError,
           "linear_cross_entropy: expected weight [V, ", input.size(-1), "] for input ", describe(input), ", got ",
           describe(weight));
  MG_CHECK(!o.bias.defined() || (o.bias.dim() == 1 && o.bias.size(0) == weight.size(0)), ShapeError,
           "linear_cross_entropy: expected bias [", weight.size(0), "], got ", describe(o.bias));
  MG_CHECK(target.dtype() == DType::I64 || target.dtype() == DType::I32, DTypeError,
           "linear_cross_entropy: expected i64 or i32 class indices, got ", describe(target));
  Shape lead = input.shape();
  lead.pop_back();
  MG_CHECK(target.shape() == lead, ShapeError, "linear_cross_entropy: expected a target ", lead, " for input ",
           describe(input), ", got ", describe(target));
  MG_CHECK(o.reduction == Reduction::Mean || o.reduction == Reduction::Sum || o.reduction == Reduction::None, Error,
           "linear_cross_entropy: reduction must be mean, sum or none, got ", reduction_name(o.reduction));
  MG_CHECK(o.chunk_rows >= 0, Error, "linear_cross_entropy: chunk_rows must be >= 0, got ", o.chunk_rows);
  const Tensor x = input.reshape({-1, input.size(-1)}), t = target.reshape({-1});
  if (o.reduction == Reduction::None) {  // per-row losses need per-row upstream gradients: unchunked
    return cross_entropy(linear(x, weight, o.bias), t, Reduction::None, o.ignore_index, o.label_smoothing)
        .reshape(lead);
  }
  t_options = &o;
  struct Reset {
    ~Reset() { t_options = nullptr; }
  } reset;
  Tensors in{x, weight, t};
  if (o.bias.defined()) in.push_back(o.bias);
  return ChunkedLinearCrossEntropy::apply(in)[0];
}

}  // namespace mg
