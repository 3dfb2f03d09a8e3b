#include "mixgrad/autograd/node.h"

#include <mutex>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/op_observer.h"

namespace mg::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
std::atomic<uint64_t> g_next_hook_id{1};
// Leaves shared between threads (one model trained by several threads, Hogwild-style): a leaf's
// accumulator is created once, and gradients are added into .grad one at a time, as PyTorch's
// mutexes do. Without them two threads' forwards could each create an accumulator (an edge to a
// freed node: a crash) and two backwards lose one of their additions.
std::mutex g_accumulator_mutex;
std::mutex g_accumulate_mutex;
}

Node::Node(uint32_t num_outputs)
    : num_outputs_(num_outputs), sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

Node::~Node() {
  // The outermost destructor on this thread drains a list of the nodes whose last reference an
  // inner destructor would have dropped; each inner one only pushes its own (as PyTorch's
  // deleteNode). Saved tensors (derived members, gone before this body runs) do not hold the
  // chain: their producers are in next_edges too. The list lives in the outermost frame and the
  // thread_local is a plain pointer to it: a thread_local vector could already be destroyed when
  // another thread_local (a cache of tensors with history) frees nodes at thread exit.
  thread_local std::vector<std::shared_ptr<Node>>* orphans = nullptr;
  const auto push_sole_owned = [this](std::vector<std::shared_ptr<Node>>& to) {
    for (Edge& e : next_edges) {
      if (e.node && e.node.use_count() == 1) to.push_back(std::move(e.node));
    }
    next_edges.clear();
  };
  if (orphans != nullptr) {
    push_sole_owned(*orphans);
    return;
  }
  std::vector<std::shared_ptr<Node>> list;
  push_sole_owned(list);
  if (list.empty()) return;
  orphans = &list;
  while (!list.empty()) {
    std::shared_ptr<Node> last = std::move(list.back());
    list.pop_back();
    last.reset();  // its destructor pushes the nodes it alone held
  }
  orphans = nullptr;
}

Tensor Node::run_pre_hooks(uint32_t output_nr, Tensor grad) const {
  std::vector<PreHook> hooks;  // a hook may remove itself (or others): run over a copy
  std::vector<std::pair<uint32_t, std::weak_ptr<TensorImpl>>> retained;
  {
    std::lock_guard<std::mutex> lock(hooks_mutex_);
    hooks = pre_hooks_;
    retained = retained_;
  }
  for (const auto& [nr, id, hook] : hooks) {
    if (nr != output_nr || !grad.defined()) continue;
    Tensor replaced = hook(grad);
    if (replaced.defined()) {
      MG_CHECK(replaced.shape() == grad.shape() && replaced.dtype() == grad.dtype() &&
                   replaced.device() == grad.device(),
               AutogradError, "hook: a gradient hook on ", name(), " returned ", describe(replaced),
               " but the gradient is ", describe(grad),
               "\n  hint: a hook may change the gradient's values, not its shape, dtype or device");
      grad = replaced;
    }
  }
  if (!grad.defined()) return grad;
  for (const auto& [nr, weak] : retained) {
    if (nr != output_nr) continue;
    const std::shared_ptr<TensorImpl> impl = weak.lock();
    if (!impl) continue;
    // .grad is read, replaced and written one pass at a time, as AccumulateGrad's.
    std::lock_guard<std::mutex> lock(g_accumulate_mutex);
    const Tensor current(impl->autograd.grad);
    GradMath& math = grad_math();
    // A copy (recorded under create_graph), never the gradient itself: the engine goes on with it.
    impl->autograd.grad = current.defined()      ? math.add(current, grad).impl_ptr()
                          : GradMode::is_enabled() ? math.copy(grad).impl_ptr()
                                                   : math.dense_copy(grad, grad).impl_ptr();
  }
  return grad;
}

void Node::set_retained(uint32_t output_nr, const std::shared_ptr<TensorImpl>& tensor) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  std::erase_if(retained_, [&](const auto& r) { return r.first == output_nr; });
  retained_.emplace_back(output_nr, tensor);
}

void Node::clear_retained(uint32_t output_nr) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  std::erase_if(retained_, [&](const auto& r) { return r.first == output_nr; });
}

uint64_t Node::add_pre_hook(uint32_t output_nr, TensorHook hook) {
  const uint64_t id = g_next_hook_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  pre_hooks_.push_back({output_nr, id, std::move(hook)});
  return id;
}

bool Node::remove_pre_hook(uint64_t id) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  return std::erase_if(pre_hooks_, [&](const PreHook& h) { return h.id == id; }) > 0;
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : Node(1), leaf_(leaf) {}

namespace {
// True when `g` owns a dense block nobody else references, so it can become .grad as is: dense
// NCHW, or channels-last for a channels-last leaf (the gradient keeps the leaf's layout, as
// PyTorch's gradient layout contract; optimizers walk a parameter and its .grad together).
bool is_stealable(const Tensor& g, const Tensor& leaf) {
  const bool leaf_nhwc = !leaf.is_contiguous() && leaf.is_contiguous(MemoryFormat::ChannelsLast);
  const bool same_layout = leaf_nhwc ? g.is_contiguous(MemoryFormat::ChannelsLast) && g.strides() == leaf.strides()
                                     : g.is_contiguous();
  return same_layout && g.offset() == 0 && g.impl_ptr().use_count() == 1 &&
         g.impl()->storage.use_count() == 1 &&
         g.storage().nbytes() == std::size_t(g.numel()) * g.element_size();
}
}  // namespace

