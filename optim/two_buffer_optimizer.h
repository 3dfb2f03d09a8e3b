// The body shared by optimizers whose update is one functor per element over a parameter, its
// gradient and two state buffers of the parameter's shape (Adamax, NAdam, RAdam, Adadelta): each
// parameter with a gradient gets its buffers (zero-filled at first use) and its step count; the
// host computes the scalars that depend only on the step (bias corrections, step sizes) once per
// parameter; CPU parameters are updated by fused chunk loops (multi-tensor or per parameter, the
// same bits); a device with fused multi-tensor kernels (CUDA) runs the optimizer's kernel, which
// computes those scalars itself from the device step count (no host read, capturable into a CUDA
// graph); other devices take the generic path of public ops (optim/generic_path.h).
#pragma once
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/multi_tensor.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

class TwoBufferOptimizer : public Optimizer {
 protected:
  using Optimizer::Optimizer;
  bool has_fused_step() const override { return true; }

  // make(state, t) -> Coeffs for the parameter's t-th update (state: its ParamState before it);
  // commit(state, coeffs) then records what the update keeps besides the buffers (NAdam's
  // mu_product). chunk.template operator()<P>(slot, coeffs, begin, end) updates elements
  // [begin, end) of a CPU slot (state[0], state[1]: the buffers); generic(work, buffer0, buffer1,
  // opmath, coeffs) updates one parameter with public ops. fused(kernels, args, work) launches the
  // device's kernel: args holds the parameters, gradients, model copies, step counters and both
  // buffers as state[0] and state[1]; the step is counted afterwards. Every buffer and coefficient
  // is made before any step is counted, so a refusal there leaves every parameter's step as it was.
  template <typename Make, typename Commit, typename Chunk, typename Generic, typename Fused>
  void step_two_buffers(const ParamGroup& group, const char* buffer0, const char* buffer1, bool multi_tensor,
                        Make&& make, Commit&& commit, Chunk&& chunk, Generic&& generic, Fused&& fused) {
    const std::vector<Work> work = collect(group);
    MultiTensorStepArgs args;
    if (const MultiTensorKernels* k = fused_step_args(group, work, args)) {
      for (const Work& w : work) {
        args.state[0].push_back(buffer(w, buffer0, /*zero=*/true));
        args.state[1].push_back(buffer(w, buffer1, /*zero=*/true));
      }
      fused(*k, args, work);
      finish_fused_step(work, k, args);
      return;
    }
    std::vector<std::array<Tensor, 2>> buffers;
    std::vector<decltype(make(std::declval<const ParamState&>(), int64_t(1)))> coeffs;
    for (const Work& w : work) {
      buffers.push_back({buffer(w, buffer0, /*zero=*/true), buffer(w, buffer1, /*zero=*/true)});
      coeffs.push_back(make(*w.state, w.state->step + 1));
    }
    for (std::size_t i = 0; i < work.size(); ++i) {
      ++work[i].state->step;
      commit(*work[i].state, coeffs[i]);
    }
    Tensors params;
    for (const Work& w : work) params.push_back(w.param);
    if (use_generic_path(params)) {
      for (std::size_t i = 0; i < work.size(); ++i)
        generic(work[i], buffers[i][0], buffers[i][1], opmath_dtype(work[i]), coeffs[i]);
      return;
    }
    std::vector<TensorSlot> slots;
    for (std::size_t i = 0; i < work.size(); ++i) {
      TensorSlot slot = slot_of(work[i]);
      slot.state[0] = buffers[i][0].data_ptr();
      slot.state[1] = buffers[i][1].data_ptr();
      slots.push_back(slot);
    }
    for_each_chunk(slots, multi_tensor, [&](int64_t, const TensorChunk& c) {
      const TensorSlot& t = slots[c.tensor];
      visit_floating(t.dtype, name().c_str(),
                     [&]<typename P>() { chunk.template operator()<P>(t, coeffs[c.tensor], c.begin, c.end); });
    });
    for (const Work& w : work) w.param.bump_version();
  }
};

}  // namespace mg::optim
