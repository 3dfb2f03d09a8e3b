#include "mixgrad/nn/reparametrize.h"

#include <map>
#include <set>
#include <utility>

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

namespace mg::nn {

namespace {

constexpr const char* kParametrizations = "parametrizations.";

// A key of torch.nn.utils.parametrizations split as <path>parametrizations.<name>.<rest>; false
// for any other key.
bool split_parametrization_key(const std::string& key, std::string& path, std::string& name, std::string& rest) {
  const std::string marker = kParametrizations;
  std::size_t at = key.rfind("." + marker);
  if (at != std::string::npos) {
    ++at;  // past the dot: the path keeps it
  } else if (key.rfind(marker, 0) == 0) {
    at = 0;
  } else {
    return false;
  }
  const std::size_t name_begin = at + marker.size();
  const std::size_t name_end = key.find('.', name_begin);
  if (name_end == std::string::npos || name_end == name_begin) return false;
  path = key.substr(0, at);
  name = key.substr(name_begin, name_end - name_begin);
  rest = key.substr(name_end + 1);
  return true;
}

}  // namespace

NamedTensors from_torch_parametrizations(const NamedTensors& state) {
  // The parts each parametrized tensor has, to tell weight norm from spectral norm from others.
  std::map<std::string, std::set<std::string>> parts;  // "<path><name>" -> rests
  for (const auto& [key, t] : state) {
    std::string path, name, rest;
    if (split_parametrization_key(key, path, name, rest)) parts[path + name].insert(rest);
  }
  const std::set<std::string> weight_norm_parts{"original0", "original1"};
  const std::set<std::string> spectral_parts{"original", "0._u", "0._v"};
  std::set<std::string> keys;
  for (const auto& [key, t] : state) keys.insert(key);
  NamedTensors out;
  out.reserve(state.size());
  for (const auto& [key, t] : state) {
    std::string path, name, rest;
    if (!split_parametrization_key(key, path, name, rest)) {
      out.emplace_back(key, t);
      continue;
    }
    const std::set<std::string>& has = parts.at(path + name);
    const bool weight_norm = has == weight_norm_parts, spectral = has == spectral_parts;
    MG_CHECK(weight_norm || spectral, Error, "from_torch_parametrizations: '", key,
             "' belongs to a parametrization of '", path + name,
             "' that nn::weight_norm and nn::spectral_norm cannot hold (weight norm has original0 and original1, "
             "spectral norm original, 0._u and 0._v)");
    const std::string suffix = rest == "original0" ? "_g" : rest == "original1" ? "_v" : rest == "original" ? "_orig"
                             : rest == "0._u"      ? "_u"
                                                   : "_v";
    const std::string renamed = path + name + suffix;
    MG_CHECK(!keys.count(renamed), Error, "from_torch_parametrizations: '", key, "' would be renamed to '", renamed,
             "', which the state already has");
    out.emplace_back(renamed, t);
  }
  return out;
}

}  // namespace mg::nn
