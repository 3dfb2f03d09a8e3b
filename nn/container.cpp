#include "mixgrad/nn/container.h"

namespace mg::nn {

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

const std::shared_ptr<UnaryModule>& Sequential::operator[](std::size_t i) const {
  MG_CHECK(i < layers_.size(), IndexError, "Sequential: index ", i, " is out of range for ", layers_.size(),
           " layers");
  return layers_[i];
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) : Module("ModuleList") {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(modules_.size()), m);
  modules_.push_back(std::move(m));
}

const std::shared_ptr<Module>& ModuleList::operator[](std::size_t i) const {
  MG_CHECK(i < modules_.size(), IndexError, "ModuleList: index ", i, " is out of range for ", modules_.size(),
           " modules");
  return modules_[i];
}

}  // namespace mg::nn
