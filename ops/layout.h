// The output layout rules of the ops (docs/memory_format.md): which memory format an op's outputs
// are allocated in, decided from its inputs' strides before any kernel runs, the same on every
// device. Elementwise ops follow PyTorch's TensorIterator: the inputs that have the output's full
// 4-D shape vote with their suggested format (core/memory_format.h, size-1 dims included); the
// first vote decides, so inputs that agree keep their layout. Conv, batch norm and pooling keep their
// main input's layout.
//
//   InferResult r = infer_broadcast("add", in);   // r.outputs[0].format: ChannelsLast for NHWC a + b
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg {

// The format `t` carries into an op's output: ChannelsLast when its strides suggest it.
inline MemoryFormat layout_of(const Tensor& t) { return t.suggest_memory_format(); }
// The elementwise rule above, for an output of shape `out`.
MemoryFormat elementwise_layout(const Tensors& inputs, const Shape& out);

}  // namespace mg
