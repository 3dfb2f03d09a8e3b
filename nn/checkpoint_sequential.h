// Activation checkpointing over a Sequential (PyTorch's torch.utils.checkpoint.checkpoint_sequential):
// the layers are cut into `segments` runs of consecutive layers; each run but the last goes
// through mg::checkpoint (ops/checkpoint.h), so only the tensors between runs are kept and each
// run's activations are recomputed in backward. The last run is not checkpointed: its
// activations are needed at once by the backward, so recomputing them would only cost time.
//
//   mg::Tensor y = mg::nn::checkpoint_sequential(*body, 4, x);   // same values and gradients as (*body)(x)
#pragma once
#include <cstdint>

#include "mixgrad/nn/container.h"
#include "mixgrad/ops/checkpoint.h"

namespace mg::nn {

// seq(x) with all but the last of `segments` runs checkpointed. The runs are as equal as possible
// (the first `size % segments` runs get one layer more). 1 <= segments <= seq.size(); segments = 1
// is seq(x) as it is. Under NoGradGuard it is seq(x).
Tensor checkpoint_sequential(Sequential& seq, int64_t segments, const Tensor& x, const CheckpointOptions& options = {});

}  // namespace mg::nn
