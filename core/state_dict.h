// StateDict: the serialisable state of anything that is not a module — an optimizer, a learning-
// rate scheduler, a data loader's position, a generator, the AMP scaler. Named tensors plus named
// integers, floats and strings; io/checkpoint.h writes any number of them into one file, each
// under its own prefix, and reads them back exactly (integers stay 64-bit, floats bit-exact).
//
//   mg::StateDict s;
//   s.ints["step"] = 10;  s.floats["lr"] = 0.1;  s.tensors.emplace_back("0.exp_avg", m);
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/core/error.h"
#include "mixgrad/core/generator.h"
#include "mixgrad/core/tensor.h"

namespace mg {

struct StateDict {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in a stable order
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::string> strings;

  // Lookups that name the owner and the key when it is missing ("SGD: state has no int 'step'").
  int64_t int_at(const std::string& owner, const std::string& key) const {
    auto it = ints.find(key);
    MG_CHECK(it != ints.end(), Error, owner, ": state has no integer '", key, "'");
    return it->second;
  }
  double float_at(const std::string& owner, const std::string& key) const {
    auto it = floats.find(key);
    MG_CHECK(it != floats.end(), Error, owner, ": state has no float '", key, "'");
    return it->second;
  }
  const std::string& string_at(const std::string& owner, const std::string& key) const {
    auto it = strings.find(key);
    MG_CHECK(it != strings.end(), Error, owner, ": state has no string '", key, "'");
    return it->second;
  }
  const Tensor& tensor_at(const std::string& owner, const std::string& key) const {
    for (const auto& [name, t] : tensors) {
      if (name == key) return t;
    }
    MG_THROW(Error, owner, ": state has no tensor '", key, "'");
  }
  bool has_tensor(const std::string& key) const {
    for (const auto& [name, t] : tensors) {
      if (name == key) return true;
    }
    return false;
  }
};

// `part`'s integers and floats under `prefix` in `into` (a state nested in another, such as amp's
// loss scalers "loss_scaler.<i>.<key>"), and the reverse: the integers and floats of `s` whose keys
// start with `prefix`, with it removed.
inline void add_prefixed(StateDict& into, const std::string& prefix, const StateDict& part) {
  for (const auto& [k, v] : part.ints) into.ints[prefix + k] = v;
  for (const auto& [k, v] : part.floats) into.floats[prefix + k] = v;
}
inline StateDict prefixed_part(const StateDict& s, const std::string& prefix) {
  StateDict part;
  for (const auto& [k, v] : s.ints) {
    if (k.rfind(prefix, 0) == 0) part.ints[k.substr(prefix.size())] = v;
  }
  for (const auto& [k, v] : s.floats) {
    if (k.rfind(prefix, 0) == 0) part.floats[k.substr(prefix.size())] = v;
  }
  return part;
}

// The state of a generator (seed and Philox offset; stored bit-for-bit in int64) and its restoration.
inline StateDict generator_state(const Generator& g) {
  StateDict s;
  s.ints["seed"] = static_cast<int64_t>(g.seed());
  s.ints["offset"] = static_cast<int64_t>(g.offset());
  return s;
}
inline void load_generator_state(Generator& g, const StateDict& s) {
  g.set_state(static_cast<uint64_t>(s.int_at("Generator", "seed")), static_cast<uint64_t>(s.int_at("Generator", "offset")));
}

}  // namespace mg
