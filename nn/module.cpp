// nn::Module's registration, traversal, conversion and state. The one decision to know: a module
// without an explicit type name gets its class name from typeid(*this) at each type_name() call,
// never cached per object, because inside the base constructor the dynamic type is still Module.
#include "mixgrad/nn/module.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <sstream>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>

#if defined(__GNUC__) || defined(__clang__)
#include <cxxabi.h>

#include <cstdlib>
#endif

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

namespace {

// "my::detail::Block" -> "Block", "(anonymous namespace)::Block" -> "Block", "f()::Local" ->
// "Local", "my::Wrap<my::Block>" -> "Wrap<my::Block>": everything up to the last "::" outside
// brackets goes.
std::string unqualified(const std::string& name) {
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    if (c == '>' || c == ')' || c == ']' || c == '}') --depth;
    if (depth == 0 && c == ':' && i + 1 < name.size() && name[i + 1] == ':') start = i + 2;
  }
  return name.substr(start);
}

std::string demangled(const std::type_info& type) {
  std::string name = type.name();
#if defined(__GNUC__) || defined(__clang__)
  int status = 0;
  char* readable = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  if (status == 0 && readable != nullptr) name = readable;
  std::free(readable);
#else
  for (const char* prefix : {"struct ", "class "}) {  // MSVC's type_info::name()
    if (name.rfind(prefix, 0) == 0) name = name.substr(std::char_traits<char>::length(prefix));
  }
#endif
  return unqualified(name);
}

// One entry per class; std::unordered_map keeps references to its values valid.
const std::string& class_name(const std::type_info& type) {
  static std::mutex mutex;
  static std::unordered_map<std::type_index, std::string> names;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = names.find(type);
  if (it == names.end()) it = names.emplace(type, demangled(type)).first;
  return it->second;
}

}  // namespace

const std::string& Module::type_name() const {
  return type_name_.empty() ? class_name(typeid(*this)) : type_name_;
}

void Module::check_new_name(const std::string& name, const char* what) const {
  MG_CHECK(!name.empty() && name.find('.') == std::string::npos, Error, type_name(), ": ", what,
           " name \"", name, "\" must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
  };
  MG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), Error, type_name(), ": ", what,
           " name \"", name, "\" is already registered");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& t, bool requires_grad) {
  check_new_name(name, "parameter");
  MG_CHECK(t.defined(), Error, type_name(), ": parameter \"", name, "\" is undefined");
  MG_CHECK(is_floating(t.dtype()), DTypeError, type_name(), ": parameter \"", name,
           "\" must be floating, got ", describe(t));
  // A parameter is a leaf: take the data without history.
  Tensor p = t.is_leaf() && !t.impl()->is_view ? t : t.detach().clone();
  if (!p.is_leaf()) p = p.detach();
  p.requires_grad_(requires_grad);
  params_.emplace_back(name, p);
  return p;
}

Tensor Module::register_buffer(const std::string& name, const Tensor& t, bool persistent) {
  check_new_name(name, "buffer");
  MG_CHECK(t.defined(), Error, type_name(), ": buffer \"", name, "\" is undefined");
  // The tensor itself when it carries no autograd history (as parameters are registered): a buffer
  // registered in two modules is then one tensor, listed once and converted once by to(). A
  // detach() would be a new tensor object each time, sharing memory until the first to().
  const bool plain = !t.requires_grad() && !t.grad_fn();
  buffers_.emplace_back(name, plain ? t : t.detach());
  if (!persistent) non_persistent_buffers_.insert(name);
  return buffers_.back().second;
}

namespace {
// Removes and returns the entry `name` of `list`; `what` names the list in the error.
Tensor take_named(NamedTensors& list, const std::string& name, const std::string& owner, const char* what) {
  const auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
  MG_CHECK(it != list.end(), Error, owner, ": no ", what, " named \"", name, "\" to unregister");
  Tensor t = it->second;
  list.erase(it);
  return t;
}
}  // namespace

Tensor Module::unregister_parameter(const std::string& name) {
  return take_named(params_, name, type_name(), "parameter");
}

Tensor Module::unregister_buffer(const std::string& name) {
  Tensor t = take_named(buffers_, name, type_name(), "buffer");
  non_persistent_buffers_.erase(name);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  MG_CHECK(m != nullptr, Error, type_name(), ": module \"", name, "\" is null");
  if (m->name_.empty()) m->name_ = name;  // a module registered under several parents keeps its first name
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out,
                     std::unordered_set<const TensorImpl*>* seen) const {
  for (const auto& [name, t] : params ? params_ : buffers_) {
    if (seen == nullptr || seen->insert(t.impl()).second) out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, out, seen);
}

