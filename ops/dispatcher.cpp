// The dispatcher: autocast hook -> device check -> infer/allocate -> kernel -> autograd record
// -> op observer (only when one is installed: core/op_observer.h).
#include "mixgrad/ops/dispatcher.h"

#include <atomic>
#include <memory>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/memory_overlap.h"
#include "mixgrad/core/op_observer.h"
#include "mixgrad/core/pinned_memory.h"
#include "mixgrad/ops/cuda_gaps.h"
#include "mixgrad/ops/custom_function.h"
#include "mixgrad/ops/inplace_view.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/op_node.h"
#include "mixgrad/ops/op_rule.h"
#include "mixgrad/ops/ops.h"

namespace mg {
namespace {

// Set once (by amp, under call_once) and read by every dispatch on every thread: atomic, so a
// thread dispatching while another opens the first Autocast region reads one value or the other.
std::atomic<AutocastHook> g_autocast_hook{nullptr};

void check_inputs(OpId op, const Tensors& inputs) {
  const OpDesc& desc = op_desc(op);
  MG_ASSERT(desc.arity < 0 || int(inputs.size()) == desc.arity, desc.name, " called with ",
            inputs.size(), " inputs");
  const Tensor* first = nullptr;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    MG_CHECK(inputs[i].defined(), Error, desc.name, ": input ", i, " is an undefined tensor");
    if (op == OpId::to_device) continue;
    if (!first) {
      first = &inputs[i];
    } else {
      MG_CHECK(inputs[i].device() == first->device(), DeviceError, desc.name,
               ": expected all tensors on the same device, got ", describe(*first), " and ",
               describe(inputs[i]), "\n  hint: move them with .to(device) first");
    }
  }
}

// Bit mask of the inputs that need a gradient (when recording applies at all).
uint32_t needs_grad_mask(OpId op, const Tensors& inputs) {
  if (!op_desc(op).differentiable || !GradMode::is_enabled()) return 0;
  uint32_t mask = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.requires_grad()) continue;
    // A stale view gets its base's current history, or is refused (ops/inplace_view.h).
    check_recorded_input_view(op_name(op), i, t);
    MG_CHECK(i < 16, NotImplementedError, op_name(op), ": autograd supports at most 16 inputs");
    mask |= 1u << i;
  }
  // Also when nothing is recorded (mask 0): a stale view that needs no gradient of a base that
  // now has history would otherwise enter as a constant and silently drop that gradient (PyTorch
  // gives such a view the base's history; here it is refused with a hint).
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) check_recorded_input_view(op_name(op), i, inputs[i]);
  }
  return mask;
}

void record(OpId op, const OpAttrs& attrs, const Tensors& inputs, Tensors& outputs, uint32_t needs) {
  const OpRule& rule = op_rule(op);
  MG_ASSERT(rule.backward != nullptr, op_name(op), " is differentiable but has no backward rule");
  const uint32_t save = rule.saves ? rule.saves(needs) : rule.save;
  auto node = std::make_shared<OpNode>(op, attrs, inputs, outputs, needs, save);
  autograd::set_history(outputs, node);
  node->save_outputs(outputs, save);
}

// A missing kernel is a NotImplementedError naming the op, the device and the dtype, never a
// fallback to another device. On CUDA it quotes the reason ops/cuda_gaps.def marks for the gap.
[[noreturn]] void throw_missing_kernel(OpId op, const Device& device, DeviceType kernel_device, DType dtype) {
  const char* reason = kernel_device == DeviceType::CUDA ? cuda_gap_reason(op, dtype) : nullptr;
  throw NotImplementedError(missing_kernel_message(op, device.str(), kernel_device, dtype, reason));
}

