// The small model of the amp scenario and numerics tests: fc2(tanh(fc1(x))), x [B, in] -> [B, out].
// tanh rather than relu so that a gradient penalty's double backward has non-zero second
// derivatives.
#pragma once
#include <cstdint>
#include <memory>

#include "nn/nn.h"
#include "ops/ops.h"

namespace mg::test {

struct Mlp : nn::Module {
  Mlp(int64_t in, int64_t hidden, int64_t out) : Module("Mlp") {
    fc1 = register_module<nn::Linear>("fc1", {.in = in, .out = hidden});
    fc2 = register_module<nn::Linear>("fc2", {.in = hidden, .out = out});
  }
  Tensor forward(const Tensor& x) { return (*fc2)(tanh((*fc1)(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace mg::test
