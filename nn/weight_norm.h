// Weight normalisation (Salimans & Kingma, 2016), PyTorch's torch.nn.utils.weight_norm: a layer's
// weight w is trained as a magnitude g and a direction v, w = g * v / ||v||, which decouples the
// length of each output's weight vector from its direction (faster, better-conditioned training
// of convolutional and recurrent models without batch statistics).
//
//   auto fc = nn::make<nn::Linear>({.in = 20, .out = 40});
//   const auto h = nn::weight_norm(*fc, &nn::Linear::weight);  // parameters weight_g [40, 1], weight_v [40, 20]
//   auto opt = optim::Adam(fc->parameters(), {});                // build the optimizer after: it trains g and v
//   ...
//   nn::remove_weight_norm(*fc, &nn::Linear::weight, h);         // weight is one parameter again
//
// The layer's member is named by a pointer to member (&nn::Linear::weight, &nn::Conv2d::weight,
// &nn::Linear::bias with name "bias"): the hook sets it before each call, so it must be the
// member the layer's forward reads, which a pointer to member guarantees (a reference could be a
// copy that the hook would write instead).
//
// State dicts carry `weight_g` and `weight_v` as PyTorch's torch.nn.utils.weight_norm writes them
// (the newer torch.nn.utils.parametrizations.weight_norm names them
// `parametrizations.weight.original0/1`: rename those keys to load such a file).
#pragma once
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/reparametrize.h"

namespace mg::nn {

namespace detail {
ReparametrizationHandle weight_norm_member(UnaryModule& m, Tensor& weight, std::optional<int64_t> dim,
                                           const std::string& name);
void remove_weight_norm_member(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle);
}  // namespace detail

// Replaces m's parameter `name` — held by the member `weight` that m's forward reads — by the
// parameters `<name>_g` (the 2-norm of each slice of the weight along `dim`, sizes 1 elsewhere:
// [out, 1] for a Linear, [out, 1, 1, 1] for a Conv2d; one 0-d number when dim is std::nullopt,
// PyTorch's dim=None) and `<name>_v` (the weight itself, so w is unchanged at first). Before every
// call through m's operator() (not a direct forward() call) a pre-hook sets
// m.*weight = g * v / ||v||_(all dims but dim), so the gradients reach g and v; it is also set at
// once. Returns the handle remove_weight_norm takes. A negative dim counts from the end
// (PyTorch's dim=-1 means None; here it is the last dim). Errors: the member is not m's parameter
// `name`, or dim is out of range.
template <typename M, typename Owner>
  requires std::derived_from<M, UnaryModule> && std::derived_from<M, Owner>
ReparametrizationHandle weight_norm(M& m, Tensor Owner::*weight, std::optional<int64_t> dim = 0,
                                    const std::string& name = "weight") {
  return detail::weight_norm_member(m, m.*weight, dim, name);
}

// Undoes weight_norm: removes the hook of `handle` (weight_norm's return value for this member)
// and the parameters `<name>_g`, `<name>_v`, and registers `<name>` again with the current
// g * v / ||v|| (a new leaf, which the member then holds; rebuild the optimizer). Errors: a handle
// of spectral_norm or of another member, no `<name>_g`/`<name>_v` parameters of the handle's shapes.
template <typename M, typename Owner>
  requires std::derived_from<M, UnaryModule> && std::derived_from<M, Owner>
void remove_weight_norm(M& m, Tensor Owner::*weight, const ReparametrizationHandle& handle) {
  detail::remove_weight_norm_member(m, m.*weight, handle);
}

// g * v / ||v||, the norm taken over every dim but `dim` (over all of v when dim is std::nullopt),
// PyTorch's torch._weight_norm; differentiable.
Tensor weight_norm_weight(const Tensor& v, const Tensor& g, std::optional<int64_t> dim);

// The 2-norm of v over every dim but `dim`, keeping v's rank (sizes 1 elsewhere); 0-d over all of
// v when dim is std::nullopt (PyTorch's torch.norm_except_dim).
Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim);

}  // namespace mg::nn
