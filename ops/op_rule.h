// The per-op rules the dispatcher needs besides the op list: output shape/dtype inference (or,
// for view ops, how to build the aliasing view), the backward rule, and which inputs/outputs the
// backward needs saved. Each op group registers its rules next to its math (ops/elementwise.cpp,
// ops/reduce.cpp, ...), from register_op_rules().
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/op.h"

namespace mg {

class BackwardCtx;

struct TensorMeta {
  Shape shape;
  DType dtype;
  // The layout the dispatcher allocates the output in (ops/layout.h has the rules); kernels
  // write through the output's strides or branch on its format.
  MemoryFormat format = MemoryFormat::Contiguous;
  // The device the tensor lived on (inputs of a recorded op; a move's backward returns there).
  Device device = Device::cpu();
};

struct InferResult {
  std::vector<TensorMeta> outputs;
  DType kernel_dtype;  // selects the kernel in the registry
};

using InferFn = InferResult (*)(const Tensors& inputs, const OpAttrs& attrs);
using ViewFn = Tensor (*)(const Tensor& input, const OpAttrs& attrs);
// Returns one gradient per input (undefined where none is needed). Gradients may have the
// broadcast shape or another dtype: the dispatcher sums them to the input's shape and casts them
// to the input's dtype.
using BackwardFn = Tensors (*)(const BackwardCtx& ctx, const Tensors& grad_outputs);
// Given a bit mask of the inputs that need a gradient, returns what to save (kSaveInput/Output).
using SaveFn = uint32_t (*)(uint32_t needs_input_grad);

constexpr uint32_t kSaveInput(int i) { return 1u << i; }
constexpr uint32_t kSaveOutput(int j) { return 1u << (16 + j); }

struct OpRule {
  InferFn infer = nullptr;   // compute ops
  ViewFn view = nullptr;     // view ops (no kernel, output aliases input 0)
  BackwardFn backward = nullptr;
  uint32_t save = 0;         // constant save mask, used when saves is null
  SaveFn saves = nullptr;
};

void set_op_rule(OpId op, const OpRule& rule);
const OpRule& op_rule(OpId op);
bool has_op_rule(OpId op);

}  // namespace mg
