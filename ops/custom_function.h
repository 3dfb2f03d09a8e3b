// User-defined differentiable functions: forward and backward written by the user, plus the
// autocast policy the function's inputs get (PyTorch's custom_fwd(cast_inputs=...)). Forward runs
// without recording and with autocast off (its inputs were already cast); backward receives the output gradients and returns one gradient per input
// (undefined where none). A backward written with mg ops can itself be differentiated.
//
//   struct Cube : mg::Function<Cube> {
//     static constexpr mg::CastPolicy policy = mg::CastPolicy::Fp32;
//     static mg::Tensors forward(mg::FunctionCtx& ctx, const mg::Tensors& in) {  // in[0]: [N]
//       ctx.save_for_backward({in[0]});
//       return {in[0] * in[0] * in[0]};
//     }
//     static mg::Tensors backward(mg::FunctionCtx& ctx, const mg::Tensors& g) {   // d x^3 = 3x^2
//       const mg::Tensor x = ctx.saved()[0];
//       return {g[0] * 3.0 * x * x};
//     }
//   };
//   mg::Tensor y = Cube::apply({x})[0];
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/autograd/node.h"
#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

class FunctionCtx {
 public:
  // Tensors backward will need; version-checked when read back (against their version when
  // forward returned, as PyTorch). Saving an output is fine: it is held without its history.
  void save_for_backward(const Tensors& tensors);
  // The saved tensors (an error after the graph was freed or when one was modified in place).
  Tensors saved() const;
  // Whether input i needs a gradient.
  bool needs_input_grad(int i) const { return i < int(needs_.size()) && needs_[i]; }
  const std::string& name() const { return name_; }
  // Frees the saved tensors (called by the engine after a backward without retain_graph).
  void release_saved() {
    for (auto& s : saved_) s.release();
  }

 private:
  friend struct FunctionRunner;
  // After forward: the tensors given to save_for_backward, packed, outputs as outputs (a strong
  // reference from an output's node back to the output would be a cycle, never freed).
  void pack_saved(const Tensors& outputs);
  Tensors to_save_;  // during forward
  std::vector<autograd::SavedTensor> saved_;
  std::vector<bool> needs_;
  std::string name_;
};

// Type-erased machinery behind Function<Derived>::apply.
struct FunctionRunner {
  using ForwardFn = Tensors (*)(FunctionCtx&, const Tensors&);
  using BackwardFn = Tensors (*)(FunctionCtx&, const Tensors&);
  static Tensors run(const char* name, CastPolicy policy, ForwardFn forward, BackwardFn backward,
                     Tensors inputs);
};

// Whether `t` (or the tensor it is a view of) is an output of a custom function (or of
// mg::checkpoint) that shares memory with one of the function's inputs (an input returned as is,
// or a view of one). Writing into such a tensor in place would bypass the function's backward:
// refused, as PyTorch does.
bool is_custom_function_alias(const Tensor& t);
// Whether `t` itself is such an output (not a view taken of one). Views taken of it keep it as
// their view base, so is_custom_function_alias refuses writes through them too.
bool is_custom_function_alias_output(const Tensor& t);

// CRTP base: Derived provides `policy`, `forward` and `backward` (static), and optionally a
// `static constexpr const char* name`.
template <typename Derived>
struct Function {
  static Tensors apply(Tensors inputs) {
    return FunctionRunner::run(function_name(), Derived::policy, &Derived::forward, &Derived::backward,
                               std::move(inputs));
  }

 private:
  static const char* function_name() {
    if constexpr (requires { Derived::name; }) {
      return Derived::name;
    } else {
      return "custom_function";
    }
  }
};

}  // namespace mg
