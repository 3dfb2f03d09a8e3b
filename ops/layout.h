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

// Dense layouts a parameter may have (PyTorch's channels_last models): contiguous, or a 4-D
// tensor dense in channels-last order. Optimizers, master weights and the AMP passes walk such a
// tensor, its gradient and its state as one flat array, which needs them in the same memory order.
inline bool is_dense_layout(const Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(MemoryFormat::ChannelsLast);
}
// Whether two tensors of one shape put every element at the same offset (strides compared where
// the size exceeds 1, so [C, K, 1, 1] contiguous and channels-last agree).
bool same_memory_order(const Tensor& a, const Tensor& b);
// `x` laid out as the dense tensor `like`: x itself when it already is (same_memory_order and
// dense), else a copy in like's format. The gradient layout contract: a channels-last parameter
// gets a channels-last gradient and state.
Tensor in_layout_of(const Tensor& x, const Tensor& like);

}  // namespace mg
