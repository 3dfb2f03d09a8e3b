#include "mixgrad/nn/reparametrize.h"

namespace mg::nn::detail {

namespace {
// Own entries come first in the recursive listings and carry no dot.
Tensor find_own(const NamedTensors& list, const std::string& name) {
  for (const auto& [n, t] : list) {
    if (n == name) return t;
  }
  return Tensor();
}
}  // namespace

Tensor own_parameter(const char* op, const Module& m, const std::string& name) {
  Tensor t = find_own(m.named_parameters(), name);
  MG_CHECK(t.defined(), Error, op, ": ", m.layer_name(), " has no parameter \"", name, "\"");
  return t;
}

Tensor own_buffer(const char* op, const Module& m, const std::string& name) {
  Tensor t = find_own(m.named_buffers(), name);
  MG_CHECK(t.defined(), Error, op, ": ", m.layer_name(), " has no buffer \"", name, "\"");
  return t;
}

void check_reparametrized_weight(const char* op, const Module& m, const Tensor& weight, const std::string& name) {
  const Tensor p = own_parameter(op, m, name);
  MG_CHECK(weight.defined() && weight.is_same(p), Error, op, ": the tensor given is not ", m.layer_name(),
           "'s parameter \"", name, "\" (pass the member its forward reads, e.g. fc->weight)");
}

}  // namespace mg::nn::detail
