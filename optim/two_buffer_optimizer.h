// The body shared by optimizers whose update is one functor per element over a parameter, its
// gradient and two state buffers of the parameter's shape (Adamax, NAdam, RAdam, Adadelta): each
// parameter with a gradient gets its buffers (zero-filled at first use) and its step count; the
// host computes the scalars that depend only on the step (bias corrections, step sizes) once per
// parameter; CPU parameters are updated by fused chunk loops (multi-tensor or per parameter, the
// same bits), other devices by the generic path of public ops (optim/generic_path.h).
#pragma once
#include <string>
#include <vector>

#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/optim/generic_path.h"
#include "mixgrad/optim/multi_tensor.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

class TwoBufferOptimizer : public Optimizer {
 protected:
  using Optimizer::Optimizer;

  // make(t) -> Coeffs for the parameter's t-th update; chunk.template operator()<P>(slot, coeffs,
  // begin, end) updates elements [begin, end) of a CPU slot (state[0], state[1]: the buffers);
  // generic(work, buffer0, buffer1, opmath, coeffs) updates one parameter with public ops.
  template <typename Make, typename Chunk, typename Generic>
  void step_two_buffers(const ParamGroup& group, const char* buffer0, const char* buffer1, bool multi_tensor,
                        Make&& make, Chunk&& chunk, Generic&& generic) {
    const std::vector<Work> work = collect(group);
    Tensors params;
    for (const Work& w : work) params.push_back(w.param);
    if (use_generic_path(params)) {
      for (const Work& w : work) {
        const auto coeffs = make(++w.state->step);
        generic(w, buffer(w, buffer0, /*zero=*/true), buffer(w, buffer1, /*zero=*/true), opmath_dtype(w), coeffs);
      }
      return;
    }
    std::vector<TensorSlot> slots;
    std::vector<decltype(make(int64_t(1)))> coeffs;
    for (const Work& w : work) {
      TensorSlot slot = slot_of(w);
      slot.state[0] = buffer(w, buffer0, /*zero=*/true).data_ptr();
      slot.state[1] = buffer(w, buffer1, /*zero=*/true).data_ptr();
      slots.push_back(slot);
      coeffs.push_back(make(++w.state->step));
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
