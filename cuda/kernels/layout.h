// Which layout a CUDA kernel of a layout-keeping op (batch norm, pooling) runs in, NCHW or NHWC:
// the one its output was allocated in by the op's infer rule (ops/layout.h). Internal to cuda/.
#pragma once
#include "mixgrad/core/error.h"
#include "mixgrad/core/tensor.h"

namespace mg::cuda {

// True for NHWC: `out` is dense channels-last and either not dense NCHW or `in` suggests NHWC
// (a tensor with C = 1 or H = W = 1 is dense in both, with the same memory order in both, so the
// input's layout decides and no copy of it is made). `out` is always dense in one of the two.
inline bool launch_channels_last(const Tensor& out, const Tensor& in) {
  const bool nhwc = out.is_contiguous(MemoryFormat::ChannelsLast) &&
                    (!out.is_contiguous() || in.suggest_memory_format() == MemoryFormat::ChannelsLast);
  MG_ASSERT(nhwc || out.is_contiguous(), "an output dense in neither NCHW nor NHWC");
  return nhwc;
}
inline MemoryFormat launch_format(bool channels_last) {
  return channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

}  // namespace mg::cuda
