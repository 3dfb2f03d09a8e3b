#include "mixgrad/ops/composite.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/ops.h"

namespace mg::detail {

const std::vector<CompositeDesc>& composite_functions() {
  static const std::vector<CompositeDesc> list = {
#define MG_COMPOSITE(name, policy) {#name, CastPolicy::policy},
#include "mixgrad/ops/composite_list.def"
#undef MG_COMPOSITE
  };
  return list;
}

CompositeInputs composite_inputs(const char* name, Tensors inputs, std::initializer_list<std::size_t> labels) {
  const auto& list = composite_functions();
  const auto it = std::find_if(list.begin(), list.end(), [&](const CompositeDesc& d) { return std::strcmp(d.name, name) == 0; });
  MG_ASSERT(it != list.end(), name, " is not in ops/composite_list.def");
  const CastPolicy policy = it->policy;
  // Integer and bool inputs (labels such as a +-1 target) take no part in the dtype decision and
  // no gradient; they are converted to the math dtype below.
  Tensors floating;
  for (const Tensor& t : inputs) {
    MG_CHECK(t.defined(), Error, name, ": got an undefined tensor");
    if (is_floating(t.dtype())) floating.push_back(t);
  }
  MG_CHECK(!floating.empty(), DTypeError, name, ": expected a floating input, got ", describe(inputs[0]));
  apply_autocast(policy, name, floating);
  // The result dtype: promoted over the floating inputs that are not labels (all of them if every
  // floating input is a label).
  std::optional<DType> result;
  for (std::size_t i = 0, f = 0; i < inputs.size(); ++i) {
    if (!is_floating(inputs[i].dtype())) continue;
    const DType d = floating[f++].dtype();
    if (std::find(labels.begin(), labels.end(), i) != labels.end()) continue;
    result = result ? promote_types(*result, d) : d;
  }
  if (!result) result = floating[0].dtype();
  const DType math = *result == DType::F64 ? DType::F64 : DType::F32;
  CompositeInputs c{{}, *result, nullptr};
  std::size_t next = 0;
  for (const Tensor& t : inputs) {
    const Tensor& src = is_floating(t.dtype()) ? floating[next++] : t;
    c.math.push_back(src.dtype() == math ? src : to(src, math));
  }
  c.autocast_off = std::make_unique<AutocastOffGuard>();
  return c;
}

Tensor host_constant(const std::string& key, Device device, const std::function<Tensor()>& make) {
  if (device.is_cpu()) return make();
  // Never destroyed: device tensors must not be freed after the backend shut down at exit.
  static std::mutex& mutex = *new std::mutex;
  static auto& cache = *new std::map<std::pair<std::string, std::string>, Tensor>;
  const std::pair<std::string, std::string> k{key, device.str()};
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(k);
    if (it != cache.end()) return it->second;
  }
  const Tensor made = to(make(), device);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 256) cache.clear();
  return cache.emplace(k, made).first->second;
}

Tensor round_result(const Tensor& x, const CompositeInputs& c) { return x.dtype() == c.result ? x : to(x, c.result); }

Tensor reduce_composite(const Tensor& x, Reduction reduction) {
  switch (reduction) {
    case Reduction::Mean: return mean(x);
    case Reduction::Sum: return sum(x);
    default: return x;
  }
}

void check_plain_reduction(const char* name, Reduction reduction) {
  MG_CHECK(reduction == Reduction::None || reduction == Reduction::Mean || reduction == Reduction::Sum, Error, name,
           ": reduction ", reduction_name(reduction), " is only accepted by kl_div\n  hint: use Reduction::Mean");
}

}  // namespace mg::detail
