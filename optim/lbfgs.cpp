#include "mixgrad/optim/lbfgs.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/ops.h"

namespace mg::optim {

namespace {

constexpr const char* kName = "LBFGS";

double dot(const Tensor& a, const Tensor& b) { return matmul(a, b).item<double>(); }
double max_abs(const Tensor& x) { return amax(abs(x)).item<double>(); }

// The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clamped to
// [lo, hi] (default: between x1 and x2); the bounds' midpoint when the cubic has no minimum
// (minFunc's polyinterp for two points, as PyTorch's _cubic_interpolate).
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : (x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (!(d2_square >= 0)) return (lo + hi) / 2.0;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi);
}

}  // namespace

void LBFGS::check_options(const LBFGSOptions& o) {
  MG_CHECK(std::isfinite(o.lr) && o.lr >= 0.0, Error, kName, ": lr must be finite and >= 0, got ", o.lr);
  MG_CHECK(o.max_iter >= 1, Error, kName, ": max_iter must be >= 1, got ", o.max_iter);
  MG_CHECK(!o.max_eval || *o.max_eval >= 1, Error, kName, ": max_eval must be >= 1, got ", o.max_eval.value_or(0));
  MG_CHECK(o.tolerance_grad >= 0.0, Error, kName, ": tolerance_grad must be >= 0, got ", o.tolerance_grad);
  MG_CHECK(o.tolerance_change >= 0.0, Error, kName, ": tolerance_change must be >= 0, got ", o.tolerance_change);
  MG_CHECK(o.history_size >= 1, Error, kName, ": history_size must be >= 1, got ", o.history_size);
}

LBFGS::LBFGS(const Tensors& params, LBFGSOptions options) : params_(params), options_(options) {
  check_options(options_);
  if (!options_.max_eval) options_.max_eval = options_.max_iter * 5 / 4;
  MG_CHECK(!params_.empty(), Error, kName, ": got an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  bool any_f64 = false;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    MG_CHECK(p.defined(), Error, kName, ": parameter ", i, " is undefined");
    MG_CHECK(is_floating(p.dtype()), Error, kName, ": parameter ", i, " is ", describe(p),
             "; it optimizes floating-point tensors");
    MG_CHECK(p.requires_grad() && p.is_leaf(), Error, kName, ": parameter ", i,
             " must be a leaf tensor that requires grad (call requires_grad_() on it)");
    MG_CHECK(p.device() == params_.front().device(), Error, kName, ": parameter ", i, " is on ",
             p.device().str(), " but parameter 0 on ", params_.front().device().str(),
             "; every parameter must be on one device");
    MG_CHECK(seen.insert(p.impl()).second, Error, kName, ": parameter ", i, " appears twice");
    any_f64 = any_f64 || p.dtype() == DType::F64;
    numel_ += p.numel();
  }
  MG_CHECK(numel_ > 0, Error, kName, ": every parameter has zero elements; there is nothing to optimize");
  flat_dtype_ = any_f64 ? DType::F64 : DType::F32;
}

void LBFGS::set_lr(double lr) {
  LBFGSOptions o = options_;
  o.lr = lr;
  check_options(o);
  options_.lr = lr;
}

void LBFGS::zero_grad(bool set_to_none) {
  for (Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      Tensor(p.grad()).zero_();
    }
  }
}

Tensor LBFGS::gather_flat_grad() const {
  // A new tensor every time (never a view of a gradient, which the closure may zero in place).
  Tensor flat = zeros({numel_}, {.dtype = flat_dtype_, .device = params_.front().device()});
  int64_t offset = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (g.defined()) {
      MG_CHECK(g.shape() == p.shape() && g.device() == p.device(), Error, kName, ": the gradient of parameter ", i,
               " is ", describe(g), " but the parameter is ", describe(p));
      narrow(flat, 0, offset, p.numel()).copy_(reshape(g, {p.numel()}));
    }
    offset += p.numel();
  }
  if (options_.maximize) flat.neg_();
  return flat;
}

void LBFGS::add_to_params(double step, const Tensor& direction) {
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (Tensor& p : params_) {
    p.add_(reshape(narrow(direction, 0, offset, p.numel()), p.shape()), step);
    offset += p.numel();
  }
}

