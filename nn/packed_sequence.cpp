#include "mixgrad/nn/packed_sequence.h"

#include <algorithm>
#include <string>

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

namespace {

std::string list(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// x [T, B, ...] with the steps beyond each length set to `value` (where(): no gradient there).
Tensor fill_beyond(const Tensor& x, const std::vector<int64_t>& lengths, double value) {
  Shape mask_shape{x.size(0), x.size(1)};
  for (int64_t d = 2; d < x.dim(); ++d) mask_shape.push_back(1);
  const Tensor mask = reshape(length_mask(lengths, x.size(0), x.device()), mask_shape);
  return where(mask, x, scalar_like(value, x));
}

}  // namespace

Tensor length_mask(const std::vector<int64_t>& lengths, int64_t steps, Device device) {
  const int64_t B = int64_t(lengths.size());
  Tensor m = empty({steps, B}, {.dtype = DType::Bool});
  bool* p = m.data<bool>();
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t b = 0; b < B; ++b) p[t * B + b] = t < lengths[std::size_t(b)];
  }
  return m.to(device);
}

PackedSequence pack_padded_sequence(const Tensor& x, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  constexpr const char* kWho = "pack_padded_sequence";
  MG_CHECK(x.defined() && x.dim() >= 2, ShapeError, kWho, ": expected x ", batch_first ? "[B, T, *]" : "[T, B, *]",
           ", got ", x.defined() ? describe(x) : "undefined");
  const Tensor tx = batch_first ? transpose(x, 0, 1) : x;  // [T, B, ...]
  const int64_t T = tx.size(0), B = tx.size(1);
  MG_CHECK(int64_t(lengths.size()) == B, ShapeError, kWho, ": got ", lengths.size(), " lengths for a batch of ", B,
           " (x ", describe(x), ")");
  MG_CHECK(B > 0, ShapeError, kWho, ": expected at least one sequence, got x ", describe(x));
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    MG_CHECK(lengths[b] >= 1 && lengths[b] <= T, Error, kWho, ": length ", lengths[b], " of sequence ", b,
             " is outside [1, ", T, "] (x has ", T, " steps); lengths ", list(lengths));
    MG_CHECK(!enforce_sorted || b == 0 || lengths[b] <= lengths[b - 1], Error, kWho, ": lengths ", list(lengths),
             " are not in decreasing order\n  hint: sort the batch by length, or pass enforce_sorted = false");
  }
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  return {fill_beyond(tx.narrow(0, 0, longest), lengths, 0.0), lengths};
}

std::pair<Tensor, std::vector<int64_t>> pad_packed_sequence(const PackedSequence& packed, bool batch_first,
                                                            double padding_value, std::optional<int64_t> total_length) {
  constexpr const char* kWho = "pad_packed_sequence";
  const Tensor& d = packed.data;
  MG_CHECK(d.defined() && d.dim() >= 2 && d.size(1) == int64_t(packed.lengths.size()), ShapeError, kWho,
           ": the packed data must be [T, B, *] with B = ", packed.lengths.size(), " lengths, got ",
           d.defined() ? describe(d) : "undefined");
  const int64_t T = d.size(0);
  // Always filled: data changed elementwise after packing (sigmoid(p.data)) has changed its padding too.
  Tensor out = fill_beyond(d, packed.lengths, padding_value);
  if (total_length) {
    MG_CHECK(*total_length >= T, Error, kWho, ": total_length ", *total_length,
             " is shorter than the longest sequence (", T, " steps)");
    if (*total_length > T) {
      Shape pad_shape = d.shape();
      pad_shape[0] = *total_length - T;
      out = cat({out, full(pad_shape, padding_value, {.dtype = d.dtype(), .device = d.device()})}, 0);
    }
  }
  return {batch_first ? transpose(out, 0, 1) : out, packed.lengths};
}

Tensor pad_sequence(const Tensors& sequences, bool batch_first, double padding_value, bool pad_left) {
  MG_CHECK(!sequences.empty(), ShapeError, "pad_sequence: expected at least one sequence");
  const Tensor& first = sequences.front();
  MG_CHECK(first.defined() && first.dim() >= 1, ShapeError, "pad_sequence: expected sequences [L, *], got ",
           first.defined() ? describe(first) : "undefined");
  const Shape trailing(first.shape().begin() + 1, first.shape().end());
  int64_t longest = 0;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    MG_CHECK(s.defined() && s.dim() == first.dim() && Shape(s.shape().begin() + 1, s.shape().end()) == trailing,
             ShapeError, "pad_sequence: sequence ", i, " is ", s.defined() ? describe(s) : "undefined",
             ", but sequence 0 is ", describe(first), " (every sequence must be [L, *] with the same trailing dims)");
    MG_CHECK(s.dtype() == first.dtype() && s.device() == first.device(), DTypeError, "pad_sequence: sequence ", i,
             " is ", describe(s), ", but sequence 0 is ", describe(first), " (one dtype and device)");
    longest = std::max(longest, s.size(0));
  }
  Tensors padded;
  padded.reserve(sequences.size());
  for (const Tensor& s : sequences) {
    std::vector<int64_t> amounts(std::size_t(2 * s.dim()), 0);  // last dim first; the time dim is the last pair
    amounts[amounts.size() - (pad_left ? 2 : 1)] = longest - s.size(0);
    padded.push_back(longest == s.size(0) ? s : pad(s, amounts, PadMode::Constant, padding_value));
  }
  return stack(padded, batch_first ? 0 : 1);
}

Tensors unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first) {
  MG_CHECK(padded.defined() && padded.dim() >= 2, ShapeError, "unpad_sequence: expected padded [T, B, *], got ",
           padded.defined() ? describe(padded) : "undefined");
  const int64_t tdim = batch_first ? 1 : 0, bdim = batch_first ? 0 : 1;
  MG_CHECK(int64_t(lengths.size()) == padded.size(bdim), ShapeError, "unpad_sequence: ", lengths.size(),
           " lengths for a batch of ", padded.size(bdim), " (", describe(padded), ")");
  Tensors out;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    MG_CHECK(lengths[i] >= 0 && lengths[i] <= padded.size(tdim), IndexError, "unpad_sequence: length ", lengths[i],
             " of sequence ", i, " is outside [0, ", padded.size(tdim), "]");
    out.push_back(padded.select(bdim, int64_t(i)).narrow(0, 0, lengths[i]));
  }
  return out;
}

PackedSequence pack_sequence(const Tensors& sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() >= 1 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), lengths, /*batch_first=*/false, enforce_sorted);
}

Tensors unpack_sequence(const PackedSequence& packed) {
  const auto [padded, lengths] = pad_packed_sequence(packed);
  return unpad_sequence(padded, lengths);
}

}  // namespace mg::nn
