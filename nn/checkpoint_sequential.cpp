#include "mixgrad/nn/checkpoint_sequential.h"

namespace mg::nn {

Tensor checkpoint_sequential(Sequential& seq, int64_t segments, const Tensor& x, const CheckpointOptions& options) {
  const auto n = int64_t(seq.size());
  MG_CHECK(segments >= 1 && segments <= n, Error, "checkpoint_sequential: ", segments,
           " segments for a Sequential of ", n, " layers (1 to ", n, " allowed)");
  Tensor h = x;
  int64_t first = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const int64_t count = n / segments + (s < n % segments ? 1 : 0);
    const int64_t end = first + count;
    // The run holds its layers: the graph may outlive `seq`.
    std::vector<std::shared_ptr<UnaryModule>> layers;
    for (int64_t i = first; i < end; ++i) layers.push_back(seq[std::size_t(i)]);
    auto run = [layers](const Tensors& in) {
      Tensor y = in[0];
      for (const auto& l : layers) y = (*l)(y);
      return Tensors{y};
    };
    h = s + 1 < segments ? checkpoint(run, {h}, options)[0] : run({h})[0];
    first = end;
  }
  return h;
}

}  // namespace mg::nn
