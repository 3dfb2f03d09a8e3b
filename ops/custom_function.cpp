#include "mixgrad/ops/custom_function.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/op_node.h"
#include "mixgrad/ops/op_rule.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

class FunctionNode final : public autograd::Node {
 public:
  FunctionNode(uint32_t num_outputs, std::shared_ptr<FunctionCtx> ctx, FunctionRunner::BackwardFn backward,
               std::vector<TensorMeta> input_meta, std::vector<TensorMeta> output_meta)
      : Node(num_outputs), ctx_(std::move(ctx)), backward_(backward), input_meta_(std::move(input_meta)),
        output_meta_(std::move(output_meta)) {}

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
      g = grad_for_input(g, input_meta_[i]);
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
};

}  // namespace

void FunctionCtx::save_for_backward(const Tensors& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t, /*is_output=*/false);
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
  Tensors outputs;
  {
    // The declared policy already cast the inputs: the body runs without recording and with
    // autocast off (as PyTorch's custom_fwd(cast_inputs=...)), restored even on exceptions.
    NoGradGuard no_grad;
    AutocastOffGuard autocast_off;
    outputs = forward(*ctx, inputs);
  }
  if (!any) return outputs;
  std::vector<TensorMeta> in_meta, out_meta;
  for (const Tensor& t : inputs) {
    in_meta.push_back({t.defined() ? t.shape() : Shape{}, t.defined() ? t.dtype() : DType::F32});
  }
  for (Tensor& o : outputs) {
    MG_CHECK(o.defined(), AutogradError, name, ": forward returned an undefined tensor");
    // An input returned as is becomes a new alias so that its own history is untouched.
    for (const Tensor& t : inputs) {
      if (o.is_same(t)) o = make_tensor(t.impl()->storage, t.shape(), t.strides(), t.offset(), t.dtype());
    }
    out_meta.push_back({o.shape(), o.dtype()});
  }
  auto node = std::make_shared<FunctionNode>(uint32_t(outputs.size()), ctx, backward, in_meta, out_meta);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    node->next_edges.push_back(ctx->needs_[i] ? autograd::gradient_edge(inputs[i]) : autograd::Edge{});
  }
  autograd::set_history(outputs, node);
  return outputs;
}

}  // namespace mg