// A tensor shared under several names (a module registered twice, a tied weight) is listed once,
// under its first name, as PyTorch's remove_duplicate: optimizers take each parameter once and
// num_parameters counts it once. state_dict keeps every name.
NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", true, out, &seen);
  return out;
}
NamedTensors Module::named_buffers() const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  collect("", false, out, &seen);
  return out;
}
Tensors Module::parameters() const {
  Tensors out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}
Tensors Module::buffers() const {
  Tensors out;
  for (auto& [n, t] : named_buffers()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::unordered_set<const Module*> seen;
  for (const auto& entry : children_) {
    if (seen.insert(entry.second.get()).second) out.push_back(entry);
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [name, child] : named_children()) out.push_back(child);
  return out;
}

std::vector<const Module*> Module::modules() const {
  std::vector<const Module*> out;
  for (const auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

std::string Module::layer_name() const { return type_name() + "(" + extra_repr() + ")"; }

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, const Module*>>& out,
                             std::unordered_set<const Module*>& seen) const {
  if (!seen.insert(this).second) return;  // shared: listed once, under its first path
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_) child->collect_modules(prefix.empty() ? name : prefix + "." + name, out, seen);
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  std::unordered_set<const Module*> seen;
  collect_modules("", out, seen);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) {
    if (!trainable_only || p.requires_grad()) n += p.numel();
  }
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

namespace {
// t takes `data`'s storage, and its accumulated gradient (set_data drops it) follows in the same
// dtype and device, as PyTorch's Module.to keeps .grad.
void set_data_keeping_grad(const Tensor& t, const Tensor& data) {
  const Tensor g = t.grad();
  t.set_data(data);
  if (g.defined()) t.set_grad(mg::to(mg::to(g, data.dtype()), data.device()));
}
}  // namespace

void Module::to(DType dtype, const std::function<bool(const Module&)>& keep) {
  MG_CHECK(is_floating(dtype), DTypeError, type_name(), ".to: modules convert to a floating dtype, got ",
           dtype_name(dtype));
  if (keep && keep(*this)) return;
  NoGradGuard no_grad;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (is_floating(t.dtype()) && t.dtype() != dtype) set_data_keeping_grad(t, mg::to(t, dtype));
    }
  }
  for (auto& [name, child] : children_) child->to(dtype, keep);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (t.device() != device) set_data_keeping_grad(t, mg::to(t, device));
    }
  }
  for (auto& [name, child] : children_) child->to(device);
}

void Module::to(MemoryFormat format) {
  MG_CHECK(format == MemoryFormat::Contiguous || format == MemoryFormat::ChannelsLast, Error, type_name(),
           ".to: the memory format must be Contiguous or ChannelsLast, got ", memory_format_name(format));
  NoGradGuard no_grad;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (t.dim() != 4 || !is_floating(t.dtype()) || t.is_contiguous(format)) continue;
      const Tensor g = t.grad();
      t.set_data(mg::contiguous(t, format));
      if (g.defined()) t.set_grad(mg::contiguous(g, format));
    }
  }
  for (auto& [name, child] : children_) child->to(format);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (set_to_none || !p.grad().defined()) {
      p.set_grad(Tensor());
    } else if (p.grad().grad_fn()) {
      p.set_grad(zeros_like(p.grad()));  // a gradient with history (create_graph): replace, don't mutate
    } else {
      NoGradGuard no_grad;
      p.grad().zero_();
    }
  }
}

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, t] : buffers_) {
    if (!non_persistent_buffers_.contains(name)) out.emplace_back(prefix + name, t);
  }
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

void Module::collect_optional_state(const std::string& prefix, std::unordered_set<std::string>& out) const {
  for (const auto* list : {&params_, &buffers_}) {
    for (const auto& [name, t] : *list) {
      if (state_may_be_missing(name)) out.insert(prefix + name);
    }
  }
  for (const auto& [name, child] : children_) child->collect_optional_state(prefix + name + ".", out);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;  // every name of a shared tensor, as PyTorch's state_dict
  collect_state("", out);
  // Detached aliases, as PyTorch's: the same memory (an in-place write changes the model, a load
  // copies into it) without the parameter's requires_grad, so the caller may edit them in place.
  for (auto& entry : out) entry.second = entry.second.detach();
  return out;
}