Tensors run(OpId op, const Tensors& inputs, const OpAttrs& attrs) {
  const OpRule& rule = op_rule(op);
  MG_ASSERT(rule.infer || rule.view, op_name(op), " has no rule registered");
  if (rule.view) {
    const Tensor& base = inputs[0];
    Tensor out = rule.view(base, attrs);
    (void)shape_numel(out.shape());  // a ShapeError when the view's element count overflows (expand)
    out.impl()->is_view = true;
    out.impl()->view_version = base.version();
    const TensorImpl* b = base.impl();
    // The root of the chain of views, except that a leaf requiring grad is a root of its own even
    // when it is a view (x = a.view(...).requires_grad_()): writes through views of it must be
    // refused as writes into a leaf (check_view_rebase), as PyTorch refuses them. Likewise a
    // custom function's output that aliases its input (is_custom_function_alias).
    const bool own_root = (base.is_leaf() && base.requires_grad()) || is_custom_function_alias_output(base);
    out.impl()->view_base = b->view_base && !own_root ? b->view_base : base.impl_ptr();
    out.impl()->view_made_in_no_grad = !GradMode::is_enabled() || (b->is_view && b->view_made_in_no_grad);
    return {out};
  }
  const InferResult r = rule.infer(inputs, attrs);
  // Outputs live on the inputs' device, except for to_device; a copy that touches a CUDA device
  // is the CUDA backend's kernel.
  const bool cross = op == OpId::to_device;
  const Device device = cross ? attrs.device : inputs.at(0).device();
  const DeviceType kernel_device =
      cross && (device.is_cuda() || inputs[0].device().is_cuda()) ? DeviceType::CUDA : device.type;
  // A build without the backend says so (DeviceError), not "no kernel" (NotImplementedError).
  if (kernel_device == DeviceType::CUDA) (void)allocator_for(DeviceType::CUDA);
  KernelFn kernel = find_kernel(op, kernel_device, r.kernel_dtype);
  if (kernel == nullptr) throw_missing_kernel(op, device, kernel_device, r.kernel_dtype);
  Tensors outputs;
  outputs.reserve(r.outputs.size());
  // to(cpu, non_blocking) of a CUDA tensor lands in pinned memory, so its copy can stay asynchronous.
  const bool pinned = cross && device.is_cpu() && inputs[0].device().is_cuda() && attrs.mode == 1;
  for (const TensorMeta& m : r.outputs) {
    outputs.push_back(pinned ? empty_pinned(m.shape, m.dtype, m.format)
                             : empty(m.shape, {.dtype = m.dtype, .device = device, .memory_format = m.format}));
  }
  kernel(inputs, outputs, attrs);
  return outputs;
}

// Reports an op that ran to the observer (unless muted on this thread).
void notify_observer(OpId op, const Tensors& inputs, const Tensors& outputs, bool inplace) {
  const OpObserver obs = active_op_observer();
  if (!obs) return;
  OpEvent event;
  event.op = op_name(op);
  event.inplace = inplace;
  event.view = op_rule(op).view != nullptr;
  event.inputs = &inputs;
  event.outputs = &outputs;
  event.module_path = current_module_path();
  obs(event);
}

