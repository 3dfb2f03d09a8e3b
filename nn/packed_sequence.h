// Variable-length sequences for the recurrent layers: PyTorch's pack_padded_sequence /
// pad_packed_sequence, with the same results — an RNN, LSTM or GRU given a PackedSequence runs
// each sequence for its own length only: its steps beyond that leave the state alone and output
// padding, h_n (and c_n) hold each sequence's state after its last real step, and a bidirectional
// layer's reverse direction starts at each sequence's own last step.
//
// Decision: a PackedSequence keeps the padded tensor and the lengths, not PyTorch's interleaved
// rows of the sequences still running at each step. The layers mask their state updates with the
// lengths (a where() per step), which needs no sorting, gives the same values and gradients, and
// keeps the one batched GEMM per layer for the input projections; the cost is that padded steps
// are computed and discarded (PyTorch skips them). enforce_sorted is kept for PyTorch's contract
// (decreasing lengths or an error); with it off any order works, as in PyTorch.
//
//   nn::PackedSequence packed = nn::pack_padded_sequence(x, {5, 3, 2}, /*batch_first=*/true);  // x [3, 7, F]
//   nn::PackedLSTMOutput out = lstm->forward(packed);
//   auto [padded, lengths] = nn::pad_packed_sequence(out.output, /*batch_first=*/true);        // [3, 5, H]
//   mg::Tensor batch = nn::pad_sequence({a, b, c}, /*batch_first=*/true);   // [L_i, F] each -> [3, max L, F]
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg::nn {

struct PackedSequence {
  Tensor data;                   // [T, B, *] time-major, T = the longest length; padded steps are 0
  std::vector<int64_t> lengths;  // B lengths, each in [1, T]
};

// x [T, B, *] ([B, T, *] when batch_first) and each sequence's length (B of them, each in
// [1, T]; decreasing when enforce_sorted). Steps beyond a sequence's length are zeroed (and get
// no gradient); the data is cut to the longest length. Differentiable in x.
PackedSequence pack_padded_sequence(const Tensor& x, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);

// The padded tensor [T', B, *] ([B, T', *] when batch_first), with padding_value beyond each
// sequence's length, and the lengths. T' = total_length when given (at least the longest length),
// else the longest length. Differentiable in the packed data.
std::pair<Tensor, std::vector<int64_t>> pad_packed_sequence(const PackedSequence& packed, bool batch_first = false,
                                                            double padding_value = 0.0,
                                                            std::optional<int64_t> total_length = std::nullopt);

// PyTorch's pad_sequence: sequences [L_i, *] (the same trailing dims, dtype and device) stacked
// into [T, B, *] ([B, T, *] when batch_first), T = the longest L_i, padding_value beyond each
// sequence ("right") or before it ("left": each sequence ends at T). Differentiable.
Tensor pad_sequence(const Tensors& sequences, bool batch_first = false, double padding_value = 0.0,
                    bool pad_left = false);
// The inverse of pad_sequence (right padding): the first lengths[i] steps of sequence i, views of
// `padded` [T, B, *] ([B, T, *] when batch_first).
Tensors unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first = false);
// PyTorch's pack_sequence: pack_padded_sequence(pad_sequence(sequences), their lengths).
PackedSequence pack_sequence(const Tensors& sequences, bool enforce_sorted = true);
// PyTorch's unpack_sequence: the packed sequences as a list, each cut to its length.
Tensors unpack_sequence(const PackedSequence& packed);

// [T, B] bool on `device`: whether step t is within sequence b's length.
Tensor length_mask(const std::vector<int64_t>& lengths, int64_t steps, Device device);

}  // namespace mg::nn
