// nn::init: in-place initialisers for parameters, with PyTorch's formulas so a mixgrad layer starts
// from the same distribution as its PyTorch counterpart. Values are drawn in f64 (f64 tensors) or
// f32 (all others) from the Philox stream of `gen` (the default generator when null) and then
// rounded once into the tensor's dtype; gradients are not recorded.
//
//   nn::init::kaiming_normal_(conv->weight, {.mode = nn::init::FanMode::FanOut,
//                                           .nonlinearity = nn::init::Nonlinearity::ReLU});
#pragma once
#include <cstdint>
#include <utility>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg::nn::init {

enum class Nonlinearity { Linear, Conv, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };
enum class FanMode { FanIn, FanOut };

// The recommended gain for a nonlinearity (PyTorch's calculate_gain): 1 for Linear/Conv/Sigmoid,
// 5/3 for Tanh, sqrt(2) for ReLU, sqrt(2 / (1 + slope^2)) for LeakyReLU, 3/4 for SELU.
double calculate_gain(Nonlinearity nonlinearity, double negative_slope = 0.01);

// (fan_in, fan_out) of a weight [out, in, *kernel]: in * prod(kernel), out * prod(kernel).
// Needs at least 2 dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);

Tensor uniform_(Tensor t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor normal_(Tensor t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(Tensor t, double value);
Tensor zeros_(Tensor t);
Tensor ones_(Tensor t);

// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor t, double gain = 1.0, Generator* gen = nullptr);
// N(0, s^2) with s = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor t, double gain = 1.0, Generator* gen = nullptr);

struct KaimingOptions {
  double a = 0.0;  // negative slope of the LeakyReLU that follows (only used for LeakyReLU)
  FanMode mode = FanMode::FanIn;
  Nonlinearity nonlinearity = Nonlinearity::LeakyReLU;
};
// U(-b, b) with b = gain * sqrt(3 / fan); PyTorch's default Linear/Conv init is a = sqrt(5).
Tensor kaiming_uniform_(Tensor t, const KaimingOptions& options = {}, Generator* gen = nullptr);
// N(0, s^2) with s = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor t, const KaimingOptions& options = {}, Generator* gen = nullptr);

// N(mean, std^2) restricted to [low, high] (BERT uses std 0.02 with the default +-2 bounds, i.e.
// effectively untruncated at +-100 std), sampled exactly at any distance from the mean: by
// rejection from the normal when the bounds hold at least 30% of its mass, else from Robert's
// uniform or exponential proposals (a [5, 6] or [40, inf) interval of N(0, 1) works, where
// PyTorch's inverse-CDF method returns the bound). Sampled in f64, rounded once into t's dtype.
Tensor trunc_normal_(Tensor t, double mean = 0.0, double std = 1.0, double low = -2.0, double high = 2.0,
                     Generator* gen = nullptr);

}  // namespace mg::nn::init
