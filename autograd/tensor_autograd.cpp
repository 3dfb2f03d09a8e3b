// The Tensor members that belong to autograd: backward, hooks, retain_grad.
#include "mixgrad/autograd/engine.h"
#include "mixgrad/autograd/node.h"

namespace mg {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

HookHandle Tensor::register_hook(TensorHook hook) const {
  MG_CHECK(requires_grad(), AutogradError,
           "register_hook: cannot register a hook on a tensor that does not require grad (",
           describe(*this), ")");
  MG_CHECK(autograd::make_view_current(*this), AutogradError, "register_hook: ", describe(*this),
           " is a view whose base was modified in place after the view was taken",
           "\n  hint: take the view again after the in-place operation");
  const autograd::Edge edge = autograd::gradient_edge(*this);
  return {edge.node, edge.node->add_pre_hook(edge.input_nr, std::move(hook))};
}

bool HookHandle::remove() const {
  const std::shared_ptr<autograd::Node> n = node.lock();
  return n && n->remove_pre_hook(id);
}

void Tensor::retain_grad() const {
  MG_CHECK(requires_grad(), AutogradError,
           "retain_grad: cannot retain the gradient of a tensor that does not require grad");
  MG_CHECK(autograd::make_view_current(*this), AutogradError, "retain_grad: ", describe(*this),
           " is a view whose base was modified in place after the view was taken",
           "\n  hint: take the view again after the in-place operation");
  if (is_leaf() || impl()->autograd.retains_grad) return;  // leaves keep .grad anyway; once is enough
  impl()->autograd.retains_grad = true;
  impl()->autograd.grad_fn->set_retained(impl()->autograd.output_nr, impl_ptr());
}

}  // namespace mg
