// Weight normalisation (Salimans & Kingma, 2016), PyTorch's torch.nn.utils.weight_norm: a layer's
// weight w is trained as a magnitude g and a direction v, w = g * v / ||v||, which decouples the
// length of each output's weight vector from its direction (faster, better-conditioned training
// of convolutional and recurrent models without batch statistics).
//
//   auto fc = nn::make<nn::Linear>({.in = 20, .out = 40});
//   const nn::ReparametrizationHandle h = nn::weight_norm(*fc, fc->weight);   // fc's parameters: weight_g [40, 1], weight_v [40, 20]
//   auto opt = optim::Adam(fc->parameters(), {});           // build the optimizer after: it trains g and v
//   ...
//   nn::remove_weight_norm(*fc, fc->weight, h);              // weight is one parameter again
//
// State dicts carry `weight_g` and `weight_v` as PyTorch's torch.nn.utils.weight_norm writes them
// (the newer torch.nn.utils.parametrizations.weight_norm names them
// `parametrizations.weight.original0/1`: rename those keys to load such a file).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mixgrad/nn/module.h"
#include "mixgrad/nn/reparametrize.h"

namespace mg::nn {

// Replaces m's parameter `name` — `weight`, the member handle m's forward reads — by the
// parameters `<name>_g` (the 2-norm of each slice of the weight along `dim`, sizes 1 elsewhere:
// [out, 1] for a Linear, [out, 1, 1, 1] for a Conv2d; one 0-d number when dim is std::nullopt,
// PyTorch's dim=None) and `<name>_v` (the weight itself, so w is unchanged at first). Before every
// call through m's operator() (not a direct forward() call) a pre-hook sets
// weight = g * v / ||v||_(all dims but dim), so the gradients reach g and v; weight is also set
// at once. Returns the hook and dim for remove_weight_norm. A negative dim counts from the end
// (PyTorch's dim=-1 means None; here it is the last dim). Errors: `weight` is not m's parameter
// `name`, or dim is out of range.
ReparametrizationHandle weight_norm(UnaryModule& m, Tensor& weight, std::optional<int64_t> dim = 0,
                                    const std::string& name = "weight");

// Undoes weight_norm: removes the hook of `handle` (weight_norm's return value) and the parameters
// `<name>_g`, `<name>_v`, and registers `name` again with the current g * v / ||v|| (a new leaf,
// which `weight` then holds; rebuild the optimizer). Errors: no `<name>_g`/`<name>_v` parameters,
// or an unknown hook.
void remove_weight_norm(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle,
                        const std::string& name = "weight");

// g * v / ||v||, the norm taken over every dim but `dim` (over all of v when dim is std::nullopt),
// PyTorch's torch._weight_norm; differentiable.
Tensor weight_norm_weight(const Tensor& v, const Tensor& g, std::optional<int64_t> dim);

// The 2-norm of v over every dim but `dim`, keeping v's rank (sizes 1 elsewhere); 0-d over all of
// v when dim is std::nullopt (PyTorch's torch.norm_except_dim).
Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim);

}  // namespace mg::nn