// The non-recording in-place path: runs `op` on inputs {self (possibly promoted), others...}
// and writes the result into self.
void run_inplace(OpId op, const Tensor& self, const Tensors& operands, const OpAttrs& attrs) {
  const char* name = op_name(op);
  const OpRule& rule = op_rule(op);
  MG_ASSERT(rule.infer != nullptr, name, " cannot run in place");
  if (op == OpId::fill && has_internal_overlap(self)) {
    // fill_/zero_ write one value everywhere, so an expanded tensor has a single answer (PyTorch
    // allows it; a .grad set to an expanded tensor is zeroed this way): each memory location is
    // written once, through the view without its stride-0 dims.
    Shape distinct = self.shape();
    for (std::size_t d = 0; d < distinct.size(); ++d) {
      if (self.strides()[d] == 0 && distinct[d] > 1) distinct[d] = 1;
    }
    const TensorImpl* s = self.impl();
    const Tensor once = make_tensor(s->storage, distinct, s->strides, s->offset, s->dtype);
    Tensors inputs = operands;  // input 0 is self
    for (Tensor& t : inputs) {
      if (t.is_same(self)) t = once;
    }
    run_inplace(op, once, inputs, attrs);
    return;
  }
  MG_CHECK(!has_internal_overlap(self), Error, name, "_: ", describe(self),
           " has elements that share one memory location (a stride of 0: an expanded or broadcast view), so "
           "writing into it in place has no single answer\n  hint: contiguous() or clone() it first");
  // The in-place ops are elementwise: an operand in exactly self's elements is read before each is
  // written, but one that overlaps them otherwise (x[1:].copy_(x[:-1]), x.add_(x[0])) would read
  // elements already written. Such an operand is read from a copy, so the result is the
  // out-of-place op's (NumPy's rule; PyTorch refuses instead).
  Tensors inputs = operands;
  for (Tensor& t : inputs) {
    if (memory_overlap(self, t) == MemOverlap::Partial) {
      NoGradGuard no_grad;
      OpObserverMute mute;
      t = clone(t);
    }
  }
  const InferResult r = rule.infer(inputs, attrs);
  MG_CHECK(r.outputs.size() == 1 && r.outputs[0].shape == self.shape(), ShapeError, name,
           "_: the result has shape ", r.outputs[0].shape, " but the tensor written in place is ",
           describe(self));
  if (r.outputs[0].dtype == self.dtype() && r.kernel_dtype == self.dtype()) {
    KernelFn kernel = find_kernel(op, self.device().type, r.kernel_dtype);
    if (kernel == nullptr) throw_missing_kernel(op, self.device(), self.device().type, r.kernel_dtype);
    Tensors outs{self};
    kernel(inputs, outs, attrs);
  } else {
    // Mixed dtypes: compute in the promoted dtype, then cast into self.
    NoGradGuard no_grad;
    Tensor result = run(op, inputs, attrs)[0];
    dispatch_inplace(OpId::copy, self, {result});
    return;
  }
  self.bump_version();
  if (self.requires_grad() && !self.is_leaf() && GradMode::is_enabled()) {
    // A non-differentiable in-place op (fill_) cuts the history.
    self.impl()->autograd.grad_fn.reset();
    self.impl()->autograd.requires_grad = false;
  }
}

// run_inplace() reported to the observer as one event: the operands as they were before the
// write (a clone of any operand that shares self's storage, when the op reads it: copy_ and
// fill_ only write) and self as the output. Only runs while an observer is installed.
void run_inplace_observed(OpId op, const Tensor& self, const Tensors& inputs, const OpAttrs& attrs) {
  Tensors before;
  {
    OpObserverMute mute;
    {
      NoGradGuard no_grad;
      const bool reads_self = op != OpId::copy && op != OpId::fill;
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        const Tensor& t = inputs[i];
        if (i == 0 && !reads_self) continue;
        const bool aliases = t.defined() && t.impl()->storage == self.impl()->storage;
        before.push_back(aliases ? clone(t) : t);
      }
    }
    run_inplace(op, self, inputs, attrs);  // under the caller's grad mode (it decides history cuts)
  }
  notify_observer(op, before, Tensors{self}, /*inplace=*/true);
}

}  // namespace

void set_autocast_hook(AutocastHook hook) { g_autocast_hook.store(hook, std::memory_order_release); }

// The region that applies is that of the device the op runs on: its first defined input's.
void apply_autocast(CastPolicy policy, const char* op, Tensors& inputs) {
  const AutocastHook hook = g_autocast_hook.load(std::memory_order_acquire);
  if (!hook) return;
  DeviceType device = DeviceType::CPU;
  for (const Tensor& t : inputs) {
    if (t.defined()) {
      device = t.device().type;
      break;
    }
  }
  if (autocast_state(device).enabled) hook(policy, op, inputs, device);
}

