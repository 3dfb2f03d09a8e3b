// Layers that only move elements: Unflatten (one dim into several, PyTorch's nn.Unflatten),
// PixelShuffle and PixelUnshuffle (sub-pixel convolution's rearrangement, Shi et al. 2016),
// ChannelShuffle (ShuffleNet, Zhang et al. 2017):
//   pixel_shuffle:   [*, C * r * r, H, W] -> [*, C, H * r, W * r], y[c, h*r + i, w*r + j] = x[c*r*r + i*r + j, h, w]
//   pixel_unshuffle: the inverse.
// Views and one copy through public ops: every dtype and device, any autocast, differentiable.
//
//   auto up = nn::make<nn::PixelShuffle>({.upscale_factor = 2});   // [N, 4C, H, W] -> [N, C, 2H, 2W]
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/nn/module.h"

namespace mg {

// x [*, C * r * r, H, W] -> [*, C, H * r, W * r]; r >= 1.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
// x [*, C, H * r, W * r] -> [*, C * r * r, H, W]; r >= 1.
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);
// ShuffleNet's channel shuffle: x [N, C, *] (3+ dims, C divisible by groups) -> the same shape
// with channel g * (C / groups) + i moved to i * groups + g.
Tensor channel_shuffle(const Tensor& x, int64_t groups);

}  // namespace mg

namespace mg::nn {

struct UnflattenOptions {
  int64_t dim = 0;            // the dim to split (negative: from the end)
  std::vector<int64_t> sizes; // its new sizes, their product its size (one may be -1: inferred)
};

class Unflatten : public UnaryModule {
 public:
  using Options = UnflattenOptions;
  explicit Unflatten(Options options);
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct PixelShuffleOptions {
  int64_t upscale_factor = 1;
};

class PixelShuffle : public UnaryModule {
 public:
  using Options = PixelShuffleOptions;
  explicit PixelShuffle(Options options);
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, options_.upscale_factor); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct PixelUnshuffleOptions {
  int64_t downscale_factor = 1;
};

class PixelUnshuffle : public UnaryModule {
 public:
  using Options = PixelUnshuffleOptions;
  explicit PixelUnshuffle(Options options);
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, options_.downscale_factor); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct ChannelShuffleOptions {
  int64_t groups = 1;
};

class ChannelShuffle : public UnaryModule {
 public:
  using Options = ChannelShuffleOptions;
  explicit ChannelShuffle(Options options);
  Tensor forward(const Tensor& x) override { return channel_shuffle(x, options_.groups); }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
