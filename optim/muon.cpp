// Muon: the formulas of optim/muon.h with public ops, in torch.optim.Muon's order.
#include "mixgrad/optim/muon.h"

#include <algorithm>
#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/factory.h"  // zeros_like
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/adam.h"
#include "mixgrad/optim/generic_path.h"

namespace mg::optim {

namespace {

// The lr multiplier of an [A, B] matrix (PyTorch's _adjust_lr).
double lr_adjustment(int64_t adjust, double a, double b) {
  switch (adjust) {
    case MuonOptions::kMatchRmsAdamW: return 0.2 * std::sqrt(std::max(a, b));
    case MuonOptions::kSpectralUnclamped: return std::sqrt(a / b);
    default: return std::sqrt(std::max(1.0, a / b));
  }
}

// index: the parameter's position in parameters().
void check_matrix(const Tensor& p, std::size_t index, std::size_t group) {
  MG_CHECK(p.dim() == 2, ShapeError, "Muon: parameter ", index, " (group ", group, ") is ", describe(p),
           "; Muon updates 2-D matrices only\n  hint: give biases, norms and embeddings to AdamW: an AdamW "
           "optimizer, or a group of this one with use_muon = 0 (docs/optim.md, \"Muon\")");
}

bool uses_muon(const OptionMap& options) { return option_or(options, "use_muon", 1.0) != 0.0; }

// The AdamW step of a use_muon = 0 group, as optim::AdamW's.
AdamOptions adamw_options(const MuonOptions& o) {
  return {.lr = o.lr, .betas = {o.adamw_beta1, o.adamw_beta2}, .eps = o.adamw_eps, .weight_decay = o.weight_decay,
          .decoupled_weight_decay = true};
}

}  // namespace

Tensor newton_schulz_orthogonalize(const Tensor& u, const MuonOptions& o, DType dtype) {
  MG_CHECK(u.dim() == 2, ShapeError, "newton_schulz_orthogonalize: expected a 2-D tensor, got ", describe(u));
  NoGradGuard no_grad;
  // Tall matrices iterate transposed (X X^T is then the smaller Gram matrix), on a contiguous copy:
  // elementwise ops over a transposed view stride through memory (ops/cpu/copy_kernels.cpp's tiled
  // transpose makes the copy cheap).
  const bool tall = u.shape()[0] > u.shape()[1];
  Tensor x = to(tall ? transpose(u, 0, 1).contiguous() : u, dtype);
  x = div(x, clamp_min(norm(x), o.eps));  // spectral norm <= Frobenius norm <= 1
  const auto [a, b, c] = o.ns_coefficients;
  for (int64_t k = 0; k < o.ns_steps; ++k) {
    const Tensor gram = matmul(x, transpose(x, 0, 1));
    const Tensor poly = addmm(gram, gram, gram, /*beta=*/b, /*alpha=*/c);  // b G + c G G
    x = addmm(x, poly, x, /*beta=*/a);                                     // a X + (b G + c G G) X
  }
  return tall ? transpose(x, 0, 1).contiguous() : x;  // so the caller's update reads it in order
}

Muon::Muon(const Tensors& params, MuonOptions options) : Muon(std::vector<ParamGroupSpec>{{params}}, options) {}

Muon::Muon(const std::vector<ParamGroupSpec>& groups, MuonOptions defaults) : Optimizer("Muon", options_to_map(defaults)) {
  init_groups(groups);
  std::size_t index = 0;
  for (std::size_t g = 0; g < param_groups().size(); ++g) {
    const bool muon = uses_muon(param_groups()[g].options);
    for (const Tensor& p : param_groups()[g].params) {
      if (muon) check_matrix(p, index, g);
      ++index;
    }
  }
}

std::vector<std::string> Muon::buffers_created(const OptionMap& options) const {
  if (uses_muon(options)) return {"momentum_buffer"};
  return {"exp_avg", "exp_avg_sq"};
}

// States saved before the AdamW groups existed load as Muon groups.
OptionMap Muon::options_added_later() const {
  const MuonOptions d;
  return {{"use_muon", 1.0}, {"adamw_beta1", d.adamw_beta1}, {"adamw_beta2", d.adamw_beta2}, {"adamw_eps", d.adamw_eps}};
}

void Muon::check_options(const OptionMap& m) const {
  check_bool_options<MuonOptions>(m, "Muon");
  const MuonOptions o = options_from_map<MuonOptions>(m, "Muon");
  MG_CHECK(o.lr >= 0.0, Error, "Muon: lr must be >= 0, got ", o.lr);
  MG_CHECK(o.weight_decay >= 0.0, Error, "Muon: weight_decay must be >= 0, got ", o.weight_decay);
  MG_CHECK(o.momentum >= 0.0, Error, "Muon: momentum must be >= 0, got ", o.momentum);
  MG_CHECK(o.eps >= 0.0, Error, "Muon: eps must be >= 0, got ", o.eps);
  const double steps = m.at("ns_steps");
  MG_CHECK(steps >= 0.0 && steps < 100.0 && steps == std::floor(steps), Error,
           "Muon: ns_steps must be an integer in [0, 100), got ", steps);
  const double adjust = m.at("adjust_lr");
  MG_CHECK(adjust == double(MuonOptions::kOriginal) || adjust == double(MuonOptions::kMatchRmsAdamW) ||
               adjust == double(MuonOptions::kSpectralUnclamped),
           Error, "Muon: adjust_lr must be 0 (original), 1 (match_rms_adamw) or 2 (spectral_unclamped), got ", adjust);
  MG_CHECK(o.adamw_beta1 >= 0.0 && o.adamw_beta1 < 1.0, Error, "Muon: adamw_beta1 must be in [0, 1), got ", o.adamw_beta1);
  MG_CHECK(o.adamw_beta2 >= 0.0 && o.adamw_beta2 < 1.0, Error, "Muon: adamw_beta2 must be in [0, 1), got ", o.adamw_beta2);
  MG_CHECK(o.adamw_eps >= 0.0, Error, "Muon: adamw_eps must be >= 0, got ", o.adamw_eps);
  for (const char* k : {"ns_a", "ns_b", "ns_c"}) {
    MG_CHECK(std::isfinite(m.at(k)), Error, "Muon: the Newton–Schulz coefficient ", k, " must be finite, got ", m.at(k));
  }
}

namespace {

// Whether every parameter of `work` is on the CPU (its ops then run on the calling thread).
template <typename WorkT>
bool all_on_cpu(const std::vector<WorkT>& work) {
  return std::all_of(work.begin(), work.end(), [](const WorkT& w) { return w.param.device().is_cpu(); });
}

// lr and weight_decay of one Muon update: host values (the CPU path) or [1] f64 tensors on the
// parameter's device (the fused device path: the device copies every CUDA graph replay reads).
struct MuonScalars {
  double lr = 0, weight_decay = 0;
  Tensor device_lr, device_weight_decay;  // defined on the device path
};

// One Muon update of a 2-D parameter: the formulas of optim/muon.h with public ops, written once
// for every path. skip (bool [1]) or undefined: when set nothing changes, as in the fused kernels
// under a found-inf flag. model: the f16/bf16 model copy of an f32 master to write, or undefined.
void muon_update(const Tensor& param, const Tensor& grad, Tensor buf, const Tensor& model, const MuonOptions& o,
                 const MuonScalars& s, const Tensor& skip) {
  NoGradGuard no_grad;
  AutocastOffGuard no_autocast;  // the optimizer's math keeps its dtypes (and a worker thread has no region)
  const DType opmath = buf.dtype();
  const Tensor g = to(grad, opmath);
  Tensor next_buf = aten_lerp(buf, g, 1.0 - o.momentum);
  if (skip.defined()) next_buf = where(skip, buf, next_buf);
  buf.copy_(next_buf);
  const Tensor u = o.nesterov ? aten_lerp(g, buf, o.momentum) : Tensor(buf);
  const Tensor orth = to(newton_schulz_orthogonalize(u, o, o.ns_bf16 ? DType::BF16 : opmath), opmath);
  const double adjust = lr_adjustment(o.adjust_lr, double(param.shape()[0]), double(param.shape()[1]));
  const Tensor p = to(param, opmath);
  Tensor next;
  if (s.device_lr.defined()) {
    const Tensor decay = to(1.0 - s.device_lr * s.device_weight_decay, opmath);  // in f64, as the host's double
    next = sub(mul(p, decay), mul(orth, to(s.device_lr * adjust, opmath)));
  } else {
    // PyTorch's p.mul_(1 - lr wd).add_(O, alpha=-lr adjust): add's alpha makes it one fused
    // multiply-add, as PyTorch's, which the tensor-valued form above cannot.
    next = add(p * (1.0 - s.lr * s.weight_decay), orth, -s.lr * adjust);
  }
  if (skip.defined()) next = where(skip, p, next);
  Tensor(param).copy_(next);  // rounded once
  if (model.defined()) {
    Tensor rounded = to(next, model.dtype());
    if (skip.defined()) rounded = where(skip, model, rounded);
    Tensor(model).copy_(rounded);
  }
}

// The AdamW step of a use_muon = 0 group, as optim::AdamW's.
AdamHyper adamw_hyper(const MuonOptions& o) {
  return {.lr = o.lr, .beta1 = o.adamw_beta1, .beta2 = o.adamw_beta2, .eps = o.adamw_eps,
          .weight_decay = o.weight_decay, .decoupled = true, .amsgrad = false, .maximize = false};
}

}  // namespace

void Muon::step_group(ParamGroup& group) {
  const MuonOptions o = options_from_map<MuonOptions>(group.options, name());
  const std::size_t g = std::size_t(&group - param_groups().data());
  const std::vector<Work> work = collect(group);
  if (o.use_muon) {
    for (const Work& w : work) check_matrix(w.param, std::size_t(w.index), g);  // add_param_group's too
  }
  // The fused device path: AdamW groups on the device's AdamW kernel, Muon groups on public ops
  // whose scalars and skip flag are device values; no host read, so a CUDA graph can capture it.
  MultiTensorStepArgs args;
  if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
    if (!o.use_muon) {
      for (const Work& w : work) {
        args.state[0].push_back(buffer(w, "exp_avg", true));
        args.state[1].push_back(buffer(w, "exp_avg_sq", true));
        args.state[2].push_back(Tensor());
      }
      k->adam(args, adamw_hyper(o));  // device_option_names() lists AdamHyper's order
    } else {
      NoGradGuard no_grad;
      const MuonScalars scalars{.device_lr = device_option(group, "lr"),
                                .device_weight_decay = device_option(group, "weight_decay")};
      const Tensor& flag = device_found_inf();
      const Tensor skip = flag.defined() ? ne(flag, zeros_like(flag)) : Tensor();
      for (std::size_t i = 0; i < work.size(); ++i) {
        const Work& w = work[i];
        Tensor buf = buffer(w, "momentum_buffer", /*zero=*/true);
        if (w.param.numel() > 0) muon_update(w.param, w.grad, buf, args.model[i], o, scalars, skip);
      }
    }
    finish_fused_step(work, k, args);
    return;
  }
  if (!o.use_muon) {
    std::vector<AdamUpdateTensor> tensors;
    for (const Work& w : work) {
      tensors.push_back({w.param, w.grad, buffer(w, "exp_avg", true), buffer(w, "exp_avg_sq", true), Tensor(),
                         &w.state->step});
    }
    adam_update(tensors, adamw_options(o));
    return;
  }
  std::vector<Tensor> buffers;
  for (const Work& w : work) {
    buffers.push_back(buffer(w, "momentum_buffer", /*zero=*/true));
    ++w.state->step;
  }
  // The matrices are independent, so the threads take whole matrices (each one's GEMMs run on one
  // thread inside the parallel region): BERT-mini's Newton–Schulz GEMMs have 256 rows, and split
  // across 2 threads the [256, 256] ones ran 1.1-1.6x slower than on one.
  const bool per_thread = all_on_cpu(work);
  const auto update = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Work& w = work[std::size_t(i)];
      if (w.param.numel() == 0) continue;  // nothing to update (and no shape ratio of an empty side)
      muon_update(w.param, w.grad, buffers[std::size_t(i)], Tensor(), o, {.lr = o.lr, .weight_decay = o.weight_decay},
                  Tensor());
    }
  };
  if (per_thread) parallel_for(0, int64_t(work.size()), 1, update);
  else update(0, int64_t(work.size()));
}

}  // namespace mg::optim
