// Hooks at fixed points of a backward pass, for code that must act while backward runs:
// DistributedDataParallel starts a bucket's all-reduce as soon as its last gradient is
// accumulated, and waits for all buckets when the pass ends.
// Decision: these are the two hooks PyTorch's DDP relies on (register_post_accumulate_grad_hook
// and Engine::queue_callback), nothing more: a post-accumulate hook on a leaf, and callbacks
// queued during a backward that run once every node of it has run (still inside backward(), so
// an exception they throw leaves backward()).
//
//   uint64_t id = mg::autograd::register_post_accumulate_grad_hook(w, [](const mg::Tensor& leaf) {
//     mg::autograd::queue_callback([] { /* every gradient of this backward is in place */ });
//   });
//   loss.backward();
//   mg::autograd::remove_post_accumulate_grad_hook(w, id);
#pragma once
#include <cstdint>
#include <functional>

#include "mixgrad/autograd/node.h"
#include "mixgrad/core/tensor.h"

namespace mg::autograd {

// Runs hook(leaf) in backward() each time a gradient was added into leaf.grad() (once per
// backward that reaches the leaf; not in grad(), which leaves .grad alone). `leaf` must be a leaf
// that requires grad. Returns an id for remove_post_accumulate_grad_hook.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateHook hook);
// Removes a hook registered on `leaf`; false when it is not there. Never throws: the leaf may have
// stopped requiring grad since (a layer frozen after DistributedDataParallel wrapped it).
bool remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t id);

// Queues `callback` to run when the backward() or grad() running on this thread has run all its
// nodes, in queueing order (a callback may queue more). Only from inside a backward pass (a
// hook); elsewhere an AutogradError.
void queue_callback(std::function<void()> callback);
// Whether a backward pass runs on this thread now.
bool in_backward();

}  // namespace mg::autograd
