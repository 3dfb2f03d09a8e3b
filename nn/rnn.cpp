#include "mixgrad/nn/rnn.h"

#include <cmath>

#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/nn/packed_sequence.h"
#include "mixgrad/nn/rnn_steps.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace {

std::string shape_of(std::initializer_list<std::string> dims) {
  std::string s = "[";
  for (const std::string& d : dims) s += (s.size() > 1 ? ", " : "") + d;
  return s + "]";
}

}  // namespace

RNNBase::RNNBase(std::string type, Cell cell, RNNOptions o) : Module(std::move(type)), cell_(cell), options_(o) {
  const std::string& name = type_name();
  MG_CHECK(o.input_size > 0 && o.hidden_size > 0, Error, name, ": input_size and hidden_size must be positive, got ",
           o.input_size, " and ", o.hidden_size);
  MG_CHECK(o.num_layers >= 1, Error, name, ": num_layers must be >= 1, got ", o.num_layers);
  MG_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0, Error, name, ": dropout must be in [0, 1], got ", o.dropout);
  MG_CHECK(o.proj_size >= 0, Error, name, ": proj_size must be >= 0, got ", o.proj_size);
  MG_CHECK(o.proj_size == 0 || cell == Cell::Lstm, Error, name, ": proj_size is an LSTM option, got ", o.proj_size);
  MG_CHECK(o.proj_size < o.hidden_size, Error, name, ": proj_size must be smaller than hidden_size (", o.hidden_size,
           "), got ", o.proj_size);
  const int64_t dirs = o.bidirectional ? 2 : 1, g = gates() * o.hidden_size, r = state_size();
  // PyTorch's order and names: per layer, per direction, w_ih, w_hh, b_ih, b_hh (, w_hr).
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const int64_t in = l == 0 ? o.input_size : r * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = str_cat("_l", l, d == 1 ? "_reverse" : "");
      params_.push_back(register_parameter("weight_ih" + suffix, empty({g, in})));
      params_.push_back(register_parameter("weight_hh" + suffix, empty({g, r})));
      params_.push_back(o.bias ? register_parameter("bias_ih" + suffix, empty({g})) : Tensor());
      params_.push_back(o.bias ? register_parameter("bias_hh" + suffix, empty({g})) : Tensor());
      params_.push_back(o.proj_size > 0 ? register_parameter("weight_hr" + suffix, empty({o.proj_size, o.hidden_size}))
                                        : Tensor());
    }
  }
  reset_parameters();
}

int64_t RNNBase::gates() const { return cell_ == Cell::Lstm ? 4 : (cell_ == Cell::Gru ? 3 : 1); }

int64_t RNNBase::state_size() const { return options_.proj_size > 0 ? options_.proj_size : options_.hidden_size; }

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(options_.hidden_size));
  for (Tensor& p : params_) {
    if (p.defined()) init::uniform_(p, -bound, bound);
  }
}

std::vector<Tensor> RNNBase::layer_parameters(int64_t layer, bool reverse) const {
  const int64_t dirs = options_.bidirectional ? 2 : 1;
  MG_CHECK(layer >= 0 && layer < options_.num_layers && (!reverse || dirs == 2), IndexError, type_name(),
           ": no layer ", layer, reverse ? " (reverse)" : "", "; the layer has ", options_.num_layers, " layers",
           dirs == 2 ? ", bidirectional" : "");
  const std::size_t at = std::size_t((layer * dirs + (reverse ? 1 : 0)) * 5);
  return {params_[at], params_[at + 1], params_[at + 2], params_[at + 3], params_[at + 4]};
}

std::string RNNBase::extra_repr() const {
  const RNNOptions& o = options_;
  std::string s = str_cat(o.input_size, ", ", o.hidden_size);
  if (o.num_layers != 1) s += str_cat(", num_layers=", o.num_layers);
  if (cell_ == Cell::Rnn && o.nonlinearity == RNNNonlinearity::Relu) s += ", nonlinearity=relu";
  if (!o.bias) s += ", bias=false";
  if (o.batch_first) s += ", batch_first=true";
  if (o.proj_size > 0) s += str_cat(", proj_size=", o.proj_size);
  if (o.dropout != 0.0) s += str_cat(", dropout=", o.dropout);
  if (o.bidirectional) s += ", bidirectional=true";
  return s;
}

