// mg::checkpoint: the checks both forms share, then the form the options ask for.
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/graph_rng.h"
#include "mixgrad/ops/checkpoint_detail.h"
#include "mixgrad/ops/dispatcher.h"

namespace mg {

namespace checkpoint_detail {
void refuse_inside_capture() {
  MG_CHECK(!generator_captured(default_generator()), Error,
           "checkpoint: activation checkpointing is not supported inside a CUDA graph capture: the "
           "recomputation serves the first run's random draws from host-side records, which a graph replay "
           "would not renew\n  hint: capture the step without mg::checkpoint (train_bert: drop "
           "--checkpoint-activations), or run it eagerly");
}
}  // namespace checkpoint_detail

Tensors checkpoint(const CheckpointFn& fn, const Tensors& inputs, const CheckpointOptions& options) {
  MG_CHECK(bool(fn), Error, "checkpoint: no function given");
  init();
  if (!GradMode::is_enabled()) return fn(inputs);  // nothing to save (inference)
  checkpoint_detail::refuse_inside_capture();
  return options.reentrant ? checkpoint_detail::checkpoint_reentrant(fn, inputs)
                           : checkpoint_detail::checkpoint_recomputing(fn, inputs);
}

}  // namespace mg
