#include "mixgrad/nn/container.h"

#include <algorithm>

namespace mg::nn {

namespace {
// i in [-size, size) as a position; an IndexError naming the container otherwise.
std::size_t position(int64_t i, std::size_t size, const char* container, const char* what) {
  const auto n = static_cast<int64_t>(size);
  MG_CHECK(i >= -n && i < n, IndexError, container, ": index ", i, " is out of range for ", n, " ", what);
  return static_cast<std::size_t>(i < 0 ? i + n : i);
}
}  // namespace

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> layers) : UnaryModule("Sequential") {
  for (auto& l : layers) push_back(std::move(l));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> layer) {
  push_back(std::to_string(layers_.size()), std::move(layer));
}

void Sequential::push_back(const std::string& name, std::shared_ptr<UnaryModule> layer) {
  register_module(name, layer);
  layers_.push_back(std::move(layer));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& l : layers_) h = (*l)(h);
  return h;
}

const std::shared_ptr<UnaryModule>& Sequential::operator[](int64_t i) const {
  return layers_[position(i, layers_.size(), "Sequential", "layers")];
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) : Module("ModuleList") {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

const std::shared_ptr<Module>& ModuleList::operator[](int64_t i) const {
  return modules_[position(i, modules_.size(), "ModuleList", "modules")];
}

ModuleDict::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) : Module("ModuleDict") {
  for (auto& [key, m] : modules) insert(key, std::move(m));
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> m) {
  register_module(key, m);  // validates the key and refuses a duplicate or a null module
  modules_.emplace_back(key, std::move(m));
}

namespace {

// The keys of (key, value) pairs in order.
template <typename Pairs>
std::vector<std::string> keys_of(const Pairs& pairs) {
  std::vector<std::string> out;
  for (const auto& entry : pairs) out.push_back(entry.first);
  return out;
}

// The value under `key`; an IndexError "<container>: no <item> "key" (keys: ...)" when none.
template <typename Pairs>
const auto& value_at(const Pairs& pairs, const std::string& key, const char* container, const char* item) {
  const auto it = std::find_if(pairs.begin(), pairs.end(), [&](const auto& p) { return p.first == key; });
  if (it == pairs.end()) {
    std::string known;
    for (const std::string& k : keys_of(pairs)) known += (known.empty() ? "\"" : ", \"") + k + "\"";
    throw IndexError(str_cat(container, ": no ", item, " \"", key, "\" (keys: ", known.empty() ? "none" : known, ")"));
  }
  return it->second;
}

}  // namespace

bool ModuleDict::contains(const std::string& key) const {
  return std::any_of(modules_.begin(), modules_.end(), [&](const auto& p) { return p.first == key; });
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  return value_at(modules_, key, "ModuleDict", "module");
}

std::vector<std::string> ModuleDict::keys() const { return keys_of(modules_); }

namespace {

// "[3, 4] f32" for each entry, as PyTorch's "Parameter containing: [torch.float32 of size 3x4]".
std::string parameter_summary(const std::string& name, const Tensor& p) {
  return str_cat("(", name, "): ", p.shape(), " ", dtype_name(p.dtype()), p.device().is_cpu() ? "" : str_cat(" ", p.device()));
}

}  // namespace

ParameterList::ParameterList(const Tensors& params) : Module("ParameterList") {
  for (const Tensor& p : params) push_back(p);
}

Tensor ParameterList::push_back(const Tensor& p) {
  params_.push_back(register_parameter(std::to_string(params_.size()), p));
  return params_.back();
}

const Tensor& ParameterList::operator[](int64_t i) const {
  const int64_t n = int64_t(params_.size());
  MG_CHECK(i >= -n && i < n, IndexError, "ParameterList: index ", i, " is out of range for ", n, " parameters");
  return params_[std::size_t(i < 0 ? i + n : i)];
}

std::string ParameterList::extra_repr() const {
  std::string s;
  for (std::size_t i = 0; i < params_.size(); ++i) s += (i ? ", " : "") + parameter_summary(std::to_string(i), params_[i]);
  return s;
}

ParameterDict::ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params) : Module("ParameterDict") {
  for (const auto& [key, p] : params) insert(key, p);
}

Tensor ParameterDict::insert(const std::string& key, const Tensor& p) {
  params_.emplace_back(key, register_parameter(key, p));  // validates the key and refuses a duplicate
  return params_.back().second;
}

bool ParameterDict::contains(const std::string& key) const {
  return std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == key; });
}

const Tensor& ParameterDict::operator[](const std::string& key) const {
  return value_at(params_, key, "ParameterDict", "parameter");
}

std::vector<std::string> ParameterDict::keys() const { return keys_of(params_); }

std::string ParameterDict::extra_repr() const {
  std::string s;
  for (const auto& [k, p] : params_) s += (s.empty() ? "" : ", ") + parameter_summary(k, p);
  return s;
}

}  // namespace mg::nn
