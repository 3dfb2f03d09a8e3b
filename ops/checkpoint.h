// Activation checkpointing (PyTorch's torch.utils.checkpoint): trade compute for memory. A
// checkpointed function's intermediate tensors are not kept for backward; the backward pass runs
// the function again — with the autocast state of the first run and its random draws served
// again, so autocast casts and dropout masks are the same — and uses what that second run computes.
//
// Two forms (CheckpointOptions::reentrant):
// - recomputing (the default, PyTorch's use_reentrant=False): fn runs with recording on under
//   saved-tensor hooks (autograd/saved_tensor_hooks.h) that keep, instead of each tensor fn saves
//   for backward, only its place in the order (the tensors stay until fn returns, so fn may run a
//   backward of its own, e.g. a gradient penalty); the first backward node that needs one runs fn
//   again and takes the tensors in the same order, once per backward pass. The graph is fn's own,
//   so autograd::grad, create_graph (double backward) and nested checkpoints work, and no backward
//   runs inside the backward. A second run that saves another number of tensors, or another
//   shape, dtype or device at some place, is a named error (one that saves same-shaped tensors in
//   another order is not detected, as in PyTorch).
// - reentrant (PyTorch's use_reentrant=True): fn runs without recording, one node stands for it,
//   and that node's backward runs fn again and a backward of its own through it (joined to the
//   running pass, so DDP's end-of-backward callbacks wait for the whole pass). The parameters fn
//   reads get their .grad directly, whether or not an input requires grad. Not supported: create_graph
//   and autograd::grad through it (its inner backward would write .grad), and writing in place
//   into an output that shares memory with an input — each a named error.
//
// Both: the gradients equal the plain run's bit for bit. Every draw fn made from any generator
// (the default one, or a Dropout's own) is recorded where it started and served again to the
// recomputation, which moves no generator: other threads drawing meanwhile are not disturbed and
// do not disturb it (PyTorch rewinds the default generators instead). fn's side effects happen
// twice (a batch norm inside updates its running statistics again).
//
// fn is kept until the backward has run, so what it captures must live that long: capture modules
// by shared_ptr or by value rather than by reference to a loop variable.
//
//   mg::Tensor h = mg::checkpoint([layer](const mg::Tensors& in) { return mg::Tensors{layer->forward(in[0])}; },
//                                 {x})[0];   // layer's activations recomputed in backward
#pragma once
#include <functional>

#include "mixgrad/core/tensor.h"

namespace mg {

using CheckpointFn = std::function<Tensors(const Tensors&)>;

struct CheckpointOptions {
  // false: the recomputing form (saved-tensor hooks); true: the reentrant form (a nested backward).
  bool reentrant = false;
};

// fn(inputs), its intermediate tensors freed (what a checkpointed call keeps alive: its inputs, and
// in the recomputing form also the small record of each saved tensor's place). The outputs carry
// fn's gradient to the inputs and to the parameters fn reads. fn must compute the same thing when
// run again: the same ops on the same inputs (it may draw random numbers from any generator: the
// draws are replayed; a recomputation that draws what the first run did not is a named error). Cost: fn runs twice per training step. Under NoGradGuard fn just
// runs. Inside a CUDA graph capture it is an error (the recomputation would move the captured
// generator).
Tensors checkpoint(const CheckpointFn& fn, const Tensors& inputs, const CheckpointOptions& options = {});

}  // namespace mg