std::vector<Tensor> RNNBase::run(const Tensor& x_in, const Tensor& h0, const Tensor& c0,
                                 const std::vector<int64_t>* lengths) {
  // Unbatched input (PyTorch's 2-D form, whatever batch_first says): a batch of one, the batch
  // dimension removed from the results again.
  if (x_in.defined() && x_in.dim() == 2 && !lengths) {
    const std::string name = layer_name();
    MG_CHECK(x_in.size(1) == options_.input_size, ShapeError, name, ": expected unbatched x [T, ", options_.input_size,
             "], got ", describe(x_in));
    for (const auto& [s, what] : {std::pair(h0, "h0"), std::pair(c0, "c0")}) {
      MG_CHECK(!s.defined() || s.dim() == 2, ShapeError, name, ": for unbatched 2-D input ", describe(x_in), " ", what,
               " must be 2-D [layers * directions, features] too, got ", describe(s));
    }
    const auto one = [](const Tensor& s) { return s.defined() ? unsqueeze(s, 1) : s; };
    std::vector<Tensor> r = run(unsqueeze(x_in, options_.batch_first ? 0 : 1), one(h0), one(c0));
    r[0] = squeeze(r[0], options_.batch_first ? 0 : 1);
    for (std::size_t k = 1; k < r.size(); ++k) r[k] = r[k].defined() ? squeeze(r[k], 1) : r[k];
    return r;
  }
  const RNNOptions& o = options_;
  const std::string name = layer_name();
  // Packed input (PackedSequence) is time-major whatever batch_first says.
  const bool batch_first = o.batch_first && !lengths;
  const int64_t dirs = o.bidirectional ? 2 : 1, H = o.hidden_size, L = o.num_layers, R = state_size();
  const std::string want_x = batch_first ? shape_of({"B", "T", std::to_string(o.input_size)})
                                           : shape_of({"T", "B", std::to_string(o.input_size)});
  MG_CHECK(x_in.defined() && x_in.dim() == 3 && x_in.size(2) == o.input_size, ShapeError, name, ": expected x ",
           want_x, " (or [T, ", o.input_size, "] unbatched), got ", x_in.defined() ? describe(x_in) : "undefined");
  const Tensor x = batch_first ? transpose(x_in, 0, 1) : x_in;  // [T, B, in]
  const int64_t T = x.size(0), B = x.size(1);
  MG_CHECK(T > 0, ShapeError, name, ": expected a sequence length larger than 0, got x ", describe(x_in));
  const auto check_state = [&](const Tensor& s, const char* what, int64_t size) {
    const Shape want{L * dirs, B, size};
    MG_CHECK(!s.defined() || s.shape() == want, ShapeError, name, ": expected ", what, " ", shape_str(want),
             " (layers * directions, batch, ", size == H ? "hidden" : "proj_size", "), got ", describe(s));
  };
  check_state(h0, "h0", R);
  check_state(c0, "c0", H);
  // Packed sequences: a step beyond a sequence's length leaves its state alone and outputs 0
  // (valid[t]: [B, 1] bool), so h_n holds the state after its last step, and the reverse
  // direction starts at its own last step with the initial state.
  Tensors valid;
  if (lengths) {
    MG_CHECK(int64_t(lengths->size()) == B, ShapeError, name, ": ", lengths->size(), " lengths for a batch of ", B);
    valid = unbind(reshape(length_mask(*lengths, T, x.device()), {T, B, 1}), 0);
  }
  const bool lstm = cell_ == Cell::Lstm, gru = cell_ == Cell::Gru;
  // Initial states default to zeros in the dtype of the layer's input projection (the weights',
  // or the autocast dtype, so that the whole recurrence runs in it, as PyTorch's autocast RNNs).
  const auto zero_state = [&](DType dt, int64_t size) { return zeros({B, size}, {.dtype = dt, .device = x.device()}); };

  Tensor layer_in = x;
  Tensors h_n, c_n;
  for (int64_t l = 0; l < L; ++l) {
    Tensors dir_out;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::vector<Tensor> p = layer_parameters(l, d == 1);
      const int64_t in = layer_in.size(2);
      // Every step's input projection in one product: [T * B, in] -> [T, B, gates * H].
      const Tensor xi = reshape(linear(reshape(layer_in, {T * B, in}), p[0], p[2]), {T, B, gates() * H});
      // Given states are cast to it too (differentiably), as PyTorch's autocast does.
      // (The LSTM's cell state runs in f32 beside f16/bf16 products: detail::initial_state.)
      const auto initial = [&](const Tensor& s0, int64_t size, bool cell_state, const char* what) {
        const DType products = xi.dtype();
        if (!s0.defined()) return zero_state(detail::state_dtype(products, cell_state), size);
        return detail::initial_state(select(s0, 0, l * dirs + d), products, cell_state, name.c_str(), what);
      };
      Tensor h = initial(h0, R, false, "h0");
      Tensor c;
      if (lstm) c = initial(c0, H, true, "c0");
      // unbind, not select: T selects would each backpropagate into a zero [T, B, gates * H]
      // tensor (O(T^2)); the gates likewise, from [B, gates, H].
      const Tensors xs = unbind(xi, 0);
      Tensors steps(static_cast<std::size_t>(T));
      for (int64_t s = 0; s < T; ++s) {
        const int64_t t = d == 1 ? T - 1 - s : s;
        const Tensor& gi = xs[std::size_t(t)];
        const Tensor gh = linear(h, p[1], p[3]);
        Tensor h_new, c_new;
        if (lstm) {
          // The cell state stays in opmath (f32 for f16/bf16 products, c started so above): the
          // sum over many steps would otherwise round at every step.
          const detail::LstmStep next = detail::lstm_step(gi, gh, c, H);
          c_new = next.c;
          h_new = next.h;
          // Back to the products' dtype before the projection (a bf16 model's weight_hr is bf16;
          // PyTorch also projects the low-precision o tanh(c)).
          if (h_new.dtype() != xi.dtype()) h_new = mg::to(h_new, xi.dtype());
          if (p[4].defined()) h_new = linear(h_new, p[4]);  // the projection to proj_size features
        } else if (gru) {
          h_new = detail::gru_step(gi, gh, h, H);
        } else {
          h_new = detail::rnn_step(gi, gh, o.nonlinearity == RNNNonlinearity::Relu);
        }
        if (lengths) {
          const Tensor& v = valid[std::size_t(t)];
          steps[std::size_t(t)] = where(v, h_new, scalar_like(0.0, h_new));
          h = where(v, h_new, h);
          if (lstm) c = where(v, c_new, c);
        } else {
          steps[std::size_t(t)] = h_new;
          h = h_new;
          if (lstm) c = c_new;
        }
      }
      dir_out.push_back(stack(steps, 0));  // [T, B, R]
      h_n.push_back(h);
      if (lstm) c_n.push_back(c);
    }
    layer_in = dirs == 1 ? dir_out[0] : cat(dir_out, 2);
    if (l + 1 < L && o.dropout > 0.0 && is_training()) layer_in = dropout(layer_in, o.dropout, true, o.generator);
  }
  const Tensor output = batch_first ? transpose(layer_in, 0, 1) : layer_in;
  return {output, stack(h_n, 0), lstm ? stack(c_n, 0) : Tensor()};
}

