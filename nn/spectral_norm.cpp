#include "mixgrad/nn/spectral_norm.h"

#include <cmath>
#include <memory>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/nn/conv.h"
#include "mixgrad/nn/conv1d.h"
#include "mixgrad/nn/conv3d.h"
#include "mixgrad/nn/reparametrize.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace {

// The weight as the matrix W [h, w]: `dim` first, the other dims flattened (a copy only when
// dim is not 0).
Tensor weight_matrix(const Tensor& weight, int64_t dim) {
  Tensor w = weight;
  if (dim != 0) {
    std::vector<int64_t> order{dim};
    for (int64_t d = 0; d < w.dim(); ++d) {
      if (d != dim) order.push_back(d);
    }
    w = permute(w, order);
  }
  return reshape(w, {w.size(0), w.dim() == 1 ? 1 : -1});
}

Tensor normalized(const Tensor& x, double eps) { return x / clamp_min(norm(x), eps); }

struct SpectralState {
  Tensor orig, u, v;
  int64_t dim = 0, iterations = 1;
  double eps = 1e-12;

  // W / sigma; with power_iteration, the buffers step first (in place, without a gradient).
  // Autocast off: the estimate in the weight's dtype, as PyTorch's (its autocast lowers neither mv
  // nor dot), so an autocast region does not move it.
  Tensor weight(bool power_iteration) {
    AutocastOffGuard no_autocast;
    const Tensor w = weight_matrix(orig, dim);
    Tensor uu = u, vv = v;
    if (power_iteration && iterations > 0) {
      NoGradGuard no_grad;
      const Tensor wd = w.detach();
      for (int64_t i = 0; i < iterations; ++i) {
        v.copy_(normalized(matmul(transpose(wd, 0, 1), u), eps));
        u.copy_(normalized(matmul(wd, v), eps));
      }
      // Copies for sigma: the buffers change in place at the next call, and the backward of this
      // one must see the values it used (PyTorch clones them too).
      uu = u.clone();
      vv = v.clone();
    }
    const Tensor sigma = sum(uu * matmul(w, vv));
    return orig / sigma;
  }
};

int64_t default_dim(const UnaryModule& m) {
  const bool transposed = dynamic_cast<const ConvTranspose1d*>(&m) != nullptr ||
                          dynamic_cast<const ConvTranspose2d*>(&m) != nullptr ||
                          dynamic_cast<const ConvTranspose3d*>(&m) != nullptr;
  return transposed ? 1 : 0;
}

}  // namespace

namespace detail {

ReparametrizationHandle spectral_norm_member(UnaryModule& m, Tensor& weight, SpectralNormOptions o,
                                             const std::string& name) {
  const char* op = "spectral_norm";
  detail::check_reparametrized_weight(op, m, weight, name);
  MG_CHECK(o.n_power_iterations >= 0, Error, op, ": n_power_iterations must be >= 0, got ", o.n_power_iterations);
  MG_CHECK(o.eps > 0.0 && std::isfinite(o.eps), Error, op, ": eps must be a positive number, got ", o.eps);
  MG_CHECK(weight.dim() >= 1, ShapeError, op, ": ", m.layer_name(), ".", name, " must have at least 1 dim, got ",
           describe(weight));
  auto s = std::make_shared<SpectralState>();
  s->dim = wrap_dim(o.dim.value_or(default_dim(m)), weight.dim(), op);
  s->iterations = o.n_power_iterations;
  s->eps = o.eps;
  s->orig = weight;
  Tensor u0, v0;
  {
    NoGradGuard no_grad;
    const Tensor w = weight_matrix(weight, s->dim);
    const TensorOptions like{.dtype = weight.dtype(), .device = weight.device()};
    u0 = normalized(randn({w.size(0)}, like, o.generator), o.eps);
    v0 = normalized(randn({w.size(1)}, like, o.generator), o.eps);
  }
  const bool trained = weight.requires_grad();
  m.unregister_parameter(name);
  m.register_parameter(name + "_orig", s->orig, trained);
  s->u = m.register_buffer(name + "_u", u0);
  s->v = m.register_buffer(name + "_v", v0);
  weight = s->orig.detach();  // the raw weight until the first call, as PyTorch's weight.data
  const int64_t hook = m.register_forward_pre_hook([s, &weight](UnaryModule& self, const Tensor&) {
    weight = s->weight(self.is_training());
    return std::optional<Tensor>();
  });
  return {.kind = ReparametrizationHandle::Kind::SpectralNorm, .name = name, .hook = hook, .dim = s->dim,
          .member = &weight};
}

void remove_spectral_norm_member(UnaryModule& m, Tensor& weight, const ReparametrizationHandle& handle) {
  const char* op = "remove_spectral_norm";
  detail::check_handle(op, handle, ReparametrizationHandle::Kind::SpectralNorm, weight);
  const std::string& name = handle.name;
  SpectralState s;
  s.orig = detail::own_parameter(op, m, name + "_orig");
  s.u = detail::own_buffer(op, m, name + "_u");
  s.v = detail::own_buffer(op, m, name + "_v");
  s.dim = handle.dim.value_or(0);
  MG_CHECK(s.dim >= 0 && s.dim < s.orig.dim() && s.orig.size(s.dim) == s.u.numel() &&
               s.u.numel() * s.v.numel() == s.orig.numel(),
           ShapeError, op, ": ", m.layer_name(), "'s buffers ", name, "_u ", describe(s.u), " and ", name, "_v ",
           describe(s.v), " do not fit ", name, "_orig ", describe(s.orig), " along dim ", s.dim);
  m.remove_hook(handle.hook);
  Tensor w;
  {
    NoGradGuard no_grad;
    w = s.weight(/*power_iteration=*/false);
  }
  m.unregister_parameter(name + "_orig");
  m.unregister_buffer(name + "_u");
  m.unregister_buffer(name + "_v");
  weight = m.register_parameter(name, w, s.orig.requires_grad());
}

}  // namespace detail

}  // namespace mg::nn
