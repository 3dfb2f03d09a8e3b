// Containers: Sequential (a chain of unary layers), ModuleList (an indexed list of modules whose
// forward the owner writes), ModuleDict (modules by name, in insertion order) and Functional (a
// function as a layer, e.g. a reshape in a Sequential). Indices may be negative, counted from the
// end, as in PyTorch (seq[-1] is the last layer).
//
//   auto mlp = nn::Sequential({nn::make<nn::Linear>({.in = 784, .out = 256}), nn::make<nn::ReLU>(),
//                              nn::make<nn::Linear>({.in = 256, .out = 10})});
//   mg::Tensor logits = mlp(x);                     // parameters named "0.weight", "2.bias", ...
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/nn/module.h"

namespace mg::nn {

class Sequential : public UnaryModule {
 public:
  Sequential() : UnaryModule("Sequential") {}
  // Children named "0", "1", ... in order.
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> layers);
  // Appends a layer named by its position (or by `name`).
  void push_back(std::shared_ptr<UnaryModule> layer);
  void push_back(const std::string& name, std::shared_ptr<UnaryModule> layer);
  // Runs the layers in order.
  Tensor forward(const Tensor& x) override;

  std::size_t size() const { return layers_.size(); }
  const std::shared_ptr<UnaryModule>& operator[](int64_t i) const;
  // The i-th layer as its concrete type; an error when it is another type.
  template <typename M>
  std::shared_ptr<M> at(int64_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    MG_CHECK(m != nullptr, Error, "Sequential: layer ", i, " is a ", (*this)[i]->type_name(),
             ", not the requested type");
    return m;
  }

 private:
  std::vector<std::shared_ptr<UnaryModule>> layers_;
};

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  // Appends a module named by its position.
  void push_back(std::shared_ptr<Module> m);
  std::size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module>& operator[](int64_t i) const;
  template <typename M>
  std::shared_ptr<M> at(int64_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    MG_CHECK(m != nullptr, Error, "ModuleList: module ", i, " is a ", (*this)[i]->type_name(),
             ", not the requested type");
    return m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name in insertion order (PyTorch's ModuleDict), for a model whose forward picks its
// parts by key (one head per task). Each module is registered under its key, so parameters are
// named "<key>.weight".
//   nn::ModuleDict heads({{"cls", nn::make<nn::Linear>({.in = 64, .out = 2})}});
//   heads.insert("tag", nn::make<nn::Linear>({.in = 64, .out = 9}));
//   Tensor y = (*heads.at<nn::Linear>("tag"))(h);
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  explicit ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  // Adds `m` under `key` (a valid module name: non-empty, no '.', not taken).
  void insert(const std::string& key, std::shared_ptr<Module> m);
  std::size_t size() const { return modules_.size(); }
  bool contains(const std::string& key) const;
  // The module under `key`; an IndexError naming the keys when there is none.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[key]);
    MG_CHECK(m != nullptr, Error, "ModuleDict: module \"", key, "\" is a ", (*this)[key]->type_name(),
             ", not the requested type");
    return m;
  }
  std::vector<std::string> keys() const;
  // (key, module) pairs in insertion order.
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
};

// Parameters by position (PyTorch's ParameterList), for a model with a variable number of tensors
// (a scale per layer, a mixture's weights): each is registered under its index, so it is named
// "0", "1", ... in named_parameters() and the state dict, trains, moves and casts as any parameter.
// A tensor with history is copied without it (a parameter is a leaf); requires_grad is set.
//   nn::ParameterList scales({mg::ones({64}), mg::ones({64})});
//   Tensor y = x * scales[1];
class ParameterList : public Module {
 public:
  ParameterList() : Module("ParameterList") {}
  explicit ParameterList(const Tensors& params);
  // Registers `p` under the next index and returns the parameter (a handle that stays valid
  // through to(dtype / device)).
  Tensor push_back(const Tensor& p);
  std::size_t size() const { return params_.size(); }
  // The parameter at i (negative counts from the end); an IndexError outside the list.
  const Tensor& operator[](int64_t i) const;
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }

 protected:
  std::string extra_repr() const override;

 private:
  Tensors params_;
};

// Parameters by name in insertion order (PyTorch's ParameterDict): each registered under its key.
//   nn::ParameterDict p;  p.insert("temperature", mg::ones({1}));
class ParameterDict : public Module {
 public:
  ParameterDict() : Module("ParameterDict") {}
  explicit ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params);
  // Registers `p` under `key` (a valid name: non-empty, no '.', not taken); returns the parameter.
  Tensor insert(const std::string& key, const Tensor& p);
  std::size_t size() const { return params_.size(); }
  bool contains(const std::string& key) const;
  // The parameter under `key`; an IndexError naming the keys when there is none.
  const Tensor& operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  auto begin() const { return params_.begin(); }
  auto end() const { return params_.end(); }

 protected:
  std::string extra_repr() const override;

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
};

// A parameter-free layer from a function: Functional([](const Tensor& x) { return x.flatten(1); }).
class Functional : public UnaryModule {
 public:
  explicit Functional(std::function<Tensor(const Tensor&)> f, std::string name = "Functional")
      : UnaryModule(std::move(name)), f_(std::move(f)) {}
  Tensor forward(const Tensor& x) override { return f_(x); }

 private:
  std::function<Tensor(const Tensor&)> f_;
};

}  // namespace mg::nn
