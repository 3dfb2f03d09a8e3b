#include "mixgrad/ops/op_node.h"

#include <optional>

#include "mixgrad/ops/backward_ctx.h"
#include "mixgrad/ops/ops.h"

namespace mg {

Tensor BackwardCtx::input(int i) const {
  MG_ASSERT(i < int(inputs_.size()) && inputs_[i].is_saved(),
            op_name(op_), "_backward reads input ", i, " which its rule did not save");
  return inputs_[i].unpack(std::string(op_name(op_)) + "_backward");
}

Tensor BackwardCtx::output(int j) const {
  MG_ASSERT(j < int(outputs_.size()) && outputs_[j].is_saved(),
            op_name(op_), "_backward reads output ", j, " which its rule did not save");
  return outputs_[j].unpack(std::string(op_name(op_)) + "_backward");
}

OpNode::OpNode(OpId op, const OpAttrs& attrs, const Tensors& inputs, const Tensors& outputs,
               uint32_t needs_grad, uint32_t save_mask)
    : Node(uint32_t(outputs.size())), op_(op), attrs_(attrs), needs_grad_(needs_grad) {
  saved_inputs_.resize(inputs.size());
  saved_outputs_.resize(outputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    input_meta_.push_back({inputs[i].defined() ? inputs[i].shape() : Shape{},
                           inputs[i].defined() ? inputs[i].dtype() : DType::F32,
                           inputs[i].defined() ? inputs[i].suggest_memory_format() : MemoryFormat::Contiguous,
                           inputs[i].defined() ? inputs[i].device() : Device::cpu()});
    if (save_mask & kSaveInput(int(i))) saved_inputs_[i] = autograd::SavedTensor(inputs[i], false);
    next_edges.push_back((needs_grad >> i) & 1u ? autograd::gradient_edge(inputs[i]) : autograd::Edge{});
  }
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    output_meta_.push_back({outputs[j].shape(), outputs[j].dtype()});
  }
  // Outputs are saved by the dispatcher after their grad_fn is set (see save_outputs()).
}

std::string OpNode::name() const { return std::string(op_name(op_)) + "_backward"; }

void OpNode::release_saved() {
  for (auto& s : saved_inputs_) s.release();
  for (auto& s : saved_outputs_) s.release();
  mark_released();
}

void OpNode::save_outputs(const Tensors& outputs, uint32_t save_mask) {
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    if (save_mask & kSaveOutput(int(j))) saved_outputs_[j] = autograd::SavedTensor(outputs[j], true);
  }
}

void fill_missing_grads(Tensors& grads, const std::vector<TensorMeta>& output_meta) {
  std::optional<Device> device;  // a gradient's that arrived; else each output's recorded one
  for (const Tensor& g : grads) {
    if (g.defined()) device = g.device();
  }
  for (std::size_t j = 0; j < grads.size(); ++j) {
    if (!grads[j].defined() && is_floating(output_meta[j].dtype)) {
      grads[j] = zeros(output_meta[j].shape, {.dtype = output_meta[j].dtype, .device = device.value_or(output_meta[j].device)});
    }
  }
}

std::vector<bool> mark_input_aliases(Tensors& outputs, const Tensors& inputs) {
  std::vector<bool> aliases(outputs.size(), false);
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    Tensor& o = outputs[j];
    if (!o.defined() || !o.impl()->storage) continue;
    for (const Tensor& t : inputs) {
      if (!t.defined() || t.impl()->storage != o.impl()->storage) continue;
      aliases[j] = true;
      if (o.is_same(t)) o = make_tensor(t.impl()->storage, t.shape(), t.strides(), t.offset(), t.dtype());
      // A view of the input's memory for the version check: a write into the input afterwards
      // makes the output stale, and using it then is refused (refresh_view_history) instead of
      // reading the new values through the function's old history.
      TensorImpl* oi = o.impl();
      if (!oi->view_base) {
        const bool own_root = t.is_leaf() && t.requires_grad();
        oi->view_base = t.impl()->view_base && !own_root ? t.impl()->view_base : t.impl_ptr();
        oi->is_view = true;
        oi->view_version = o.version();
      }
    }
  }
  return aliases;
}

Tensor grad_for_input(const Tensor& g, const TensorMeta& input) {
  Tensor out = g;
  if (out.shape() != input.shape) out = sum_to(out, input.shape);
  if (out.dtype() != input.dtype) out = to(out, input.dtype);
  return out;
}

Tensors OpNode::apply(Tensors&& grad_outputs) {
  bool any = false;
  for (const Tensor& g : grad_outputs) any = any || g.defined();
  if (!any) return Tensors(next_edges.size());
  fill_missing_grads(grad_outputs, output_meta_);
  const BackwardCtx ctx(op_, attrs_, saved_inputs_, saved_outputs_, input_meta_, output_meta_, needs_grad_);
  Tensors grads = op_rule(op_).backward(ctx, grad_outputs);
  grads.resize(next_edges.size());
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!((needs_grad_ >> i) & 1u)) {
      grads[i] = Tensor();
      continue;
    }
    if (grads[i].defined()) grads[i] = grad_for_input(grads[i], input_meta_[i]);
  }
  return grads;
}

}  // namespace mg
