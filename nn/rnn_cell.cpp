#include "mixgrad/nn/rnn_cell.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/nn/rnn_steps.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

RNNCellBase::RNNCellBase(std::string type, int64_t gates, RNNCellOptions o) : Module(std::move(type)), options_(o) {
  MG_CHECK(o.input_size > 0 && o.hidden_size > 0, Error, type_name(), ": input_size and hidden_size must be positive, got ",
           o.input_size, " and ", o.hidden_size);
  const int64_t g = gates * o.hidden_size;
  weight_ih = register_parameter("weight_ih", empty({g, o.input_size}));
  weight_hh = register_parameter("weight_hh", empty({g, o.hidden_size}));
  if (o.bias) {
    bias_ih = register_parameter("bias_ih", empty({g}));
    bias_hh = register_parameter("bias_hh", empty({g}));
  }
  reset_parameters();
}

void RNNCellBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(options_.hidden_size));
  for (Tensor* p : {&weight_ih, &weight_hh, &bias_ih, &bias_hh}) {
    if (p->defined()) init::uniform_(*p, -bound, bound);
  }
}

std::string RNNCellBase::extra_repr() const {
  std::string s = str_cat(options_.input_size, ", ", options_.hidden_size);
  if (!options_.bias) s += ", bias=false";
  if (type_name() == "RNNCell" && options_.nonlinearity == RNNNonlinearity::Relu) s += ", nonlinearity=relu";
  return s;
}

RNNCellBase::Prepared RNNCellBase::prepare(const Tensor& x) const {
  const int64_t in = options_.input_size;
  MG_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2) && x.size(x.dim() - 1) == in, ShapeError, layer_name(),
           ": expected x [B, ", in, "] or [", in, "], got ", x.defined() ? describe(x) : "undefined");
  return {x.dim() == 1 ? unsqueeze(x, 0) : x, x.dim() == 1};
}

Tensor RNNCellBase::state_or_zeros(const Tensor& s, const Prepared& p, const char* what, DType dtype) const {
  const int64_t B = p.x.size(0), H = options_.hidden_size;
  if (!s.defined()) return zeros({B, H}, {.dtype = dtype, .device = p.x.device()});
  const Shape want = p.unbatched ? Shape{H} : Shape{B, H};
  MG_CHECK(s.shape() == want, ShapeError, layer_name(), ": expected ", what, " ", shape_str(want), " for x ",
           describe(p.unbatched ? squeeze(p.x, 0) : p.x), ", got ", describe(s));
  // A given state in the products' dtype, as the layer casts its h0/c0 (and PyTorch's autocast
  // its cells' hx): an f32 h beside bf16 gates would promote the step's result to f32.
  const Tensor t = detail::initial_state(s, dtype, false, layer_name().c_str(), what);
  return p.unbatched ? unsqueeze(t, 0) : t;
}

Tensor RNNCellBase::input_projection(const Tensor& x) const { return linear(x, weight_ih, bias_ih); }
Tensor RNNCellBase::hidden_projection(const Tensor& h) const { return linear(h, weight_hh, bias_hh); }

Tensor RNNCell::forward(const Tensor& x, const Tensor& h) {
  auto scope = module_scope(*this);
  const Prepared p = prepare(x);
  const Tensor gi = input_projection(p.x);
  const Tensor h0 = state_or_zeros(h, p, "h", gi.dtype());
  const Tensor next = detail::rnn_step(gi, hidden_projection(h0), options().nonlinearity == RNNNonlinearity::Relu);
  return p.unbatched ? squeeze(next, 0) : next;
}

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) {
  auto scope = module_scope(*this);
  const Prepared p = prepare(x);
  const Tensor gi = input_projection(p.x);
  const Tensor h0 = state_or_zeros(state.h, p, "h", gi.dtype());
  // As the layer: the cell state in f32 for f16/bf16 products (its running sum would round every
  // step; an f32 c, such as the previous step's, is used as it is), h back in the products' dtype.
  const Tensor c0 = state_or_zeros(state.c, p, "c", detail::state_dtype(gi.dtype(), /*cell_state=*/true));
  detail::LstmStep next = detail::lstm_step(gi, hidden_projection(h0), c0, options().hidden_size);
  if (next.h.dtype() != gi.dtype()) next.h = mg::to(next.h, gi.dtype());
  if (p.unbatched) return {squeeze(next.h, 0), squeeze(next.c, 0)};
  return {next.h, next.c};
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) {
  auto scope = module_scope(*this);
  const Prepared p = prepare(x);
  const Tensor gi = input_projection(p.x);
  const Tensor h0 = state_or_zeros(h, p, "h", gi.dtype());
  const Tensor next = detail::gru_step(gi, hidden_projection(h0), h0, options().hidden_size);
  return p.unbatched ? squeeze(next, 0) : next;
}

}  // namespace mg::nn