Tensors AccumulateGrad::apply(Tensors&& grads) {
  Tensor g = std::move(grads[0]);
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!g.defined() || !impl) return {};
  Tensor leaf(impl);
  // The leaf may have changed since the graph was built. requires_grad_(false): no gradient, as
  // PyTorch. An in-place op on it since: it is an op's output now, and its .grad would be wrong.
  if (!impl->autograd.requires_grad) return {};
  MG_CHECK(!impl->autograd.grad_fn, AutogradError, "backward: leaf ", describe(leaf),
           " has been moved into the graph interior (it was written in place after requires_grad_(false), "
           "and this graph used it as a leaf before that)\n  hint: build the graph again after changing the tensor");
  MG_CHECK(g.shape() == leaf.shape(), AutogradError, "backward: the gradient of leaf ", describe(leaf), " is ",
           describe(g), ": the leaf's shape changed after the graph was built (set_data?)",
           "\n  hint: build the graph again after replacing a tensor's data");
  // .grad has the leaf's dtype and device (docs/autograd.md): a custom function's backward that
  // returns its gradient elsewhere, or a leaf whose data changed dtype since (set_data), is refused.
  MG_CHECK(g.dtype() == leaf.dtype() && g.device() == leaf.device(), AutogradError, "backward: the gradient of leaf ",
           describe(leaf), " is ", describe(g), ": .grad must have the leaf's dtype and device",
           "\n  hint: a custom Function's backward returns each input's gradient on its device; after set_data to "
           "another dtype or device, build the graph again");
  std::unique_lock<std::mutex> lock(g_accumulate_mutex);  // not held while the hooks below run
  Tensor current = leaf.grad();
  GradMath& math = grad_math();
  if (!current.defined()) {
    // .grad owns its memory: the incoming gradient itself when nobody else holds it, else a dense
    // copy — recorded under create_graph, so the gradient keeps its history (double backward).
    // Storing a shared gradient would let a later backward's in-place accumulation write into
    // another leaf's .grad or the caller's tensor.
    leaf.impl()->autograd.grad = is_stealable(g, leaf)      ? g.impl_ptr()
                                 : GradMode::is_enabled() ? math.copy(g).impl_ptr()
                                                          : math.dense_copy(g, leaf).impl_ptr();
  } else if (GradMode::is_enabled()) {
    leaf.impl()->autograd.grad = math.add(current, g).impl_ptr();
  } else {
    math.add_inplace(current, g);
  }
  lock.unlock();
  // A hook may remove itself (or others): run over a copy.
  std::vector<std::pair<uint64_t, PostAccumulateHook>> hooks;
  {
    std::lock_guard<std::mutex> hooks_lock(hooks_mutex_);
    hooks = post_hooks_;
  }
  for (const auto& [id, hook] : hooks) hook(leaf);
  return {};
}

uint64_t AccumulateGrad::add_post_hook(PostAccumulateHook hook) {
  const uint64_t id = g_next_hook_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  post_hooks_.emplace_back(id, std::move(hook));
  return id;
}

bool AccumulateGrad::remove_post_hook(uint64_t id) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  for (auto it = post_hooks_.begin(); it != post_hooks_.end(); ++it) {
    if (it->first == id) {
      post_hooks_.erase(it);
      return true;
    }
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  TensorImpl* impl = t.impl();
  if (impl->autograd.grad_fn) return {impl->autograd.grad_fn, impl->autograd.output_nr};
  if (!impl->autograd.requires_grad) return {};
  std::lock_guard<std::mutex> lock(g_accumulator_mutex);
  if (!impl->autograd.grad_accumulator) {
    impl->autograd.grad_accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  }
  return {impl->autograd.grad_accumulator, 0};
}

bool make_view_current(const Tensor& t) {
  if (!t.defined()) return true;
  const TensorImpl* impl = t.impl();
  // A detach()ed tensor (a view with no base) is a root of its own: writes into it outside
  // autograd keep its history, as for any other tensor (PyTorch's).
  if (!impl->is_view || !impl->view_base || t.version() == impl->view_version || t.is_leaf()) return true;
  return grad_math().refresh_view != nullptr && grad_math().refresh_view(t);
}

void set_history(const Tensors& outputs, const std::shared_ptr<Node>& node) {
  if (op_observer()) [[unlikely]] node->module_path = current_module_path();
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    if (!is_floating(outputs[j].dtype())) continue;  // integer/bool outputs carry no gradient
    AutogradMeta& meta = outputs[j].impl()->autograd;
    meta.grad_fn = node;
    meta.output_nr = uint32_t(j);
    meta.requires_grad = true;
  }
}

GradMath& grad_math() {
  static GradMath math;
  return math;
}

}  // namespace mg::autograd
