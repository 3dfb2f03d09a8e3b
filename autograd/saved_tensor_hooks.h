// Saved-tensor hooks (PyTorch's torch.autograd.graph.saved_tensors_hooks): while a
// SavedTensorHooks guard is alive on a thread, every tensor an op saves for backward on that thread
// goes through `pack`, and the graph keeps only what `pack` returned; `unpack` turns it back into
// the tensor when the backward needs it. This is how a graph can keep its activations somewhere
// else, or not at all (non-reentrant activation checkpointing, ops/checkpoint.h, recomputes them).
//
//   mg::autograd::SavedTensorHooks hooks(
//       [](const mg::Tensor& t) -> std::any { return t.to(mg::Device::cpu()); },   // offload
//       [gpu](const std::any& p) { return std::any_cast<const mg::Tensor&>(p).to(gpu); });
//   mg::Tensor loss = model.forward(x).sum();   // what forward saves lives on the CPU
//
// Rules a reader must know:
// - Guards nest; the innermost one applies. They are per thread, like grad mode.
// - A leaf that requires grad (a parameter) is saved as itself, without the hooks: it stays alive
//   anyway, and its gradient must reach that very tensor.
// - Pack receives a history-free alias of the tensor (keeping it keeps the memory, not the graph),
//   and both hooks run with grad mode off and no hooks in force.
// - What unpack returns must have the saved tensor's shape, dtype and device (an AutogradError
//   otherwise); it gets the saved tensor's history back, so double backward works through it.
// - The in-place check still holds: while the tensor that was packed is alive, writing into it in
//   place makes its unpack an AutogradError, as without hooks (PyTorch drops that check).
// - The hooks are kept by every tensor they packed: whatever they capture lives until those
//   graphs are freed.
#pragma once
#include <any>
#include <functional>
#include <memory>

#include "mixgrad/core/tensor.h"

namespace mg::autograd {

using PackHook = std::function<std::any(const Tensor&)>;
using UnpackHook = std::function<Tensor(const std::any&)>;

struct SavedTensorHookPair {
  PackHook pack;
  UnpackHook unpack;
};

// Installs pack/unpack for this thread until destroyed (restoring the previous pair).
class SavedTensorHooks {
 public:
  SavedTensorHooks(PackHook pack, UnpackHook unpack);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;

 private:
  std::shared_ptr<const SavedTensorHookPair> previous_;
};

// The pair in force on this thread (null: none).
const std::shared_ptr<const SavedTensorHookPair>& current_saved_tensor_hooks();

// No hooks in force for a scope (then the previous pair again). Pack and unpack run under it, so
// what they compute saves nothing through themselves.
class NoSavedTensorHooks {
 public:
  NoSavedTensorHooks();
  ~NoSavedTensorHooks();
  NoSavedTensorHooks(const NoSavedTensorHooks&) = delete;
  NoSavedTensorHooks& operator=(const NoSavedTensorHooks&) = delete;

 private:
  std::shared_ptr<const SavedTensorHookPair> previous_;
};

// Tensors saved while it lives are packed as copies on the CPU (page-locked with pin_memory, so
// the copies back overlap compute) and copied back to their device when backward needs them:
// PyTorch's torch.autograd.graph.save_on_cpu. Activations of a GPU model then take host memory
// instead of device memory. A tensor already on the CPU is kept as it is (no copy).
class SaveOnCpu {
 public:
  explicit SaveOnCpu(bool pin_memory = false);

 private:
  SavedTensorHooks hooks_;
};

}  // namespace mg::autograd
