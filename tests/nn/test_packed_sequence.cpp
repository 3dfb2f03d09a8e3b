// pack_padded_sequence / pad_packed_sequence (nn/packed_sequence.h) on their own: the cut to the
// longest length, the zeroed padding and its missing gradient, padding_value, total_length,
// batch_first, and the refusals. The layers' packed results against PyTorch are in test_rnn.cpp.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "nn/packed_sequence.h"
#include "nn/rnn.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("pack_padded_sequence cuts to the longest length and zeroes the padding, and pad_packed_sequence restores it",
          "[nn][rnn][packed]") {
  // x [B=2, T=4, F=1] batch-first: rows 1..4 and 11..14; lengths 3 and 2.
  const Tensor x = from_vector<float>({1, 2, 3, 4, 11, 12, 13, 14}, {2, 4, 1}).requires_grad_();
  const nn::PackedSequence p = nn::pack_padded_sequence(x, {3, 2}, /*batch_first=*/true);
  REQUIRE(p.data.shape() == Shape{3, 2, 1});  // time-major, cut to 3 steps
  CHECK(values(p.data) == std::vector<double>{1, 11, 2, 12, 3, 0});
  CHECK(p.lengths == std::vector<int64_t>{3, 2});
  const auto [padded, lengths] = nn::pad_packed_sequence(p, /*batch_first=*/true, /*padding_value=*/-1.0, 5);
  REQUIRE(padded.shape() == Shape{2, 5, 1});
  CHECK(values(padded) == std::vector<double>{1, 2, 3, -1, -1, 11, 12, -1, -1, -1});
  CHECK(lengths == std::vector<int64_t>{3, 2});
  padded.sum().backward();  // the padding gets no gradient
  CHECK(values(x.grad()) == std::vector<double>{1, 1, 1, 0, 1, 1, 0, 0});
  const auto [time_major, ignored] = nn::pad_packed_sequence(p);
  CHECK(time_major.shape() == Shape{3, 2, 1});
}

TEST_CASE("packed sequences: bad lengths and data are named errors", "[nn][rnn][packed]") {
  const Tensor x = zeros({4, 3, 2});  // [T, B, F]
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(x, {4, 2}), "got 2 lengths for a batch of 3");
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(x, {4, 5, 1}), "length 5 of sequence 1 is outside [1, 4]");
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(x, {4, 0, 1}), "length 0 of sequence 1 is outside [1, 4]");
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(x, {2, 4, 1}), "are not in decreasing order");
  CHECK(nn::pack_padded_sequence(x, {2, 4, 1}, false, /*enforce_sorted=*/false).data.shape() == Shape{4, 3, 2});
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(zeros({4}), {4}), "expected x [T, B, *]");
  const nn::PackedSequence p = nn::pack_padded_sequence(x, {3, 2, 1});
  MG_REQUIRE_ERROR(nn::pad_packed_sequence(p, false, 0.0, 2), "total_length 2 is shorter than the longest sequence (3");
  MG_REQUIRE_ERROR(nn::pad_packed_sequence({zeros({3, 2}), {3, 2, 1}}), "with B = 3 lengths");
  nn::LSTM lstm({.input_size = 2, .hidden_size = 3});
  MG_REQUIRE_ERROR(lstm.forward(nn::PackedSequence{zeros({3, 2}), {3, 2}}), "expected packed data [T, B, in]");
  MG_REQUIRE_ERROR(lstm.forward(nn::PackedSequence{zeros({3, 2, 2}), {3, 2, 1}}), "3 lengths for a batch of 2");
  MG_REQUIRE_ERROR(lstm.forward(nn::PackedSequence{zeros({3, 3, 2}), {3, 2}}), "2 lengths for a batch of 3");
  MG_REQUIRE_ERROR(lstm.forward(nn::PackedSequence{zeros({3, 2, 2}), {3, 0}}), "packed length 0 of sequence 1 is outside [1, 3]");
  MG_REQUIRE_ERROR(lstm.forward(nn::PackedSequence{zeros({3, 2, 2}), {2, 1}}), "3 steps but the longest length is 2");
  MG_REQUIRE_ERROR(nn::pack_padded_sequence(zeros({4, 0, 2}), {}), "expected at least one sequence");
}

