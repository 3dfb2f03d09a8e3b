#include "mixgrad/nn/module.h"

#include <algorithm>
#include <sstream>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}

void Module::check_new_name(const std::string& name, const char* what) const {
  MG_CHECK(!name.empty() && name.find('.') == std::string::npos, Error, type_name_, ": ", what,
           " name \"", name, "\" must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
  };
  MG_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), Error, type_name_, ": ", what,
           " name \"", name, "\" is already registered");
}

Tensor Module::register_parameter(const std::string& name, const Tensor& t, bool requires_grad) {
  check_new_name(name, "parameter");
  MG_CHECK(t.defined(), Error, type_name_, ": parameter \"", name, "\" is undefined");
  MG_CHECK(is_floating(t.dtype()), DTypeError, type_name_, ": parameter \"", name,
           "\" must be floating, got ", describe(t));
  // A parameter is a leaf: take the data without history.
  Tensor p = t.is_leaf() && !t.impl()->is_view ? t : t.detach().clone();
  if (!p.is_leaf()) p = p.detach();
  p.requires_grad_(requires_grad);
  params_.emplace_back(name, p);
  return p;
}

Tensor Module::register_buffer(const std::string& name, const Tensor& t) {
  check_new_name(name, "buffer");
  MG_CHECK(t.defined(), Error, type_name_, ": buffer \"", name, "\" is undefined");
  buffers_.emplace_back(name, t.detach());
  return buffers_.back().second;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_new_name(name, "module");
  MG_CHECK(m != nullptr, Error, type_name_, ": module \"", name, "\" is null");
  if (m->name_.empty()) m->name_ = name;  // a module registered under several parents keeps its first name
  children_.emplace_back(name, std::move(m));
}

void Module::collect(const std::string& prefix, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, out);
  return out;
}
NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, out);
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

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<const Module*> Module::modules() const {
  std::vector<const Module*> out;
  for (const auto& [name, m] : named_modules()) out.push_back(m);
  return out;
}

std::string Module::layer_name() const { return type_name_ + "(" + extra_repr() + ")"; }

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (const auto& [name, child] : children_) {
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  }
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

void Module::to(DType dtype, const std::function<bool(const Module&)>& keep) {
  MG_CHECK(is_floating(dtype), DTypeError, type_name_, ".to: modules convert to a floating dtype, got ",
           dtype_name(dtype));
  if (keep && keep(*this)) return;
  NoGradGuard no_grad;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (is_floating(t.dtype()) && t.dtype() != dtype) t.set_data(mg::to(t, dtype));
    }
  }
  for (auto& [name, child] : children_) child->to(dtype, keep);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto* list : {&params_, &buffers_}) {
    for (auto& [name, t] : *list) {
      if (t.device() != device) t.set_data(mg::to(t, device));
    }
  }
  for (auto& [name, child] : children_) child->to(device);
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) {
    if (set_to_none || !p.grad().defined()) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      p.grad().zero_();
    }
  }
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  const NamedTensors b = named_buffers();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  const NamedTensors own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source), applied only if all is well
  for (const auto& [name, dst] : own) {
    auto it = std::find_if(state.begin(), state.end(), [&](const auto& p) { return p.first == name; });
    if (it == state.end()) {
      missing.push_back(name);
    } else if (!it->second.defined() || it->second.shape() != dst.shape()) {
      mismatched.push_back(str_cat(name, ": checkpoint ", it->second.defined() ? describe(it->second) : "undefined",
                                   ", model ", describe(dst)));
    } else {
      copies.emplace_back(dst, it->second);
    }
  }
  for (const auto& [name, t] : state) {
    if (std::none_of(own.begin(), own.end(), [&](const auto& p) { return p.first == name; })) unexpected.push_back(name);
  }
  const bool bad = !mismatched.empty() || (strict && (!missing.empty() || !unexpected.empty()));
  if (bad) {
    std::ostringstream os;
    os << type_name_ << ".load_state_dict: the state does not match the module; nothing was loaded";
    auto list = [&](const char* what, const std::vector<std::string>& names) {
      if (names.empty()) return;
      os << "\n  " << what << " (" << names.size() << "):";
      for (const auto& n : names) os << "\n    " << n;
    };
    list("missing keys", strict ? missing : std::vector<std::string>{});
    list("unexpected keys", strict ? unexpected : std::vector<std::string>{});
    list("shape mismatches", mismatched);
    if (!strict || (missing.empty() && unexpected.empty())) {
      os << "\n  hint: the checkpoint was saved from a different architecture or configuration";
    } else {
      os << "\n  hint: pass strict=false to load the matching keys only";
    }
    throw Error(os.str());
  }
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.set_data(contiguous(mg::to(mg::to(src, dst.device()), dst.dtype())).clone());
}

std::string Module::str() const {
  std::ostringstream os;
  os << type_name_ << '(' << extra_repr();
  if (!children_.empty()) {
    os << '\n';
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

}  // namespace mg::nn