namespace {
// A PackedSequence may be built by hand: its lengths must be what pack_padded_sequence makes.
void check_packed(const PackedSequence& x, const std::string& name) {
  MG_CHECK(x.data.defined() && x.data.dim() == 3, ShapeError, name, ": expected packed data [T, B, in], got ",
           x.data.defined() ? describe(x.data) : "undefined");
  const int64_t T = x.data.size(0);
  int64_t longest = 0;
  for (std::size_t b = 0; b < x.lengths.size(); ++b) {
    MG_CHECK(x.lengths[b] >= 1 && x.lengths[b] <= T, Error, name, ": packed length ", x.lengths[b], " of sequence ", b,
             " is outside [1, ", T, "] (packed data ", describe(x.data), ")");
    longest = std::max(longest, x.lengths[b]);
  }
  MG_CHECK(x.lengths.empty() || longest == T, Error, name, ": the packed data has ", T,
           " steps but the longest length is ", longest, "\n  hint: build it with pack_padded_sequence");
}
}  // namespace

namespace detail {

namespace {
// [B, gates * H] -> the gates' [B, H] slices (unbind: one backward for all of them).
Tensors gate_parts(const Tensor& g, int64_t gates, int64_t hidden) {
  return unbind(reshape(g, {g.size(0), gates, hidden}), 1);
}
}  // namespace

Tensor initial_state(const Tensor& s, DType products, bool cell_state, const char* who, const char* what) {
  MG_CHECK(is_floating(s.dtype()), DTypeError, who, ": expected a floating ", what, ", got ", dtype_name(s.dtype()));
  const DType want = state_dtype(products, cell_state);
  return s.dtype() == want ? s : mg::to(s, want);
}

DType state_dtype(DType products, bool cell_state) {
  return cell_state && (products == DType::F16 || products == DType::BF16) ? DType::F32 : products;
}

Tensor rnn_step(const Tensor& gi, const Tensor& gh, bool relu_nonlinearity) {
  return relu_nonlinearity ? relu(gi + gh) : tanh(gi + gh);
}

LstmStep lstm_step(const Tensor& gi, const Tensor& gh, const Tensor& c, int64_t hidden) {
  const Tensors g = gate_parts(gi + gh, 4, hidden);
  const Tensor i = sigmoid(g[0]), f = sigmoid(g[1]), cand = tanh(g[2]), out = sigmoid(g[3]);
  const Tensor c_next = f * c + i * cand;
  return {out * tanh(c_next), c_next};
}

Tensor gru_step(const Tensor& gi, const Tensor& gh, const Tensor& h, int64_t hidden) {
  const Tensors a = gate_parts(gi, 3, hidden), b = gate_parts(gh, 3, hidden);
  const Tensor r = sigmoid(a[0] + b[0]);
  const Tensor z = sigmoid(a[1] + b[1]);
  const Tensor n = tanh(a[2] + r * b[2]);
  return (1.0 - z) * n + z * h;
}

}  // namespace detail

