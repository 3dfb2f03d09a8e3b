// Spectral normalisation (Miyato et al., 2018), PyTorch's torch.nn.utils.spectral_norm: a layer's
// weight is divided by its largest singular value sigma, estimated by power iteration, which
// bounds the layer's Lipschitz constant (GAN discriminators, stable critics).
//
//   auto fc = nn::make<nn::Linear>({.in = 20, .out = 40});
//   const auto h = nn::spectral_norm(*fc, &nn::Linear::weight);  // weight_orig (parameter), weight_u, weight_v (buffers)
//   ...  nn::remove_spectral_norm(*fc, &nn::Linear::weight, h);
//
// The weight is viewed as a matrix W [h, w]: `dim` moved to the front, the other dims flattened.
// Before every call through the layer's operator(), in training mode, n_power_iterations steps
// v = normalize(Wᵀ u), u = normalize(W v) update the buffers u [h] and v [w] in place (no
// gradient), then sigma = u · (W v) and weight = W / sigma (the gradient flows through sigma, as
// PyTorch's); in eval mode the stored u and v give sigma without iterating. The estimate runs with
// autocast off (in the weight's dtype), as PyTorch's, whose autocast lowers neither mv nor dot.
// normalize(x) is x / max(||x||, eps). State dicts carry `weight_orig`, `weight_u` and `weight_v` as PyTorch's
// torch.nn.utils.spectral_norm writes them; u and v start from normal draws (the generator's),
// so two frameworks agree once both have iterated to convergence, or when u and v are loaded.
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

#include "mixgrad/core/generator.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/reparametrize.h"

namespace mg::nn {

struct SpectralNormOptions {
  int64_t n_power_iterations = 1;  // per training-mode call; >= 0
  double eps = 1e-12;              // > 0: the floor of the norms normalize divides by
  // The dim of the weight that indexes outputs: default 1 for ConvTranspose1d/2d/3d (their
  // weights are [in, out, ...]), else 0, as PyTorch's.
  std::optional<int64_t> dim;
  Generator* generator = nullptr;  // u and v's initial normal draws; nullptr: the default generator
};

namespace detail {
ReparametrizationHandle spectral_norm_member(UnaryModule& m, Tensor& weight, SpectralNormOptions options,
                                             const std::string& name);
void remove_spectral_norm_member(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle);
}  // namespace detail

// Replaces m's parameter `name` — held by the member `weight` m's forward reads, named by a
// pointer to member as weight_norm's (nn/weight_norm.h) — by the parameter `<name>_orig` (the
// weight itself) and the buffers `<name>_u`, `<name>_v` (normalized normal draws), and registers
// the pre-hook that sets m.*weight = W / sigma before every call through m's operator() (not a
// direct forward() call). Until the first call the member holds the raw weight without history, as
// PyTorch's. Returns the handle remove_spectral_norm takes. Errors: the member is not m's
// parameter `name`, a weight of fewer than 1 dim, dim out of range, n_power_iterations < 0, eps <= 0.
template <typename M, typename Owner>
  requires std::derived_from<M, UnaryModule> && std::derived_from<M, Owner>
ReparametrizationHandle spectral_norm(M& m, Tensor Owner::*weight, SpectralNormOptions options = {},
                                      const std::string& name = "weight") {
  return detail::spectral_norm_member(m, m.*weight, options, name);
}

// Undoes spectral_norm: removes the hook of `handle`, the parameter `<name>_orig` and the buffers,
// and registers `<name>` again with the current W / sigma (u and v as stored, no iteration; a new
// leaf, which the member then holds; rebuild the optimizer). Errors: a handle of weight_norm or of
// another member.
template <typename M, typename Owner>
  requires std::derived_from<M, UnaryModule> && std::derived_from<M, Owner>
void remove_spectral_norm(M& m, Tensor Owner::*weight, const ReparametrizationHandle& handle) {
  detail::remove_spectral_norm_member(m, m.*weight, handle);
}

}  // namespace mg::nn
