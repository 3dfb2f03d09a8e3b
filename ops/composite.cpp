#include "mixgrad/ops/composite.h"

#include <algorithm>
#include <cstring>

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

CompositeInputs composite_inputs(const char* name, Tensors inputs) {
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
  DType result = floating[0].dtype();
  for (const Tensor& t : floating) result = promote_types(result, t.dtype());
  const DType math = result == DType::F64 ? DType::F64 : DType::F32;
  CompositeInputs c{{}, result};
  std::size_t next = 0;
  for (const Tensor& t : inputs) {
    const Tensor& src = is_floating(t.dtype()) ? floating[next++] : t;
    c.math.push_back(src.dtype() == math ? src : to(src, math));
  }
  return c;
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
