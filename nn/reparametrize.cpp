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
           "'s parameter \"", name, "\"\n  hint: the member and the name go together, e.g. &nn::Linear::bias with name \"bias\"");
}

void check_handle(const char* op, const ReparametrizationHandle& handle, ReparametrizationHandle::Kind kind,
                  const Tensor& weight) {
  using Kind = ReparametrizationHandle::Kind;
  MG_CHECK(handle.kind == kind, Error, op, ": the handle was returned by ",
           handle.kind == Kind::WeightNorm ? "weight_norm" : "spectral_norm", " (of parameter \"", handle.name,
           "\"); pass it to ", handle.kind == Kind::WeightNorm ? "remove_weight_norm" : "remove_spectral_norm");
  MG_CHECK(!handle.name.empty(), Error, op, ": an empty handle (pass what the reparametrization returned)");
  MG_CHECK(handle.member == &weight, Error, op, ": the handle belongs to parameter \"", handle.name,
           "\" of another member or module (pass the member it was applied to)");
}

}  // namespace mg::nn::detail
