// What the weight reparametrizations (nn/weight_norm.h, nn/spectral_norm.h) share: finding and
// checking the parameter they replace, and the handle their remove_ functions take.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mixgrad/nn/module.h"

namespace mg::nn {

// What weight_norm and spectral_norm return, for remove_weight_norm / remove_spectral_norm: the
// forward pre-hook they registered and the dim they normalize by (std::nullopt: weight_norm over
// the whole weight).
struct ReparametrizationHandle {
  int64_t hook = 0;
  std::optional<int64_t> dim;
};

}  // namespace mg::nn

namespace mg::nn::detail {

// m's own parameter (or buffer) `name`, an error naming `op` when m has none.
Tensor own_parameter(const char* op, const Module& m, const std::string& name);
Tensor own_buffer(const char* op, const Module& m, const std::string& name);

// Checks that `weight` is m's own floating parameter `name` (the member the layer's forward reads
// must be the tensor registered under that name, or the hook would set the wrong handle).
void check_reparametrized_weight(const char* op, const Module& m, const Tensor& weight, const std::string& name);

}  // namespace mg::nn::detail