Module::LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  const NamedTensors own = state_dict();
  std::unordered_set<std::string> optional;
  collect_optional_state("", optional);
  // Keys looked up by hash: a linear search per key was quadratic in the number of tensors.
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given.emplace(name, &t);  // the first of a repeated key, as find did
  std::unordered_set<std::string> own_names;
  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source), applied only if all is well
  for (const auto& [name, dst] : own) {
    own_names.insert(name);
    const auto it = given.find(name);
    if (it == given.end()) {
      if (!optional.contains(name)) missing.push_back(name);
      continue;
    }
    Tensor src = *it->second;
    // A one-element [1] value for a 0-d tensor, as PyTorch's _load_from_state_dict takes input[0].
    if (src.defined() && dst.dim() == 0 && src.dim() == 1 && src.numel() == 1) src = src.reshape({});
    if (!src.defined() || src.shape() != dst.shape()) {
      mismatched.push_back(str_cat(name, ": checkpoint ", src.defined() ? describe(src) : "undefined",
                                   ", model ", describe(dst)));
    } else {
      copies.emplace_back(dst, src);
    }
  }
  for (const auto& entry : state) {
    if (!own_names.contains(entry.first)) unexpected.push_back(entry.first);
  }
  const bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (bad) {
    std::ostringstream os;
    os << type_name() << ".load_state_dict: the state does not match the module; nothing was loaded";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      os << "\n  " << what << " (" << names.size() << "):";
      for (const auto& n : names) os << "\n    " << n;
    };
    list("missing keys", strict ? missing : std::vector<std::string>{});
    list("unexpected keys", strict ? unexpected : std::vector<std::string>{});
    list("shape mismatches", mismatched);
    if (!mismatched.empty() || !strict || (missing.empty() && unexpected.empty())) {  // strict=false would not help
      os << "\n  hint: the checkpoint was saved from a different architecture or configuration";
    } else {
      os << "\n  hint: pass strict=false to load the matching keys only";
    }
    throw Error(os.str());
  }
  // In place: a new storage would leave behind the old memory whose address a captured CUDA graph
  // (or a view of the parameter) still holds, and would drop a channels-last layout.
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src);
  return {std::move(missing), std::move(unexpected)};
}

std::string Module::str() const {
  std::ostringstream os;
  // The configuration inline when there are no children, else on its own line above them, as
  // PyTorch's repr.
  const std::string extra = extra_repr();
  os << type_name() << '(';
  if (children_.empty()) os << extra;
  if (!children_.empty()) {
    os << '\n';
    if (!extra.empty()) os << "  " << extra << '\n';
    for (const auto& [name, child] : children_) {
      std::string sub = child->str();
      // Indent the child's lines by two spaces.
      std::string indented;
      for (char c : sub) {
        indented += c;
        if (c == '\n') indented += "  ";
      }
      os << "  (" << name << "): " << indented << '\n';
    }
  }
  os << ')';
  return os.str();
}

namespace {
// Hook handles are unique in the process, so removing another module's handle is an error
// instead of silently removing this module's hook with the same number.
int64_t next_hook_handle() {
  static std::atomic<int64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

int64_t UnaryModule::register_forward_pre_hook(ForwardPreHook hook) {
  MG_CHECK(hook != nullptr, Error, layer_name(), ": register_forward_pre_hook got an empty function");
  const int64_t handle = next_hook_handle();
  pre_hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

int64_t UnaryModule::register_forward_hook(ForwardHook hook) {
  MG_CHECK(hook != nullptr, Error, layer_name(), ": register_forward_hook got an empty function");
  const int64_t handle = next_hook_handle();
  hooks_.emplace_back(handle, std::move(hook));
  return handle;
}

void UnaryModule::remove_hook(int64_t handle) {
  const auto drop = [&](auto& list) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const auto& h) { return h.first == handle; });
    if (it == list.end()) return false;
    list.erase(it);
    return true;
  };
  MG_CHECK(drop(pre_hooks_) || drop(hooks_), Error, layer_name(), ": no forward hook with handle ", handle);
}

Tensor UnaryModule::call_with_hooks(const Tensor& x, const std::function<Tensor(const Tensor&)>& run) {
  auto scope = module_scope(*this);
  // Copies: a hook may register or remove hooks while it runs.
  Tensor input = x;
  for (const auto& [handle, hook] : std::vector(pre_hooks_)) {
    if (std::optional<Tensor> replaced = hook(*this, input)) input = std::move(*replaced);
  }
  Tensor output = run(input);
  for (const auto& [handle, hook] : std::vector(hooks_)) {
    if (std::optional<Tensor> replaced = hook(*this, input, output)) output = std::move(*replaced);
  }
  return output;
}

}  // namespace mg::nn
