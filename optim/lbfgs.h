// L-BFGS (limited-memory BFGS, Nocedal 1980), as torch.optim.LBFGS: each step(closure) runs up to
// max_iter quasi-Newton iterations, re-evaluating the closure (forward and backward) at every
// trial point, with a fixed step of lr or a strong-Wolfe line search (Nocedal & Wright, Alg. 3.5
// and 3.6, with cubic interpolation; PyTorch's port of minFunc's). The search direction is the
// two-loop recursion over the last history_size pairs s = x' - x, y = g' - g with ys > 1e-10.
//
// Decisions a user must know:
// - Not an optim::Optimizer: its state is global (directions and curvature pairs over all
//   parameters flattened), and every iteration reads scalars (the loss, dot products) on the host,
//   so it takes no step gate, GradScaler, master weights or CUDA graph, and LR schedulers do not
//   drive it (set_lr does). One group, as PyTorch's.
// - The flat vectors (gradient, direction, history) are kept in f32, or f64 when a parameter is f64,
//   whatever the parameters' dtype: an f16/bf16 model gets f32 curvature pairs (PyTorch keeps them
//   in the parameters' dtype) and its parameters are updated as p += t * d rounded once.
// - Every parameter on one device, floating, a leaf that requires grad; a parameter without a
//   gradient counts as a zero gradient. The closure must return a one-element loss.
// - A non-finite loss met inside a step: the strong-Wolfe search treats it as a failed trial and
//   backtracks (PyTorch's may return the NaN point); a fixed step has moved already, so the next
//   step() refuses to start. A closure that throws during the line search leaves the parameters
//   where the search started.
// - Memory: 2 * history_size + 3 vectors of the parameters' total size in the flat dtype kept
//   between steps; at the peak (the two-loop recursion, the line search) about 2 * history_size + 6
//   and a copy of the parameters.
//
//   mg::optim::LBFGS opt(net.parameters(), {.line_search = mg::optim::LineSearch::StrongWolfe});
//   opt.step([&] { opt.zero_grad(); Tensor loss = mse_loss(net.forward(x), y); loss.backward(); return loss; });
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>

#include "mixgrad/core/state_dict.h"
#include "mixgrad/core/tensor.h"

namespace mg::optim {

enum class LineSearch { None, StrongWolfe };

struct LBFGSOptions {
  double lr = 1.0;                         // the step (StrongWolfe: the first trial step), >= 0
  int64_t max_iter = 20;                   // iterations per step(), >= 1
  std::optional<int64_t> max_eval;         // >= 1; no new iteration once a step() made this many closure
                                           // calls (the last may overshoot by one, as PyTorch's); default max_iter * 5 / 4
  double tolerance_grad = 1e-7;            // stop when max |g| <= this
  double tolerance_change = 1e-9;          // stop when the loss or max |t d| changes less
  int64_t history_size = 100;              // curvature pairs kept, >= 1
  LineSearch line_search = LineSearch::None;
  bool maximize = false;                   // ascend the closure's value
};

class LBFGS {
 public:
  using Closure = std::function<Tensor()>;
  explicit LBFGS(const Tensors& params, LBFGSOptions options = {});

  // Runs the iterations; the closure clears the gradients, computes the loss, calls backward() and
  // returns the loss. Returns the closure's first loss (before any update). The closure runs with
  // gradient recording on; the updates run without.
  Tensor step(const Closure& closure);
  // Clears the parameters' gradients (set_to_none: drops them; else zeros them in place).
  void zero_grad(bool set_to_none = true);

  const Tensors& parameters() const { return params_; }
  const LBFGSOptions& options() const { return options_; }
  double lr() const { return options_.lr; }
  void set_lr(double lr);
  // Closure calls and iterations over all step() calls (PyTorch's state "func_evals", "n_iter").
  int64_t func_evals() const { return func_evals_; }
  int64_t n_iter() const { return n_iter_; }
  // Curvature pairs held now (at most history_size).
  int64_t history_length() const { return int64_t(old_dirs_.size()); }

  // strings "optimizer" = "LBFGS"; floats "lr", "tolerance_grad", "tolerance_change", "t",
  // "H_diag", "prev_loss", "ro.<i>"; ints "max_iter", "max_eval", "history_size", "line_search"
  // (0 none, 1 strong Wolfe), "maximize", "func_evals", "n_iter", "history_length"; tensors "d",
  // "prev_flat_grad", "old_dirs.<i>", "old_stps.<i>" (absent before the first iteration).
  StateDict state_dict() const;
  // Restores options and state; checks every key, that every float is finite, the vectors' size
  // (the parameters' total) and dtype (converted to the flat dtype), and changes nothing on a mismatch.
  void load_state_dict(const StateDict& state);

 private:
  Tensor gather_flat_grad() const;
  void add_to_params(double step, const Tensor& direction);
  // Evaluates the closure at x + t d (x: the parameters' values, put back afterwards).
  std::pair<double, Tensor> evaluate_at(const Closure& closure, const Tensors& x, double t, const Tensor& d);
  // The closure's loss, checked (one element), computed with gradient recording on.
  Tensor run_closure(const Closure& closure) const;
  // The value minimised: the loss, negated with maximize.
  double objective(const Tensor& loss) const;
  struct LineSearchResult {
    double loss;
    Tensor flat_grad;
    double t;
    int64_t evals;
  };
  LineSearchResult strong_wolfe(const Closure& closure, double t, const Tensor& d, double f, const Tensor& g, double gtd,
                                int64_t max_ls);
  static void check_options(const LBFGSOptions& o);

  Tensors params_;
  LBFGSOptions options_;
  DType flat_dtype_;
  int64_t numel_ = 0;
  // The global state (PyTorch's, kept on its first parameter there).
  int64_t func_evals_ = 0, n_iter_ = 0;
  Tensor d_, prev_flat_grad_;
  double t_ = 0.0, h_diag_ = 1.0, prev_loss_ = 0.0;
  std::deque<Tensor> old_dirs_, old_stps_;
  std::deque<double> ro_;
};

}  // namespace mg::optim
