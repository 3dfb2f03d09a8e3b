// Recurrent layers with PyTorch's equations, options, parameter names and initialisation:
// RNN (tanh or relu), LSTM and GRU, multi-layer, bidirectional, batch_first, dropout between
// layers (training only). Each layer computes the input projections of every time step in one
// linear() (a single GEMM over [T*B, in]) and then steps through time with the recurrent
// projection; all through public ops, so they differentiate (backpropagation through time), run
// on every device and follow autocast (the linear() products are lower-precision ops, DESIGN §4;
// the gates' sigmoid/tanh keep that dtype, and the states are cast to it as PyTorch's autocast
// does — except LSTM's cell state, kept in f32 for f16/bf16 so that its running sum does not round
// at every step; c_n is then f32). Per-step slices come from unbind (ops/ops.h), so
// backpropagation through T steps costs O(T), not the O(T^2) of T select()s.
//
//   auto lstm = nn::make<nn::LSTM>({.input_size = 32, .hidden_size = 64, .num_layers = 2, .batch_first = true});
//   nn::LSTMOutput out = lstm->forward(x);          // x [B, T, 32] -> out.output [B, T, 64]
//   // out.h_n, out.c_n: [num_layers * directions, B, 64]
//   // unbatched, as PyTorch: x [T, 32] (h0, c0 [num_layers * directions, 64]) is a batch of one
//   // variable lengths: lstm->forward(nn::pack_padded_sequence(x, lengths, true)) (nn/packed_sequence.h)
//
// Equations (W_i*: input weights, W_h*: recurrent weights, b: their biases, per gate):
//   RNN:  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)                       (relu with nonlinearity Relu)
//   LSTM: i, f, g, o = σ, σ, tanh, σ of (W_ih x + b_ih + W_hh h + b_hh) split in four (that order)
//         c' = f c + i g,  h' = o tanh(c')     (with proj_size: h' = W_hr (o tanh(c')))
//   GRU:  r, z = σ of the first two thirds of (W_ih x + b_ih + W_hh h + b_hh)
//         n = tanh(W_in x + b_in + r (W_hn h + b_hn)),  h' = (1 - z) n + z h
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/core/generator.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/packed_sequence.h"

namespace mg::nn {

enum class RNNNonlinearity { Tanh, Relu };

struct RNNOptions {
  int64_t input_size = 0;    // features of x
  int64_t hidden_size = 0;   // features of h
  int64_t num_layers = 1;
  bool bias = true;          // b_ih and b_hh
  bool batch_first = false;  // x and output [B, T, F] instead of [T, B, F] (h0/h_n stay [layers*dirs, B, H])
  double dropout = 0.0;      // on every layer's output but the last, in training
  bool bidirectional = false;
  RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh;  // RNN only
  int64_t proj_size = 0;     // LSTM only: h = W_hr (o tanh(c)), of proj_size features (< hidden_size); 0: none
  Generator* generator = nullptr;  // dropout stream; the default generator when null
};

// output [T, B, dirs * R] (batch_first: [B, T, dirs * R]); h_n [num_layers * dirs, B, R] and an
// LSTM's c_n [num_layers * dirs, B, H], layer by layer, forward direction first. R = H, or an
// LSTM's proj_size when set.
struct RNNOutput {
  Tensor output;
  Tensor h_n;
};
struct LSTMOutput {
  Tensor output;
  Tensor h_n;
  Tensor c_n;
};
// The same for a PackedSequence input (nn/packed_sequence.h): the output packed with the input's
// lengths; h_n (c_n) after each sequence's last step.
struct PackedRNNOutput {
  PackedSequence output;
  Tensor h_n;
};
struct PackedLSTMOutput {
  PackedSequence output;
  Tensor h_n;
  Tensor c_n;
};

// Shared body: parameters weight_ih_l{k}[_reverse] [gates*H, in], weight_hh_l{k}[_reverse]
// [gates*H, R], bias_ih_l{k}[_reverse], bias_hh_l{k}[_reverse] [gates*H], and with an LSTM's
// proj_size P weight_hr_l{k}[_reverse] [P, H]; all U(-1/sqrt(H), 1/sqrt(H)). R, the size of h, is
// P with a projection and H without; a layer above the first takes dirs * R features.
class RNNBase : public Module {
 public:
  void reset_parameters();
  const RNNOptions& options() const { return options_; }
  // The parameters of one layer and direction: {w_ih, w_hh, b_ih, b_hh, w_hr} (biases undefined
  // without bias, w_hr without proj_size).
  std::vector<Tensor> layer_parameters(int64_t layer, bool reverse) const;

 protected:
  enum class Cell { Rnn, Lstm, Gru };
  RNNBase(std::string type, Cell cell, RNNOptions options);
  std::string extra_repr() const override;
  // Runs every layer; h0/c0 may be undefined (zeros). Returns {output, h_n, c_n (LSTM)}. With
  // `lengths` (a PackedSequence's), x is time-major [T, B, in] and each sequence runs its length.
  std::vector<Tensor> run(const Tensor& x, const Tensor& h0, const Tensor& c0,
                          const std::vector<int64_t>* lengths = nullptr);

 private:
  int64_t gates() const;
  int64_t state_size() const;  // R: proj_size, or hidden_size without a projection
  Cell cell_;
  RNNOptions options_;
  std::vector<Tensor> params_;  // per layer and direction: w_ih, w_hh, b_ih, b_hh, w_hr (undefined ones kept)
};

class RNN : public RNNBase {
 public:
  using Options = RNNOptions;
  explicit RNN(Options options) : RNNBase("RNN", Cell::Rnn, options) {}
  // x [T, B, in] (batch_first: [B, T, in]) or unbatched [T, in]; h0 [layers*dirs, B, H] ([layers*dirs, H]
  // unbatched) or undefined (zeros).
  RNNOutput forward(const Tensor& x, const Tensor& h0 = Tensor());
  // Variable-length sequences (pack_padded_sequence), as PyTorch's packed input.
  PackedRNNOutput forward(const PackedSequence& x, const Tensor& h0 = Tensor());
};

class LSTM : public RNNBase {
 public:
  using Options = RNNOptions;
  explicit LSTM(Options options) : RNNBase("LSTM", Cell::Lstm, options) {}
  // h0 [layers*dirs, B, R], c0 [layers*dirs, B, H], each undefined for zeros.
  LSTMOutput forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  PackedLSTMOutput forward(const PackedSequence& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
};

class GRU : public RNNBase {
 public:
  using Options = RNNOptions;
  explicit GRU(Options options) : RNNBase("GRU", Cell::Gru, options) {}
  RNNOutput forward(const Tensor& x, const Tensor& h0 = Tensor());
  PackedRNNOutput forward(const PackedSequence& x, const Tensor& h0 = Tensor());
};

}  // namespace mg::nn