Tensor LBFGS::run_closure(const Closure& closure) const {
  Tensor loss;
  {
    EnableGradGuard enable_grad;
    loss = closure();
  }
  MG_CHECK(loss.defined() && loss.numel() == 1, Error, kName, ": the closure must return the loss, a one-element tensor; got ",
           loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  return loss;
}

double LBFGS::objective(const Tensor& loss) const {
  const double value = loss.item<double>();
  return options_.maximize ? -value : value;
}

std::pair<double, Tensor> LBFGS::evaluate_at(const Closure& closure, const Tensors& x, double t, const Tensor& d) {
  const auto restore = [&] {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(x[i]);
  };
  add_to_params(t, d);
  try {
    const double loss = objective(run_closure(closure));
    Tensor flat_grad = gather_flat_grad();
    restore();
    return {loss, flat_grad};
  } catch (...) {
    restore();  // a closure that throws leaves the parameters where the line search started
    throw;
  }
}

// Nocedal & Wright's Algorithms 3.5 (bracketing) and 3.6 (zoom) with cubic interpolation, c1 =
// 1e-4, c2 = 0.9, at most max_ls evaluations after the first, in PyTorch's order of tests.
LBFGS::LineSearchResult LBFGS::strong_wolfe(const Closure& closure, double t, const Tensor& d, double f,
                                            const Tensor& g, double gtd, int64_t max_ls) {
  constexpr double c1 = 1e-4, c2 = 0.9;
  const double tolerance_change = 1e-9;  // PyTorch's line search keeps its own default
  const double d_norm = max_abs(d);
  Tensors x;
  {
    NoGradGuard no_grad;
    for (const Tensor& p : params_) x.push_back(clone(p));
  }
  auto [f_new, g_new] = evaluate_at(closure, x, t, d);
  int64_t evals = 1;
  double gtd_new = dot(g_new, d);
  double t_prev = 0.0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  // The bracket: one point (done) or two.
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Tensor> bracket_g;
  while (ls_iter < max_ls) {
    // !(f_new <= ...): a NaN loss fails the sufficient-decrease test (PyTorch's f_new > ... passes
    // it and extrapolates on, then may return the NaN point).
    if (!(f_new <= f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev)) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new}, bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    if (std::fabs(gtd_new) <= -c2 * gtd) {
      bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new};
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new}, bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    // Extrapolate: a cubic step between 1.01 t - 0.01 t_prev and 10 t.
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10;
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, std::pair{min_step, max_step});
    t_prev = tmp, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
    std::tie(f_new, g_new) = evaluate_at(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) bracket = {0.0, t}, bracket_f = {f, f_new}, bracket_g = {g, g_new};

  // Zoom into the bracket until the strong Wolfe conditions hold.
  bool insufficient_progress = false;
  // The low end: the smaller loss, and never a NaN one when the other is not.
  const auto lower_first = [](double a, double b) { return a <= b || std::isnan(b); };
  std::size_t low = lower_first(bracket_f.front(), bracket_f.back()) ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::fabs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    // A trial within 10% of the bracket's length from an end: move it 10% in, unless the last
    // trial was not there too and this one lies strictly inside.
    const double hi = std::max(bracket[0], bracket[1]), lo = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (hi - lo);
    if (std::min(hi - t, t - lo) < eps) {
      if (insufficient_progress || t >= hi || t <= lo) {
        t = std::fabs(t - hi) < std::fabs(t - lo) ? hi - eps : lo + eps;
        insufficient_progress = false;
      } else {
        insufficient_progress = true;
      }
    } else {
      insufficient_progress = false;
    }
    std::tie(f_new, g_new) = evaluate_at(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
    if (!(f_new <= f + c1 * t * gtd) || f_new >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new, bracket_gtd[high] = gtd_new;
      low = lower_first(bracket_f[0], bracket_f[1]) ? 0 : 1, high = 1 - low;
    } else {
      if (std::fabs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low],
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new, bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket_g[low], bracket[low], evals};
}

