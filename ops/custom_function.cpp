#include "mixgrad/ops/custom_function.h"

#include <algorithm>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/inplace_view.h"
#include "mixgrad/ops/op_node.h"
#include "mixgrad/ops/op_rule.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

class FunctionNode final : public autograd::Node {
 public:
  FunctionNode(uint32_t num_outputs, std::shared_ptr<FunctionCtx> ctx, FunctionRunner::BackwardFn backward,
               std::vector<TensorMeta> input_meta, std::vector<TensorMeta> output_meta,
               std::vector<bool> aliases_input)
      : Node(num_outputs), ctx_(std::move(ctx)), backward_(backward), input_meta_(std::move(input_meta)),
        output_meta_(std::move(output_meta)), aliases_input_(std::move(aliases_input)) {}

  bool output_aliases_input(uint32_t output_nr) const override {
    return output_nr < aliases_input_.size() && aliases_input_[output_nr];
  }

  // Gradients of the outputs in; the user's gradients, checked against the input shapes, out.
  Tensors apply(Tensors&& grads) override {
    fill_missing_grads(grads, output_meta_);
    Tensors result = backward_(*ctx_, grads);
    MG_CHECK(result.size() == input_meta_.size(), AutogradError, ctx_->name(), ": backward returned ",
             result.size(), " gradients for ", input_meta_.size(), " inputs");
    for (std::size_t i = 0; i < result.size(); ++i) {
      Tensor& g = result[i];
      if (!g.defined() || !ctx_->needs_input_grad(int(i))) {
        g = Tensor();
        continue;
      }
      try {
        g = grad_for_input(g, input_meta_[i]);  // a broadcast gradient is summed to the input's shape
      } catch (const ShapeError&) {
        MG_THROW(AutogradError, ctx_->name(), ": backward returned an invalid gradient for input ", i, ": got ",
                 describe(g), " but expected the input's shape ", shape_str(input_meta_[i].shape),
                 " (or one that sums to it)");
      }
    }
    return result;
  }
  std::string name() const override { return ctx_->name() + "_backward"; }
  void release_saved() override {
    ctx_->release_saved();
    mark_released();
  }

 private:
  std::shared_ptr<FunctionCtx> ctx_;
  FunctionRunner::BackwardFn backward_;
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;
  std::vector<bool> aliases_input_;  // per output: shares memory with an input
};

bool aliases_through_node(const TensorImpl* t) {
  return t && t->autograd.grad_fn && t->autograd.grad_fn->output_aliases_input(t->autograd.output_nr);
}

}  // namespace

bool is_custom_function_alias(const Tensor& t) {
  return t.defined() && (aliases_through_node(t.impl()) || aliases_through_node(t.impl()->view_base.get()));
}

bool is_custom_function_alias_output(const Tensor& t) { return t.defined() && aliases_through_node(t.impl()); }

void FunctionCtx::save_for_backward(const Tensors& tensors) { to_save_ = tensors; }

void FunctionCtx::pack_saved(const Tensors& outputs) {
  saved_.clear();
  for (const Tensor& t : to_save_) {
    const auto out = std::find_if(outputs.begin(), outputs.end(), [&](const Tensor& o) { return o.is_same(t); });
    saved_.emplace_back(t, /*is_output=*/out != outputs.end());
  }
  to_save_.clear();
}

Tensors FunctionCtx::saved() const {
  Tensors out;
  for (const auto& s : saved_) out.push_back(s.unpack(name_ + "_backward"));
  return out;
}

Tensors FunctionRunner::run(const char* name, CastPolicy policy, ForwardFn forward, BackwardFn backward,
                            Tensors inputs) {
  init();
  apply_autocast(policy, name, inputs);
  auto ctx = std::make_shared<FunctionCtx>();
  ctx->name_ = name;
  bool any = false;
  for (const Tensor& t : inputs) {
    const bool needs = GradMode::is_enabled() && t.defined() && t.requires_grad();
    ctx->needs_.push_back(needs);
    any = any || needs;
  }
  // Stale views refreshed or refused, as for any op in grad mode (ops/inplace_view.h), also when
  // no input needs a gradient (a stale view would otherwise enter as a constant).
  for (std::size_t i = 0; GradMode::is_enabled() && i < inputs.size(); ++i) check_recorded_input_view(name, i, inputs[i]);
  Tensors outputs;
  {
    // The declared policy already cast the inputs: the body runs without recording and with
    // autocast off (as PyTorch's custom_fwd(cast_inputs=...)), restored even on exceptions.
    NoGradGuard no_grad;
    AutocastOffGuard autocast_off;
    outputs = forward(*ctx, inputs);
  }
  if (!any) {
    ctx->to_save_.clear();
    return outputs;
  }
  std::vector<TensorMeta> in_meta, out_meta;
  for (const Tensor& t : inputs) {
    in_meta.push_back({t.defined() ? t.shape() : Shape{}, t.defined() ? t.dtype() : DType::F32});
  }
  for (const Tensor& o : outputs) {
    MG_CHECK(o.defined(), AutogradError, name, ": forward returned an undefined tensor");
    out_meta.push_back({o.shape(), o.dtype(), MemoryFormat::Contiguous, o.device()});
  }
  std::vector<bool> aliases = mark_input_aliases(outputs, inputs);
  auto node = std::make_shared<FunctionNode>(uint32_t(outputs.size()), ctx, backward, in_meta, out_meta,
                                             std::move(aliases));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    node->next_edges.push_back(ctx->needs_[i] ? autograd::gradient_edge(inputs[i]) : autograd::Edge{});
  }
  autograd::set_history(outputs, node);
  ctx->pack_saved(outputs);
  return outputs;
}

}  // namespace mg
