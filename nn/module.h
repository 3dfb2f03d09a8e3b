// nn::Module: the base of every layer and model. A module owns named parameters (trainable leaf
// tensors), buffers (state that is saved but not trained, e.g. batch-norm running statistics) and
// child modules; names compose with dots ("layer1.0.conv1.weight") as in PyTorch, in registration
// order. Parameters keep their identity for life: to(dtype)/to(device) replace their data
// (Tensor::set_data) and load_state_dict copies values into their memory (copy_), so handles held
// by layers and optimizers stay valid.
//
// A module's type name ("Linear", "Mlp") is what printing and errors show. A user's module need
// not pass one: it is the class name, derived from the dynamic type (typeid, demangled) without
// namespaces or enclosing scopes, as PyTorch's repr prints type(self).__name__; built-in layers
// pass theirs explicitly (Module("Linear")).
//
//   struct Mlp : mg::nn::Module {
//     Mlp() { w = register_parameter("w", mg::randn({10, 784}) * 0.01); }   // type name "Mlp"
//     mg::Tensor w;
//   };
//   auto m = std::make_shared<Mlp>();  m->to(mg::DType::BF16);  auto sd = m->state_dict();
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "mixgrad/core/op_observer.h"
#include "mixgrad/core/tensor.h"

namespace mg::nn {

// Named tensors in registration order (a state dict, named_parameters(), ...).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  // The type name is the derived class's name (see type_name()).
  Module() = default;
  // An explicit type name ("Linear"); empty means derived, as Module().
  explicit Module(std::string type_name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (names: non-empty, no dots, unique within the module) ----
  // Registers `t` as a parameter (a leaf; requires_grad as given) and returns a handle to it.
  Tensor register_parameter(const std::string& name, const Tensor& t, bool requires_grad = true);
  // Registers state that is moved with the module but not trained. A persistent buffer (batch
  // norm's running statistics) is part of state_dict(); a non-persistent one (a cached mask or
  // table the module can rebuild) is not, and load_state_dict neither expects nor accepts it, as
  // PyTorch's register_buffer(..., persistent=False).
  Tensor register_buffer(const std::string& name, const Tensor& t, bool persistent = true);
  // Removes this module's own parameter (or buffer) `name` and returns it, PyTorch's
  // `del module._parameters[name]`: it leaves parameters(), state_dict() and later to() calls; a
  // handle a layer or optimizer holds stays valid. Weight reparametrizations (nn/weight_norm.h)
  // use it to replace a weight. An unknown name is an error.
  Tensor unregister_parameter(const std::string& name);
  Tensor unregister_buffer(const std::string& name);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Constructs and registers a layer from its options: register_module<Linear>("fc", {.in = 4, .out = 2}).
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, typename M::Options options) {
    return register_module(name, std::make_shared<M>(std::move(options)));
  }

  // ---- traversal (recursive, registration order; a module or tensor shared under several names,
  // such as a tied weight, is listed once under its first name, as PyTorch's; state_dict() keeps
  // every name) ----
  Tensors parameters() const;
  NamedTensors named_parameters() const;
  Tensors buffers() const;
  NamedTensors named_buffers() const;
  // The direct children; one registered under several names is listed once, under its first.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  std::vector<std::shared_ptr<Module>> children() const;
  // This module ("") and every descendant with its dotted path.
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  std::vector<const Module*> modules() const;
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- modes, dtypes, devices ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Casts floating parameters and buffers to `dtype`, except inside modules for which `keep`
  // returns true (e.g. keep batch norm in f32 for O2 training).
  void to(DType dtype, const std::function<bool(const Module&)>& keep = nullptr);
  void to(Device device);
  // Lays the 4-D floating parameters and buffers (convolution weights) out in `format`
  // (Contiguous or ChannelsLast), as PyTorch's model.to(memory_format=...); other tensors are
  // unchanged. Gradients follow, and optimizers built before keep working (same tensors). With
  // channels-last activations (amp::initialize's memory_format) this avoids a weight reorder in
  // every convolution on the GPU.
  void to(MemoryFormat format);
  // Clears the gradients of all parameters (set_to_none: drop them; else zero them in place).
  void zero_grad(bool set_to_none = true);

  // ---- state ----
  // Each module's parameters, then its persistent buffers, then its children's state, in
  // registration order with dotted names (PyTorch's order), as detached aliases: they share the
  // model's memory and version counters — an in-place write through one changes the model — but
  // require no gradient. Copy (clone) them for a snapshot that later steps must not change.
  NamedTensors state_dict() const;
  // Copies values in (casting to each tensor's dtype, moving to its device) without replacing any
  // tensor's memory, as PyTorch does: a tensor keeps its address and layout (channels-last stays
  // channels-last), so a CUDA graph captured before the load replays with the loaded values.
  // strict: the key sets must match. Every problem (missing, unexpected, shape mismatch) is listed
  // in one error and nothing is changed. Returns the keys a non-strict load skipped (PyTorch's
  // missing_keys / unexpected_keys), so a prefix mismatch ("module.") that loads nothing shows.
  // A 0-d tensor also takes a one-element [1] value (PyTorch's rule for old checkpoints).
  struct LoadResult {
    std::vector<std::string> missing_keys, unexpected_keys;
  };
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