PackedRNNOutput RNN::forward(const PackedSequence& x, const Tensor& h0) {
  auto scope = module_scope(*this);
  check_packed(x, layer_name());
  const std::vector<Tensor> r = run(x.data, h0, Tensor(), &x.lengths);
  return {{r[0], x.lengths}, r[1]};
}

PackedLSTMOutput LSTM::forward(const PackedSequence& x, const Tensor& h0, const Tensor& c0) {
  auto scope = module_scope(*this);
  check_packed(x, layer_name());
  const std::vector<Tensor> r = run(x.data, h0, c0, &x.lengths);
  return {{r[0], x.lengths}, r[1], r[2]};
}

PackedRNNOutput GRU::forward(const PackedSequence& x, const Tensor& h0) {
  auto scope = module_scope(*this);
  check_packed(x, layer_name());
  const std::vector<Tensor> r = run(x.data, h0, Tensor(), &x.lengths);
  return {{r[0], x.lengths}, r[1]};
}

RNNOutput RNN::forward(const Tensor& x, const Tensor& h0) {
  auto scope = module_scope(*this);
  const std::vector<Tensor> r = run(x, h0, Tensor());
  return {r[0], r[1]};
}

LSTMOutput LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) {
  auto scope = module_scope(*this);
  const std::vector<Tensor> r = run(x, h0, c0);
  return {r[0], r[1], r[2]};
}

RNNOutput GRU::forward(const Tensor& x, const Tensor& h0) {
  auto scope = module_scope(*this);
  const std::vector<Tensor> r = run(x, h0, Tensor());
  return {r[0], r[1]};
}

}  // namespace mg::nn