Tensor LBFGS::step(const Closure& closure) {
  MG_CHECK(static_cast<bool>(closure), Error, kName, ": step() needs a closure that evaluates the loss and its gradients");
  const LBFGSOptions& o = options_;
  const int64_t max_eval = *o.max_eval;
  const Tensor orig_loss = run_closure(closure);
  NoGradGuard no_grad;
  double loss = objective(orig_loss);
  int64_t current_evals = 1;
  ++func_evals_;
  Tensor flat_grad = gather_flat_grad();
  const double grad_max = max_abs(flat_grad);
  // Nothing sensible can follow a non-finite start (PyTorch would carry NaN into every parameter).
  MG_CHECK(std::isfinite(loss) && std::isfinite(grad_max), Error, kName, ": the closure's loss (", loss,
           ") or a gradient (largest magnitude ", grad_max, ") is not finite at the start of step(); nothing was changed");
  if (grad_max <= o.tolerance_grad) return orig_loss;

  int64_t n_iter = 0;
  while (n_iter < o.max_iter) {
    ++n_iter;
    ++n_iter_;
    // The direction: steepest descent first, then the two-loop recursion over the history.
    if (n_iter_ == 1) {
      d_ = neg(flat_grad);
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      h_diag_ = 1.0;
    } else {
      Tensor y = sub(flat_grad, prev_flat_grad_);
      Tensor s = d_ * t_;
      const double ys = dot(y, s);
      if (ys > 1e-10) {
        if (int64_t(old_dirs_.size()) == o.history_size) old_dirs_.pop_front(), old_stps_.pop_front(), ro_.pop_front();
        h_diag_ = ys / dot(y, y);
        old_dirs_.push_back(std::move(y));
        old_stps_.push_back(std::move(s));
        ro_.push_back(1.0 / ys);
      }
      const std::size_t num_old = old_dirs_.size();
      std::vector<double> al(num_old);
      Tensor q = neg(flat_grad);
      for (std::size_t i = num_old; i-- > 0;) {
        al[i] = dot(old_stps_[i], q) * ro_[i];
        q.add_(old_dirs_[i], -al[i]);
      }
      d_ = q * h_diag_;
      for (std::size_t i = 0; i < num_old; ++i) {
        const double be_i = dot(old_dirs_[i], d_) * ro_[i];
        d_.add_(old_stps_[i], al[i] - be_i);
      }
    }
    prev_flat_grad_ = clone(flat_grad);
    prev_loss_ = loss;

    // The step length: lr, scaled down on the very first iteration by the gradient's 1-norm.
    t_ = n_iter_ == 1 ? std::min(1.0, 1.0 / sum(abs(flat_grad)).item<double>()) * o.lr : o.lr;
    const double gtd = dot(flat_grad, d_);
    if (gtd > -o.tolerance_change) break;  // not a descent direction any more

    int64_t ls_evals = 0;
    bool opt_cond = false;
    if (o.line_search == LineSearch::StrongWolfe) {
      const LineSearchResult r = strong_wolfe(closure, t_, d_, loss, flat_grad, gtd, max_eval - current_evals);
      loss = r.loss, flat_grad = r.flat_grad, t_ = r.t, ls_evals = r.evals;
      add_to_params(t_, d_);
      opt_cond = max_abs(flat_grad) <= o.tolerance_grad;
    } else {
      add_to_params(t_, d_);
      if (n_iter != o.max_iter) {  // the last iteration's point is evaluated by the next step()
        loss = objective(run_closure(closure));
        flat_grad = gather_flat_grad();
        opt_cond = max_abs(flat_grad) <= o.tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;

    if (n_iter == o.max_iter || current_evals >= max_eval || opt_cond) break;
    if (max_abs(d_) * std::fabs(t_) <= o.tolerance_change) break;  // max |t d|
    if (std::fabs(loss - prev_loss_) < o.tolerance_change) break;
  }
  return orig_loss;
}

StateDict LBFGS::state_dict() const {
  StateDict s;
  s.strings["optimizer"] = kName;
  s.floats["lr"] = options_.lr;
  s.floats["tolerance_grad"] = options_.tolerance_grad;
  s.floats["tolerance_change"] = options_.tolerance_change;
  s.ints["max_iter"] = options_.max_iter;
  s.ints["max_eval"] = *options_.max_eval;
  s.ints["history_size"] = options_.history_size;
  s.ints["line_search"] = options_.line_search == LineSearch::StrongWolfe ? 1 : 0;
  s.ints["maximize"] = options_.maximize ? 1 : 0;
  s.ints["func_evals"] = func_evals_;
  s.ints["n_iter"] = n_iter_;
  s.ints["history_length"] = int64_t(old_dirs_.size());
  s.floats["t"] = t_;
  s.floats["H_diag"] = h_diag_;
  s.floats["prev_loss"] = prev_loss_;
  if (d_.defined()) s.tensors.emplace_back("d", clone(d_));
  if (prev_flat_grad_.defined()) s.tensors.emplace_back("prev_flat_grad", clone(prev_flat_grad_));
  for (std::size_t i = 0; i < old_dirs_.size(); ++i) {
    s.tensors.emplace_back("old_dirs." + std::to_string(i), clone(old_dirs_[i]));
    s.tensors.emplace_back("old_stps." + std::to_string(i), clone(old_stps_[i]));
    s.floats["ro." + std::to_string(i)] = ro_[i];
  }
  return s;
}

void LBFGS::load_state_dict(const StateDict& s) {
  MG_CHECK(s.strings.count("optimizer") && s.strings.at("optimizer") == kName, Error, kName,
           ": the state is not an LBFGS state (optimizer '", s.strings.count("optimizer") ? s.strings.at("optimizer") : "",
           "')");
  LBFGSOptions o;
  o.lr = s.float_at(kName, "lr");
  o.tolerance_grad = s.float_at(kName, "tolerance_grad");
  o.tolerance_change = s.float_at(kName, "tolerance_change");
  o.max_iter = s.int_at(kName, "max_iter");
  o.max_eval = s.int_at(kName, "max_eval");
  o.history_size = s.int_at(kName, "history_size");
  const int64_t line_search = s.int_at(kName, "line_search"), maximize = s.int_at(kName, "maximize");
  MG_CHECK(line_search == 0 || line_search == 1, Error, kName, ": 'line_search' must be 0 or 1, got ", line_search);
  MG_CHECK(maximize == 0 || maximize == 1, Error, kName, ": 'maximize' must be 0 or 1, got ", maximize);
  o.line_search = line_search == 1 ? LineSearch::StrongWolfe : LineSearch::None;
  o.maximize = maximize == 1;
  check_options(o);
  const int64_t func_evals = s.int_at(kName, "func_evals"), n_iter = s.int_at(kName, "n_iter");
  const int64_t length = s.int_at(kName, "history_length");
  MG_CHECK(func_evals >= 0 && n_iter >= 0, Error, kName, ": 'func_evals' and 'n_iter' must be >= 0, got ", func_evals,
           " and ", n_iter);
  MG_CHECK(length >= 0 && length <= o.history_size, Error, kName, ": 'history_length' ", length,
           " must be in [0, history_size = ", o.history_size, "]");
  const double t = s.float_at(kName, "t"), h_diag = s.float_at(kName, "H_diag"), prev_loss = s.float_at(kName, "prev_loss");
  // Every float and integer key known, every float finite (a NaN curvature scalar would turn the
  // parameters into NaN at the next step).
  for (const auto& [key, value] : s.floats) {
    bool known = key == "lr" || key == "tolerance_grad" || key == "tolerance_change" || key == "t" || key == "H_diag" ||
                 key == "prev_loss";
    for (int64_t i = 0; i < length && !known; ++i) known = key == "ro." + std::to_string(i);
    MG_CHECK(known, Error, kName, ": unexpected float '", key, "' in the state");
    MG_CHECK(std::isfinite(value), Error, kName, ": '", key, "' must be finite, got ", value);
  }
  for (const auto& [key, value] : s.ints) {
    const bool known = key == "max_iter" || key == "max_eval" || key == "history_size" || key == "line_search" ||
                       key == "maximize" || key == "func_evals" || key == "n_iter" || key == "history_length";
    MG_CHECK(known, Error, kName, ": unexpected integer '", key, "' in the state");
  }

  // Every tensor key known, of the parameters' total size, converted to the flat dtype.
  std::map<std::string, Tensor> vectors;
  for (const auto& [key, tensor] : s.tensors) {
    bool known = key == "d" || key == "prev_flat_grad";
    for (int64_t i = 0; i < length && !known; ++i) {
      known = key == "old_dirs." + std::to_string(i) || key == "old_stps." + std::to_string(i);
    }
    MG_CHECK(known, Error, kName, ": unexpected tensor '", key, "' in the state");
    MG_CHECK(tensor.defined() && is_floating(tensor.dtype()) && tensor.dim() == 1 && tensor.numel() == numel_, Error,
             kName, ": '", key, "' is ", tensor.defined() ? describe(tensor) : std::string("undefined"),
             " but the parameters hold ", numel_, " elements (a 1-D floating tensor expected)");
    vectors[key] = clone(to(to(tensor, flat_dtype_), params_.front().device()));  // a copy of its own
  }
  std::deque<Tensor> dirs, stps;
  std::deque<double> ro;
  for (int64_t i = 0; i < length; ++i) {
    const std::string n = std::to_string(i);
    MG_CHECK(vectors.count("old_dirs." + n) && vectors.count("old_stps." + n), Error, kName, ": the state has ", length,
             " curvature pairs but no 'old_dirs.", n, "' / 'old_stps.", n, "'");
    dirs.push_back(vectors["old_dirs." + n]);
    stps.push_back(vectors["old_stps." + n]);
    ro.push_back(s.float_at(kName, "ro." + n));
  }
  MG_CHECK(n_iter == 0 || (vectors.count("d") && vectors.count("prev_flat_grad")), Error, kName,
           ": the state has ", n_iter, " iterations but no 'd' / 'prev_flat_grad'");
  options_ = o;
  func_evals_ = func_evals, n_iter_ = n_iter;
  d_ = vectors.count("d") ? vectors["d"] : Tensor();
  prev_flat_grad_ = vectors.count("prev_flat_grad") ? vectors["prev_flat_grad"] : Tensor();
  t_ = t, h_diag_ = h_diag, prev_loss_ = prev_loss;
  old_dirs_ = std::move(dirs), old_stps_ = std::move(stps), ro_ = std::move(ro);
}

}  // namespace mg::optim