  // The explicit name given to the constructor, else the class name of the dynamic type with
  // namespaces and enclosing scopes removed ("my::Block" -> "Block", template arguments kept),
  // looked up at each call: inside a constructor it names the class being constructed.
  const std::string& type_name() const;
  // The name this module was registered under ("conv2"): the name in its first parent when it is
  // registered under several, "" for a root. Module paths in diagnostics ("layer1.0.conv2") join
  // the names of the modules being called (core/op_observer.h).
  const std::string& name() const { return name_; }
  // The type with its configuration, "Linear(in=784, out=10, bias=true)": how layers name
  // themselves in error messages.
  std::string layer_name() const;
  // A printable tree like PyTorch's repr: "Mlp(\n  (fc1): Linear(in=784, out=10, bias=true)\n)".
  std::string str() const;

 protected:
  // One line of configuration shown after the type name, e.g. "in=784, out=10, bias=true".
  virtual std::string extra_repr() const { return ""; }
  // Whether this module's own state entry `name` may be absent from a state dict being loaded; it
  // then keeps its value and is not reported missing (batch norm's num_batches_tracked, which
  // checkpoints from PyTorch before 0.4.1 and many converted files lack, as PyTorch's).
  virtual bool state_may_be_missing(const std::string& name) const {
    (void)name;
    return false;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_new_name(const std::string& name, const char* what) const;
  // Parameters (or buffers) under `prefix`; with `seen`, a tensor already in it is skipped.
  void collect(const std::string& prefix, bool params, NamedTensors& out,
               std::unordered_set<const TensorImpl*>* seen) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, const Module*>>& out,
                       std::unordered_set<const Module*>& seen) const;
  // Every name of the state under `prefix`: own parameters, persistent buffers, then children's.
  void collect_state(const std::string& prefix, NamedTensors& out) const;
  // The dotted names under `prefix` that state_may_be_missing allows to be absent.
  void collect_optional_state(const std::string& prefix, std::unordered_set<std::string>& out) const;

  std::string type_name_;  // explicit; empty: derived from the dynamic type
  std::string name_;  // set by the first parent's add_child
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::unordered_set<std::string> non_persistent_buffers_;  // names in buffers_ left out of state_dict
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Opens `m`'s module-path scope for the rest of the enclosing block, in a forward that takes
// several inputs (the counterpart of UnaryModule::operator()); free while no op observer is
// installed:  auto scope = module_scope(*this);
inline ModulePathScope module_scope(const Module& m) { return ModulePathScope(&m, m.name()); }

// A module mapping one tensor to one tensor: every layer that can sit in a Sequential.
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  // The call entry, like PyTorch's __call__: call children as (*child)(x). It runs the forward
  // hooks around forward(x), and while an op observer is installed it runs forward(x) inside the
  // module's path scope, so the ops inside report "<parent path>.<name>"; with neither it just
  // calls forward(x).
  Tensor operator()(const Tensor& x) {
    if (!op_observer() && pre_hooks_.empty() && hooks_.empty()) [[likely]] return forward(x);
    return call_with_hooks(x, [this](const Tensor& in) { return forward(in); });
  }
  // The same entry for a forward with more inputs than x (a Transformer layer's masks): the hooks
  // see and may replace x and the output, `run(x)` does the work. A stack calls its children this
  // way, so a hook on one of its layers runs as PyTorch's does:
  //   x = layer.call(x, [&](const Tensor& in) { return layer.forward(in, mask, padding); });
  template <typename F>
  Tensor call(const Tensor& x, F&& run) {
    if (!op_observer() && pre_hooks_.empty() && hooks_.empty()) [[likely]] return run(x);
    return call_with_hooks(x, run);
  }

  // Forward hooks, PyTorch's register_forward_pre_hook / register_forward_hook: run by
  // operator() (a direct forward() call runs none) in registration order, each seeing what the one
  // before it returned. A pre-hook gets (module, input) and may return a replacement input; a hook
  // gets (module, input, output) and may return a replacement output (std::nullopt: keep it).
  // Typical uses: capturing intermediate activations, logging shapes, patching an input.
  //   auto h = layer->register_forward_hook([&](nn::UnaryModule&, const Tensor&, const Tensor& y) {
  //     features = y.detach(); return std::optional<Tensor>(); });
  //   ...; layer->remove_hook(h);
  using ForwardPreHook = std::function<std::optional<Tensor>(UnaryModule& module, const Tensor& input)>;
  using ForwardHook =
      std::function<std::optional<Tensor>(UnaryModule& module, const Tensor& input, const Tensor& output)>;
  int64_t register_forward_pre_hook(ForwardPreHook hook);
  int64_t register_forward_hook(ForwardHook hook);
  // Removes the hook of either kind with this handle; an unknown handle (one of another module:
  // handles are unique in the process) is an error.
  void remove_hook(int64_t handle);

 private:
  Tensor call_with_hooks(const Tensor& x, const std::function<Tensor(const Tensor&)>& run);
  std::vector<std::pair<int64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int64_t, ForwardHook>> hooks_;
};

namespace detail {
// f()'s result; a ShapeError it throws is rethrown with `m`'s layer name in front, so a layer built
// on an op names itself ("Conv3d(2, 4, ...): conv3d: ...").
template <typename F>
Tensor with_layer_name(const Module& m, F&& f) {
  try {
    return f();
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(m.layer_name(), ": ", e.what()));
  }
}
}  // namespace detail

// make<Linear>({.in = 4, .out = 2}) / make<ReLU>(): a shared layer from its options.
template <typename M>
std::shared_ptr<M> make(typename M::Options options) {
  return std::make_shared<M>(std::move(options));
}
template <typename M>
std::shared_ptr<M> make() {
  return std::make_shared<M>();
}

}  // namespace mg::nn