TEST_CASE("pad_packed_sequence pads data changed after packing", "[nn][rnn][packed]") {
  // As in PyTorch, an elementwise function of the packed data must not leak into the padding.
  const nn::PackedSequence p = nn::pack_padded_sequence(zeros({3, 2, 1}), {3, 1});
  const auto [padded, lengths] = nn::pad_packed_sequence({sigmoid(p.data), p.lengths});
  CHECK(values(padded) == std::vector<double>{0.5, 0.5, 0.5, 0, 0.5, 0});
}

TEST_CASE("pad_sequence, unpad_sequence, pack_sequence and unpack_sequence follow PyTorch", "[nn][rnn]") {
  const Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor b = from_vector<double>({7, 8}, {1, 2});
  const Tensor c = from_vector<double>({9, 10, 11, 12}, {2, 2});
  // torch.nn.utils.rnn.pad_sequence([a, b, c], padding_value=-1): [3, 3, 2], time-major
  const Tensor t = nn::pad_sequence({a, b, c}, false, -1.0);
  CHECK(t.shape() == Shape{3, 3, 2});
  CHECK(test::values(t) == std::vector<double>{1, 2, 7, 8, 9, 10, 3, 4, -1, -1, 11, 12, 5, 6, -1, -1, -1, -1});
  const Tensor bf = nn::pad_sequence({a, b, c}, true);
  CHECK(bf.shape() == Shape{3, 3, 2});
  CHECK(test::values(bf.select(0, 1)) == std::vector<double>{7, 8, 0, 0, 0, 0});
  // padding_side="left": each sequence ends at the last step
  CHECK(test::values(nn::pad_sequence({a, b}, true, 0.0, true).select(0, 1)) == std::vector<double>{0, 0, 0, 0, 7, 8});
  const Tensors back = nn::unpad_sequence(bf, {3, 1, 2}, true);
  REQUIRE(back.size() == 3);
  CHECK(test::values(back[0]) == test::values(a));
  CHECK(test::values(back[1]) == test::values(b));
  CHECK(test::values(back[2]) == test::values(c));
  const nn::PackedSequence packed = nn::pack_sequence({a, c, b});
  CHECK(packed.lengths == std::vector<int64_t>{3, 2, 1});
  const Tensors unpacked = nn::unpack_sequence(packed);
  CHECK(test::values(unpacked[1]) == test::values(c));
  MG_REQUIRE_ERROR(nn::pack_sequence({b, a}), "decreasing");  // enforce_sorted: decreasing lengths or an error
  CHECK(nn::pack_sequence({b, a}, false).lengths == std::vector<int64_t>{1, 3});
  // Gradients flow back to each sequence.
  const Tensor x = from_vector<double>({1, 2}, {2}).requires_grad_();
  const Tensor y = from_vector<double>({3}, {1}).requires_grad_();
  sum(nn::pad_sequence({x, y}) * 2.0).backward();
  CHECK(test::values(x.grad()) == std::vector<double>{2, 2});
  CHECK(test::values(y.grad()) == std::vector<double>{2});
  MG_REQUIRE_ERROR(nn::pad_sequence({}), "expected at least one sequence");
  MG_REQUIRE_ERROR(nn::pad_sequence({a, from_vector<double>({1, 2, 3}, {1, 3})}), "the same trailing dims");
  MG_REQUIRE_ERROR(nn::pad_sequence({a, b.to(DType::F32)}), "one dtype and device");
  MG_REQUIRE_ERROR(nn::unpad_sequence(bf, {3, 4, 1}, true), "length 4 of sequence 1 is outside [0, 3]");
}
