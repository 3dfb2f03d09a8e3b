// fp32 master weights (Apex O2, DESIGN §5): the optimizer steps on an f32 copy of every f16/bf16
// parameter, so small updates are not rounded away, and copies the result back into the
// low-precision model parameter after each step in one fused pass.
//
// The one decision a reader must know: the masters are *the optimizer's* parameters — they
// replace the model's f16/bf16 tensors in the parameter groups (same positions), so optimizer
// state, the state dict and LR schedulers see f32 tensors and need no special case. The model
// keeps its own low-precision tensors; a MasterPair links the two.
//
//   optim::SGD opt(model->parameters(), {.lr = 0.1});   // model already cast to bf16
//   opt.use_master_weights();                           // groups now hold f32 masters
//   loss.backward(); opt.step();                        // master grads <- model grads; step; copy back
#pragma once
#include <vector>

#include "mixgrad/core/tensor.h"

namespace mg::optim {

// A low-precision model parameter and the f32 master the optimizer updates in its place.
struct MasterPair {
  Tensor model;   // f16 or bf16, owned by the model (its .grad receives the backward's gradient)
  Tensor master;  // f32 leaf that requires grad, owned by the optimizer
};

// Lays every master out as its model weight (same tensors, .grad kept): a model moved to
// channels-last after amp::initialize (Module::to(MemoryFormat)) takes its masters along. The
// passes below and the optimizer's state (re-laid on its next step) follow. Cheap when nothing
// changed (a stride comparison per pair).
void lay_masters_like_models(const std::vector<MasterPair>& pairs);

// model = master (rounded to the model's dtype) for every pair: one multi-tensor pass.
void copy_masters_to_model(const std::vector<MasterPair>& pairs);

// master.grad = f32(model.grad) for every pair whose model has a gradient, and none for the others
// (unscaled copy; an amp unscale writes the master gradients itself, fused with the inf/NaN
// check). One pass.
void copy_model_grads_to_masters(const std::vector<MasterPair>& pairs);

}  // namespace mg::optim
