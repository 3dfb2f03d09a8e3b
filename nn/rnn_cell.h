// Single-step recurrent cells, PyTorch's RNNCell, LSTMCell and GRUCell: the same equations,
// parameter names, shapes and initialisation as one layer of nn::RNN / LSTM / GRU (nn/rnn.h), for
// loops written by hand (attention decoders, custom unrolling). The step math is shared with the
// layers (nn/rnn_steps.h).
//
//   auto cell = nn::make<nn::LSTMCell>({.input_size = 16, .hidden_size = 32});
//   nn::LSTMState s;                                    // undefined: zeros
//   for (const Tensor& x_t : unbind(x, 0)) s = cell->forward(x_t, s);   // x_t [B, 16]
//
// Input [B, in] with a state [B, H], or unbatched [in] with [H] (a batch of one, as PyTorch).
// Under autocast the products are bf16/f16 (DESIGN §4) and h' is in their dtype; LSTMCell keeps
// its cell state in f32 for f16/bf16, as the layers do (c' is f32), so a cell step equals a step of
// the layer also under autocast.
#pragma once
#include <string>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/rnn.h"

namespace mg::nn {

struct RNNCellOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  bool bias = true;
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;  // RNNCell only
};

struct LSTMState {
  Tensor h;  // [B, H] or [H]; undefined: zeros
  Tensor c;  // likewise
};

// weight_ih [gates*H, in], weight_hh [gates*H, H], bias_ih, bias_hh [gates*H]: U(±1/sqrt(H)).
class RNNCellBase : public Module {
 public:
  void reset_parameters();
  const RNNCellOptions& options() const { return options_; }

  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  // the biases undefined without bias

 protected:
  RNNCellBase(std::string type, int64_t gates, RNNCellOptions options);
  std::string extra_repr() const override;
  // The checked batch form of x and of a state (zeros when undefined), and whether x was
  // unbatched; gi and gh of them.
  struct Prepared {
    Tensor x;
    bool unbatched = false;
  };
  Prepared prepare(const Tensor& x) const;
  Tensor state_or_zeros(const Tensor& s, const Prepared& p, const char* what, DType dtype) const;
  Tensor input_projection(const Tensor& x) const;
  Tensor hidden_projection(const Tensor& h) const;

 private:
  RNNCellOptions options_;
};

class RNNCell : public RNNCellBase {
 public:
  using Options = RNNCellOptions;
  explicit RNNCell(Options options) : RNNCellBase("RNNCell", 1, options) {}
  // h' for x [B, in] and h [B, H] (or unbatched [in], [H]); an undefined h is zeros.
  Tensor forward(const Tensor& x, const Tensor& h = Tensor());
};

class LSTMCell : public RNNCellBase {
 public:
  using Options = RNNCellOptions;
  explicit LSTMCell(Options options) : RNNCellBase("LSTMCell", 4, options) {}
  // {h', c'} for x [B, in] and state {h, c} [B, H] each (or unbatched); undefined: zeros.
  LSTMState forward(const Tensor& x, const LSTMState& state = {});
};

class GRUCell : public RNNCellBase {
 public:
  using Options = RNNCellOptions;
  explicit GRUCell(Options options) : RNNCellBase("GRUCell", 3, options) {}
  Tensor forward(const Tensor& x, const Tensor& h = Tensor());
};

}  // namespace mg::nn
