// What the weight reparametrizations (nn/weight_norm.h, nn/spectral_norm.h) share: finding and
// checking the parameter they replace, and the handle their remove_ functions take.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mixgrad/nn/module.h"

namespace mg::nn {

// What weight_norm and spectral_norm return, for remove_weight_norm / remove_spectral_norm: which
// of the two, the parameter's name, the forward pre-hook they registered and the dim they
// normalize by (std::nullopt: weight_norm over the whole weight). A remove_ function refuses a
// handle of the other kind or of another module's hook.
struct ReparametrizationHandle {
  enum class Kind { WeightNorm, SpectralNorm };
  Kind kind = Kind::WeightNorm;
  std::string name;
  int64_t hook = 0;
  std::optional<int64_t> dim;
  const Tensor* member = nullptr;  // the layer's member the hook sets
};

}  // namespace mg::nn

namespace mg::nn::detail {

// m's own parameter (or buffer) `name`, an error naming `op` when m has none.
Tensor own_parameter(const char* op, const Module& m, const std::string& name);
Tensor own_buffer(const char* op, const Module& m, const std::string& name);

// Checks that the member `weight` holds m's own parameter `name` (the hook sets that member, so it
// must be the one registered under the name).
void check_reparametrized_weight(const char* op, const Module& m, const Tensor& weight, const std::string& name);
// Checks that `handle` is one `kind` returned for the member `weight` (nothing is changed otherwise).
void check_handle(const char* op, const ReparametrizationHandle& handle, ReparametrizationHandle::Kind kind,
                  const Tensor& weight);

}  // namespace mg::nn::detail
