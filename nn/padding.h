// A padding layer over ops/pad.h: one module for PyTorch's ZeroPad/ConstantPad/ReflectionPad/
// ReplicationPad/CircularPad 1d/2d/3d, which differ only in the number of amounts and the mode.
//
//   auto reflect = nn::make<nn::Pad>({.pad = {1, 1, 1, 1}, .mode = mg::PadMode::Reflect});  // ReflectionPad2d(1)
//   auto zeros = nn::make<nn::Pad>({.pad = {0, 0, 2, 0}});                                    // ZeroPad2d((0, 0, 2, 0))
#pragma once
#include <vector>

#include "mixgrad/nn/module.h"
#include "mixgrad/ops/pad.h"

namespace mg::nn {

struct PadOptions {
  std::vector<int64_t> pad;  // (before, after) per dim, last dim first; an even count
  PadMode mode = PadMode::Constant;
  double value = 0.0;  // Constant only
};

class Pad : public UnaryModule {
 public:
  using Options = PadOptions;
  explicit Pad(Options options);
  Tensor forward(const Tensor& x) override { return pad(x, options_.pad, options_.mode, options_.value); }
  const Options& options() const { return options_; }

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

}  // namespace mg::nn
