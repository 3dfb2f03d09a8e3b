// Activation checkpointing (PyTorch's torch.utils.checkpoint): trade compute for memory. A
// checkpointed function runs without recording, so none of its intermediate tensors are kept; the
// backward pass runs it again — with the autocast state and the default generator's position of
// the first run, so autocast casts and dropout masks are the same — and backpropagates through
// that second run. What stays alive between forward and backward is only the inputs.
//
// The decision a reader must know: the backward is reentrant (a backward inside the backward, as
// PyTorch's use_reentrant=True), so the parameters fn uses get their .grad accumulated directly,
// whether or not any input requires grad (unlike PyTorch's reentrant form, which then gives them
// none). It does not support create_graph (double backward) or autograd::grad through it (both
// are errors: the nested backward would write .grad). An output that shares memory with an input
// cannot be written in place. The default generator is rewound for the recomputation: another
// thread drawing from it meanwhile gets numbers out of order (as with PyTorch's RNG-state restore).
//
//   mg::Tensor h = mg::checkpoint([&](const mg::Tensors& in) { return mg::Tensors{layer->forward(in[0])}; },
//                                 {x})[0];   // layer's activations recomputed in backward
#pragma once
#include <functional>

#include "mixgrad/core/tensor.h"

namespace mg {

using CheckpointFn = std::function<Tensors(const Tensors&)>;

// fn(inputs), its intermediate tensors freed. The outputs are new tensors (an input returned as
// is comes back as an alias) that carry fn's gradient to the inputs and to the parameters fn
// reads. fn must compute the same thing when run again: the same ops on the same inputs (it may
// draw random numbers from the default generator: they are replayed). Side effects run twice: a
// batch norm inside fn updates its running statistics again in the recomputation (as in PyTorch). Memory: fn's activations
// are not kept; cost: fn runs twice per training step.
Tensors checkpoint(const CheckpointFn& fn, const Tensors& inputs);

}  // namespace mg
