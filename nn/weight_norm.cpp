#include "mixgrad/nn/weight_norm.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/nn/reparametrize.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim) {
  if (!dim) return norm(v);
  const int64_t d = wrap_dim(*dim, v.dim(), "weight_norm");
  if (v.dim() == 1) return abs(v);  // no other dims: each element is its own slice
  std::vector<int64_t> others;
  for (int64_t i = 0; i < v.dim(); ++i) {
    if (i != d) others.push_back(i);
  }
  return norm(v, 2.0, others, /*keepdim=*/true);
}

Tensor weight_norm_weight(const Tensor& v, const Tensor& g, std::optional<int64_t> dim) {
  return v * (g / norm_except_dim(v, dim));
}

namespace detail {

ReparametrizationHandle weight_norm_member(UnaryModule& m, Tensor& weight, std::optional<int64_t> dim,
                                           const std::string& name) {
  const char* op = "weight_norm";
  detail::check_reparametrized_weight(op, m, weight, name);
  MG_CHECK(!dim || weight.dim() > 0, ShapeError, op, ": ", m.layer_name(), ".", name, " is 0-d; pass dim = std::nullopt");
  if (dim) dim = wrap_dim(*dim, weight.dim(), op);
  const Tensor v = weight;
  Tensor g;
  {
    NoGradGuard no_grad;
    g = norm_except_dim(v, dim);
  }
  const bool trained = v.requires_grad();
  m.unregister_parameter(name);
  const Tensor g_param = m.register_parameter(name + "_g", g, trained);
  const Tensor v_param = m.register_parameter(name + "_v", v, trained);
  auto recompute = [g_param, v_param, dim, &weight](UnaryModule&, const Tensor&) {
    weight = weight_norm_weight(v_param, g_param, dim);
    return std::optional<Tensor>();
  };
  weight = weight_norm_weight(v_param, g_param, dim);
  const int64_t hook = m.register_forward_pre_hook(recompute);
  return {.kind = ReparametrizationHandle::Kind::WeightNorm, .name = name, .hook = hook, .dim = dim, .member = &weight};
}

void remove_weight_norm_member(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle) {
  const char* op = "remove_weight_norm";
  detail::check_handle(op, handle, ReparametrizationHandle::Kind::WeightNorm, weight);
  const std::string& name = handle.name;
  const Tensor g = detail::own_parameter(op, m, name + "_g");
  const Tensor v = detail::own_parameter(op, m, name + "_v");
  MG_CHECK(g.shape() == norm_except_dim(v.detach(), handle.dim).shape(), ShapeError, op, ": ", name, "_g ",
           describe(g), " does not fit ", name, "_v ", describe(v), " along the handle's dim");
  m.remove_hook(handle.hook);
  Tensor w;
  {
    NoGradGuard no_grad;
    w = weight_norm_weight(v, g, handle.dim);
  }
  m.unregister_parameter(name + "_g");
  m.unregister_parameter(name + "_v");
  weight = m.register_parameter(name, w, v.requires_grad());
}

}  // namespace detail

}  // namespace mg::nn
