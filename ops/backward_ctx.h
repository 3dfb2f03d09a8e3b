// What a backward rule sees: the op's attributes, the inputs/outputs it asked to save (version-
// checked on unpack), the inputs' shapes and dtypes, and which inputs need a gradient.
#pragma once
#include <vector>

#include "mixgrad/autograd/saved_tensor.h"
#include "mixgrad/ops/op.h"
#include "mixgrad/ops/op_rule.h"

namespace mg {

class BackwardCtx {
 public:
  BackwardCtx(OpId op, const OpAttrs& attrs, const std::vector<autograd::SavedTensor>& inputs,
              const std::vector<autograd::SavedTensor>& outputs, const std::vector<TensorMeta>& input_meta,
              const std::vector<TensorMeta>& output_meta, uint32_t needs_grad)
      : op_(op), attrs_(attrs), inputs_(inputs), outputs_(outputs), input_meta_(input_meta),
        output_meta_(output_meta), needs_grad_(needs_grad) {}

  const OpAttrs& attrs() const { return attrs_; }
  // A saved input/output; an internal error when the op's rule did not ask to save it.
  Tensor input(int i) const;
  Tensor output(int j) const;
  const Shape& input_shape(int i) const { return input_meta_.at(i).shape; }
  DType input_dtype(int i) const { return input_meta_.at(i).dtype; }
  // The memory format input i had (its suggest_memory_format when the op ran): backward ops
  // whose gradient cannot tell (a [N, C, 1, 1] grad is dense in both) lay dx out in it.
  MemoryFormat input_format(int i) const { return input_meta_.at(i).format; }
  Device input_device(int i) const { return input_meta_.at(i).device; }
  const Shape& output_shape(int j) const { return output_meta_.at(j).shape; }
  int num_inputs() const { return int(input_meta_.size()); }
  bool needs_grad(int i) const { return (needs_grad_ >> i) & 1u; }

 private:
  OpId op_;
  const OpAttrs& attrs_;
  const std::vector<autograd::SavedTensor>& inputs_;
  const std::vector<autograd::SavedTensor>& outputs_;
  const std::vector<TensorMeta>& input_meta_;
  const std::vector<TensorMeta>& output_meta_;
  uint32_t needs_grad_;
};

}  // namespace mg
