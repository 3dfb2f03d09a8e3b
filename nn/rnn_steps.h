// One time step of each recurrent cell, from the two projections gi = W_ih x + b_ih and
// gh = W_hh h + b_hh ([B, gates * H] each): the math written once for the multi-step layers
// (nn/rnn.h) and the single-step cells (nn/rnn_cell.h), in PyTorch's gate order.
#pragma once
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg::nn::detail {

// A given initial state in the dtype the recurrence runs in: the products' dtype (the weights' or
// the autocast dtype, as PyTorch's autocast casts hx), except an LSTM cell state (cell_state),
// which runs in f32 beside f16/bf16 products (its running sum would round every step) — so an f32
// c, such as a returned c_n fed back, is used as it is. A non-floating state is a DTypeError
// naming `who` and `what` ("LSTM", "c0").
Tensor initial_state(const Tensor& s, DType products, bool cell_state, const char* who, const char* what);
// The dtype a state runs in beside `products`: f32 for an LSTM cell state beside f16/bf16, else products.
DType state_dtype(DType products, bool cell_state);

// h' = tanh(gi + gh) or relu(gi + gh).
Tensor rnn_step(const Tensor& gi, const Tensor& gh, bool relu);

// i, f, g, o = σ, σ, tanh, σ of gi + gh split in four; c' = f c + i g, h' = o tanh(c'). c' takes
// the promoted dtype of c and the gates (an f32 c stays f32 under bf16 products).
struct LstmStep {
  Tensor h, c;
};
LstmStep lstm_step(const Tensor& gi, const Tensor& gh, const Tensor& c, int64_t hidden);

// r, z = σ of the first two thirds of gi + gh; n = tanh(gi_n + r gh_n); h' = (1 - z) n + z h.
Tensor gru_step(const Tensor& gi, const Tensor& gh, const Tensor& h, int64_t hidden);

}  // namespace mg::nn::detail
