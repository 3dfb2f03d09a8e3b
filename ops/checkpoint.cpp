// mg::checkpoint: the checks both forms share, then the form the options ask for.
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/checkpoint_detail.h"
#include "mixgrad/ops/dispatcher.h"

namespace mg {

Tensors checkpoint(const CheckpointFn& fn, const Tensors& inputs, const CheckpointOptions& options) {
  MG_CHECK(bool(fn), Error, "checkpoint: no function given");
  init();
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing to save (inference)
  check_not_captured(default_generator(), "checkpoint");
  return options.reentrant ? checkpoint_detail::checkpoint_reentrant(fn, inputs)
                           : checkpoint_detail::checkpoint_recomputing(fn, inputs);
}

}  // namespace mg
