// The autograd node the dispatcher records for an op: it keeps the op's attributes, what the op's
// rule asked to save, and the inputs' metadata, and calls the op's backward rule. Gradients that
// come back broadcast or in another dtype are summed to the input's shape and cast to its dtype
// here, once, for every op.
#pragma once
#include <vector>

#include "mixgrad/autograd/node.h"
#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/ops/op.h"
#include "mixgrad/ops/op_rule.h"

namespace mg {

// Gives every floating output that received no gradient a zero gradient (on the device of the
// gradients that did arrive), so backward rules never see undefined gradients.
void fill_missing_grads(Tensors& grads, const std::vector<TensorMeta>& output_meta);
// Brings a gradient to its input's shape (summing broadcast dims) and dtype (cast back).
Tensor grad_for_input(const Tensor& g, const TensorMeta& input);
// For nodes whose forward is user code (custom functions, mg::checkpoint): per output, whether it
// shares memory with one of `inputs` (the node reports it through Node::output_aliases_input, so
// in-place writes into it are refused); an output that *is* an input is replaced by a new alias
// of it, so that the input's own history stays. Undefined outputs are skipped.
std::vector<bool> mark_input_aliases(Tensors& outputs, const Tensors& inputs);

class OpNode final : public autograd::Node {
 public:
  OpNode(OpId op, const OpAttrs& attrs, const Tensors& inputs, const Tensors& outputs,
         uint32_t needs_grad, uint32_t save_mask);
  Tensors apply(Tensors&& grad_outputs) override;
  std::string name() const override;
  void release_saved() override;
  OpId op() const { return op_; }
  // Saves the outputs the rule asked for; called once the outputs carry this node as grad_fn.
  void save_outputs(const Tensors& outputs, uint32_t save_mask);

 private:
  OpId op_;
  OpAttrs attrs_;
  uint32_t needs_grad_;
  std::vector<autograd::SavedTensor> saved_inputs_;
  std::vector<autograd::SavedTensor> saved_outputs_;
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;
};

}  // namespace mg
