// Unfold (im2col) and Fold (col2im), PyTorch's nn.Unfold / nn.Fold and F.unfold / F.fold, for
// 4-D (batched) and 3-D (unbatched) images:
//   unfold: x [N, C, H, W] -> [N, C·kh·kw, L], column l holding the block at the l-th position
//           (row-major over the oh × ow block positions), row c·kh·kw + i·kw + j its tap (i, j);
//   fold:   [N, C·kh·kw, L] -> [N, C, H, W], each block added back at its position (overlaps sum);
// with L = oh·ow, oh = (H + 2 padding_h - dilation_h (kh - 1) - 1) / stride_h + 1 (likewise ow).
// fold(unfold(x)) is x times the number of blocks covering each pixel.
//
// Both are public ops (slices, a stack, pads, adds), so they run on every dtype and device, under
// any autocast (they keep the input dtype, as PyTorch's), and are differentiable twice; their
// backward passes are strided copies and adds, with no scatter. fold adds the taps in f32 for
// f16/bf16 and rounds once (PyTorch's CPU kernel rounds after every add), tap by tap in PyTorch's
// CPU order, so f32 results are its CPU's bits. Cost: unfold copies the input kh·kw times; fold
// makes, per tap, a padded image-sized copy and an add (kh·kw passes over the output), except
// when the blocks tile the image (stride = kernel, dilation 1: one permute, nothing summed).
//
//   mg::Tensor cols = nn::unfold(x, {.kernel = 3, .padding = 1});        // [N, 9C, H·W]
//   mg::Tensor back = nn::fold(cols, {.output_size = {H, W}, .kernel = 3, .padding = 1});
#pragma once
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/size2.h"

namespace mg::nn {

struct UnfoldOptions {
  Size2 kernel;        // > 0
  Size2 dilation = 1;  // > 0
  Size2 padding = 0;   // >= 0, zeros on both sides
  Size2 stride = 1;    // > 0
};

struct FoldOptions {
  Size2 output_size;   // H, W of the image the blocks are added into
  Size2 kernel;
  Size2 dilation = 1;
  Size2 padding = 0;
  Size2 stride = 1;
};

Tensor unfold(const Tensor& x, const UnfoldOptions& options);
Tensor fold(const Tensor& x, const FoldOptions& options);

class Unfold : public UnaryModule {
 public:
  using Options = UnfoldOptions;
  explicit Unfold(Options options);
  Tensor forward(const Tensor& x) override { return unfold(x, options_); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

class Fold : public UnaryModule {
 public:
  using Options = FoldOptions;
  explicit Fold(Options options);
  Tensor forward(const Tensor& x) override { return fold(x, options_); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