Tensors dispatch(OpId op, Tensors inputs, const OpAttrs& attrs) {
  init();
  check_inputs(op, inputs);
  apply_autocast(op_policy(op), op_name(op), inputs);
  const uint32_t needs = needs_grad_mask(op, inputs);
  Tensors outputs = run(op, inputs, attrs);
  if (needs) record(op, attrs, inputs, outputs, needs);
  if (op_observer()) [[unlikely]] notify_observer(op, inputs, outputs, /*inplace=*/false);
  return outputs;
}

Tensor dispatch1(OpId op, Tensors inputs, const OpAttrs& attrs) {
  return dispatch(op, std::move(inputs), attrs)[0];
}

void dispatch_inplace(OpId op, const Tensor& self, const Tensors& others, const OpAttrs& attrs) {
  init();
  Tensors inputs{self};
  inputs.insert(inputs.end(), others.begin(), others.end());
  check_inputs(op, inputs);
  const char* name = op_name(op);
  if (op_desc(op).default_policy == CastPolicy::Promote) {
    // Mixed dtypes compute in the promoted dtype; the result is cast back into self below.
    DType common = inputs[0].dtype();
    for (const Tensor& t : inputs) common = promote_types(common, t.dtype());
    if (op == OpId::div && !is_floating(common)) common = DType::F32;
    // As PyTorch: a result the tensor's dtype cannot hold is refused, never truncated.
    const DType own = inputs[0].dtype();
    MG_CHECK(!(is_floating(common) && !is_floating(own)) && !(own == DType::Bool && common != DType::Bool),
             DTypeError, name, "_: the result is ", dtype_name(common), " but the tensor written in place is ",
             describe(self), "\n  hint: use the out-of-place op, or convert the tensor to ", dtype_name(common),
             " first");
    for (Tensor& t : inputs) {
      if (t.dtype() != common) t = to(t, common);
    }
  }
  bool any_requires_grad = false;
  for (const Tensor& t : inputs) any_requires_grad = any_requires_grad || t.requires_grad();
  const bool recording = GradMode::is_enabled() && any_requires_grad;
  if (recording) {
    MG_CHECK(!(self.is_leaf() && self.requires_grad()), AutogradError, name,
             "_: a leaf tensor that requires grad (", describe(self),
             ") cannot be modified in place while grad mode is on",
             "\n  hint: update parameters inside a NoGradGuard, or use the out-of-place op");
    MG_CHECK(!is_custom_function_alias(self), AutogradError, name, "_: ", describe(self),
             " shares memory with an input of the custom function (or checkpoint) that returned it (an input returned as is, "
             "or a view of one); writing into it in place would bypass the function's backward",
             "\n  hint: clone() the output before modifying it, or return a copy from forward");
    // Whether the write should reach the base's history is ambiguous for a view taken with grad
    // mode off (the caller meant no tracking then), so PyTorch refuses it, and so does this.
    MG_CHECK(!(self.impl()->view_base && self.impl()->view_made_in_no_grad), AutogradError, name, "_: ",
             describe(self), " is a view made while grad mode was off, and this in-place op would be recorded "
             "(grad mode is on and an operand requires grad)",
             "\n  hint: take the view and write into it both under the NoGradGuard (untracked), or both outside it "
             "(tracked)");
    if (self.impl()->view_base) {
      check_view_rebase(self, name);
      // The old value the op reads must carry the view's current history: a view that is stale
      // (its base was written since) or needs no gradient while its base does gets the base's.
      if (self.impl()->view_base->autograd.requires_grad &&
          (self.version() != self.impl()->view_version || !self.requires_grad())) {
        (void)refresh_view_history(self);
      }
    }
  } else if (GradMode::is_enabled() && self.impl()->view_base && self.impl()->view_base->autograd.requires_grad) {
    // A view that needs no gradient (taken under NoGradGuard, or before its base needed one) of a
    // base that does: writing through it would change the base's values behind its history (a
    // wrong gradient, silently), as PyTorch refuses too.
    MG_THROW(AutogradError, name, "_: ", describe(self), " is a view that does not require grad of ",
             describe(Tensor(self.impl()->view_base)), ", which does; writing into it in place while grad mode is "
             "on would change the base's values behind its gradient history",
             "\n  hint: write under a NoGradGuard (an update outside autograd), or take the view again with grad "
             "mode on so that the write is recorded");
  }

  if (!recording && GradMode::is_enabled() && op_desc(op).differentiable) {
    // As needs_grad_mask does for an op that records nothing: an operand that is a stale view
    // needing no gradient, of a base that now has history, would be read as a constant and its
    // gradient silently dropped (out.add_(tail)); refused with the out-of-place ops' hint.
    const std::string inplace_name = std::string(name) + "_";
    for (std::size_t i = 1; i < inputs.size(); ++i) check_recorded_input_view(inplace_name.c_str(), i, inputs[i]);
  }
  if (!recording) {
    if (op_observer()) [[unlikely]] {
      run_inplace_observed(op, self, inputs, attrs);
    } else {
      run_inplace(op, self, inputs, attrs);
    }
    return;
  }

  // Recording: run out of place on an alias of self that carries self's current history, write
  // the result into self, and rebase self's history onto the new node. Where the op's backward
  // saves its first input (tanh_, sigmoid_, sin_, ...: derivatives from the input), the op reads a
  // recorded clone of the old value instead, as PyTorch's in-place ops save `self.clone()`; the
  // alias would fail the version check once self is overwritten.
  TensorImpl* s = self.impl();
  Tensor old = make_tensor(s->storage, s->shape, s->strides, s->offset, s->dtype);
  old.impl()->autograd.grad_fn = s->autograd.grad_fn;
  old.impl()->autograd.output_nr = s->autograd.output_nr;
  old.impl()->autograd.requires_grad = s->autograd.requires_grad;
  if (has_op_rule(op) && inputs[0].is_same(self)) {
    const OpRule& rule = op_rule(op);
    const uint32_t needs = needs_grad_mask(op, inputs);
    const uint32_t saved = rule.saves ? rule.saves(needs) : rule.save;
    if (rule.backward && needs != 0 && (saved & kSaveInput(0))) old = clone(old);
  }
  inputs[0] = inputs[0].is_same(self) ? old : to(old, inputs[0].dtype());
  Tensor result = dispatch(op, inputs, attrs)[0];
  if (!result.requires_grad() && old.requires_grad()) {
    // A non-differentiable op (fill_, zero_) writing into a tensor that requires grad keeps it in
    // the graph, its old value getting a zero gradient, as PyTorch: cutting the history refused
    // the tensor's earlier views and any later backward through it.
    result = where(scalar_tensor(0.0, {.dtype = DType::Bool, .device = result.device()}), old, result);
  }
  MG_CHECK(result.shape() == self.shape(), ShapeError, name, "_: the result has shape ",
           result.shape(), " but the tensor written in place is ", describe(self));
  if (result.dtype() != self.dtype()) result = to(result, self.dtype());
  {
    NoGradGuard no_grad;
    OpObserverMute mute;  // the op was reported by dispatch() above; the copy is bookkeeping
    dispatch_inplace(OpId::copy, self, {result});
  }
  // A view: its base's values changed too (PyTorch's CopySlices). An integer or bool view holds
  // no gradient (set_history's rule), whatever the source of the write required.
  if (s->view_base && is_floating(self.dtype())) {
    rebase_view_history(self, result);
    return;
  }
  // A tensor that retains its gradient retains the new value's (PyTorch's rule).
  if (s->autograd.retains_grad && s->autograd.grad_fn) s->autograd.grad_fn->clear_retained(s->autograd.output_nr);
  s->autograd.grad_fn = result.impl()->autograd.grad_fn;
  s->autograd.output_nr = result.impl()->autograd.output_nr;
  s->autograd.requires_grad = result.requires_grad();
  if (s->autograd.retains_grad && s->autograd.grad_fn) s->autograd.grad_fn->set_retained(s->autograd.output_nr, self.impl_ptr());
  s->view_version = self.version();  // a detach()ed tensor's history now describes its values
}

}  // namespace mg
