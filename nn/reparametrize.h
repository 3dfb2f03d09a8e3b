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

// The state-dict keys of PyTorch's newer parametrizations (torch.nn.utils.parametrizations,
// PyTorch >= 2.1, what its deprecated weight_norm now recommends) renamed to those of the hook
// forms here, so such a checkpoint loads into layers given nn::weight_norm / nn::spectral_norm:
//   <path>parametrizations.<name>.original0 -> <path><name>_g   (weight_norm's magnitude)
//   <path>parametrizations.<name>.original1 -> <path><name>_v   (its direction)
//   <path>parametrizations.<name>.original  -> <path><name>_orig  (spectral_norm's weight)
//   <path>parametrizations.<name>.0._u / 0._v -> <path><name>_u / <path><name>_v
// Other keys are kept as they are. A parametrization these forms cannot hold (original0 without
// original1, an `original` without spectral norm's u and v — orthogonal, say — or more than one
// parametrization on a tensor) is an mg::Error naming the key; so is a renamed key that is
// already in the state.
//   model->load_state_dict(nn::from_torch_parametrizations(io::load_safetensors("vocoder.safetensors").tensors));
NamedTensors from_torch_parametrizations(const NamedTensors& state);

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
