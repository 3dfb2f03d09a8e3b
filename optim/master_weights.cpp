#include "mixgrad/optim/master_weights.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/multi_tensor.h"

namespace mg::optim {
namespace {

// Casts between the pairs' two sides chunk by chunk; `to_model` picks the direction. Every
// floating model dtype: a model moved to f64 after use_master_weights (Module::to keeps the
// tensor) is copied too, not skipped (its weights never moved, its masters read stale gradients).
void fused_cast(const std::vector<TensorSlot>& slots, bool to_model) {
  for_each_chunk(slots, /*fused=*/true, [&](int64_t, const TensorChunk& ch) {
    const TensorSlot& s = slots[std::size_t(ch.tensor)];
    visit_floating(s.dtype, "master weights", [&]<typename T>() {
      T* model = static_cast<T*>(s.param);
      float* master = static_cast<float*>(const_cast<void*>(s.grad));
      if (to_model) {
        for (int64_t k = ch.begin; k < ch.end; ++k) model[k] = static_cast<T>(master[k]);
      } else {
        for (int64_t k = ch.begin; k < ch.end; ++k) master[k] = static_cast<float>(model[k]);
      }
    });
  });
}

// The copies below write one tensor's memory from the other's on the host or one device: a model
// moved to another device after its masters were made (Module::to keeps the tensors, swapping
// their storage) would have a device pointer written on the host. Refused, naming the fix.
void check_same_devices(const std::vector<MasterPair>& pairs, const char* who) {
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    const MasterPair& p = pairs[k];
    MG_CHECK(p.model.device() == p.master.device(), DeviceError, who, ": model weight ", k, " (", describe(p.model),
             ") is on another device than its f32 master (", describe(p.master),
             "): the model was moved after the master weights were made",
             "\n  hint: move the model to its device before creating the optimizer and calling amp::initialize / "
             "use_master_weights");
  }
}

}  // namespace

void lay_masters_like_models(const std::vector<MasterPair>& pairs) {
  for (const MasterPair& p : pairs) {
    if (same_memory_order(p.master, p.model) || !is_dense_layout(p.model)) continue;
    NoGradGuard no_grad;
    const Tensor g = p.master.grad();
    p.master.set_data(in_layout_of(p.master.detach(), p.model));
    if (g.defined()) p.master.set_grad(in_layout_of(g, p.master));
  }
}

void copy_masters_to_model(const std::vector<MasterPair>& pairs) {
  check_same_devices(pairs, "master weights");
  lay_masters_like_models(pairs);
  Tensors masters;
  for (const MasterPair& p : pairs) masters.push_back(p.master);
  if (use_generic_path(masters)) {
    // Generic path (optim/generic_path.h): one copy_ per pair, the same round-to-nearest-even
    // conversion as the fused loop, so the model is bitwise the same.
    NoGradGuard no_grad;
    for (const MasterPair& p : pairs) Tensor(p.model).copy_(p.master);
    return;
  }
  std::vector<TensorSlot> slots;
  for (const MasterPair& p : pairs) {
    MG_ASSERT(is_dense_layout(p.model) && same_memory_order(p.model, p.master),
              "a master weight and its model weight must be dense in one memory order");
    slots.push_back({p.model.dtype(), p.model.numel(), p.model.data_ptr(), p.master.data_ptr(), {}});
  }
  fused_cast(slots, /*to_model=*/true);
  for (const MasterPair& p : pairs) p.model.bump_version();  // cached autocast casts of it are stale
}

void copy_model_grads_to_masters(const std::vector<MasterPair>& pairs) {
  check_same_devices(pairs, "master weights");
  lay_masters_like_models(pairs);
  std::vector<TensorSlot> slots;
  Tensors sources;  // keeps contiguous copies alive until the pass ran
  for (const MasterPair& p : pairs) {
    const Tensor g = p.model.grad();
    if (!g.defined()) {
      // No gradient this step (the model's were cleared): neither has the master, so the step
      // skips the parameter as it would an f32 one instead of reusing the last gradient.
      p.master.set_grad(Tensor());
      continue;
    }
    Tensor mg = p.master.grad();
    if (!mg.defined() || !same_memory_order(mg, p.master)) {  // in the master's layout (channels-last too)
      mg = empty(p.master.shape(),
                 {.dtype = DType::F32, .device = p.master.device(), .memory_format = layout_of(p.master)});
      p.master.set_grad(mg);
    }
    if (use_generic_path(g)) {
      NoGradGuard no_grad;
      mg.copy_(g);  // exact widening to f32, as the fused loop
      continue;
    }
    const Tensor src = sources.emplace_back(in_layout_of(g, p.master));
    slots.push_back({src.dtype(), src.numel(), src.data_ptr(), mg.data_ptr(), {}});
  }
  fused_cast(slots, /*to_model=*/false);
}

}  // namespace mg::optim
