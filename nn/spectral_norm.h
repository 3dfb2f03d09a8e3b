// Spectral normalisation (Miyato et al., 2018), PyTorch's torch.nn.utils.spectral_norm: a layer's
// weight is divided by its largest singular value sigma, estimated by power iteration, which
// bounds the layer's Lipschitz constant (GAN discriminators, stable critics).
//
//   auto fc = nn::make<nn::Linear>({.in = 20, .out = 40});
//   const nn::ReparametrizationHandle h = nn::spectral_norm(*fc, fc->weight);  // weight_orig (parameter), weight_u, weight_v (buffers)
//   ...  nn::remove_spectral_norm(*fc, fc->weight, h);
//
// The weight is viewed as a matrix W [h, w]: `dim` moved to the front, the other dims flattened.
// Before every call through the layer's operator(), in training mode, n_power_iterations steps
// v = normalize(Wᵀ u), u = normalize(W v) update the buffers u [h] and v [w] in place (no
// gradient), then sigma = u · (W v) and weight = W / sigma (the gradient flows through sigma, as
// PyTorch's); in eval mode the stored u and v give sigma without iterating. normalize(x) is
// x / max(||x||, eps). State dicts carry `weight_orig`, `weight_u` and `weight_v` as PyTorch's
// torch.nn.utils.spectral_norm writes them; u and v start from normal draws (the generator's),
// so two frameworks agree once both have iterated to convergence, or when u and v are loaded.
#pragma once
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

// Replaces m's parameter `name` — `weight`, the member m's forward reads — by the parameter
// `<name>_orig` (the weight itself) and the buffers `<name>_u`, `<name>_v` (normalized normal
// draws), and registers the pre-hook that sets weight = W / sigma before every call through m's
// operator() (not a direct forward() call); weight is also set at once (from the initial u and v,
// without iterating). Returns the hook and dim for remove_spectral_norm. Errors: `weight` is not
// m's parameter `name`, a weight of fewer than 1 dim, dim out of range, n_power_iterations < 0,
// eps <= 0.
ReparametrizationHandle spectral_norm(UnaryModule& m, Tensor& weight, SpectralNormOptions options = {},
                                      const std::string& name = "weight");

// Undoes spectral_norm: removes the hook of `handle`, the parameter `<name>_orig` and the buffers, and
// registers `name` again with the current W / sigma (u and v as stored, no iteration; a new leaf,
// which `weight` then holds; rebuild the optimizer).
void remove_spectral_norm(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle,
                          const std::string& name = "weight");

}  // namespace mg::nn
