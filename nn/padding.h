// A padding layer over ops/pad.h: one module, Pad, for PyTorch's ZeroPad/ConstantPad/ReflectionPad/
// ReplicationPad/CircularPad 1d/2d/3d, which differ only in the number of amounts and the mode;
// those fifteen names are Pad under PyTorch's name, options and input ranks (PadLayer below).
//
//   auto reflect = nn::make<nn::Pad>({.pad = {1, 1, 1, 1}, .mode = mg::PadMode::Reflect});  // ReflectionPad2d(1)
//   auto zeros = nn::make<nn::Pad>({.pad = {0, 0, 2, 0}});                                    // ZeroPad2d((0, 0, 2, 0))
//   auto same = nn::make<nn::ReflectionPad2d>({.padding = {1}});                              // PyTorch's name
#pragma once
#include <string>
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
  explicit Pad(Options options) : Pad("Pad", std::move(options)) {}
  Tensor forward(const Tensor& x) override { return pad(x, options_.pad, options_.mode, options_.value); }
  const Options& options() const { return options_; }

 protected:
  Pad(std::string name, Options options);
  std::string extra_repr() const override;

 private:
  Options options_;
};

// The options of PyTorch's named padding layers: one amount for every side, or (before, after)
// per padded dim, last dim first (2 per dim); `value` for ConstantPad only.
struct PadLayerOptions {
  std::vector<int64_t> padding;
  double value = 0.0;
};

enum class PadLayerKind { Zero, Constant, Reflection, Replication, Circular };

namespace detail {
// PyTorch's class name, e.g. "ReflectionPad2d".
std::string pad_layer_name(PadLayerKind kind, int dims);
// Pad's options for a named layer: the amounts expanded to 2 * dims, the mode, the value.
PadOptions pad_layer_options(PadLayerKind kind, int dims, const PadLayerOptions& o);
// Refuses an input of a rank PyTorch's layer refuses: the reflect, replicate and circular pads
// take [C, ...] or [N, C, ...] (dims + 1 or dims + 2 dims); zero and constant pads at least dims.
void check_pad_layer_input(const std::string& name, PadLayerKind kind, int dims, const Tensor& x);
}  // namespace detail

// ZeroPad1d ... CircularPad3d: Pad under PyTorch's name (repr "ReflectionPad2d(padding=(1, 1, 1, 1))").
template <PadLayerKind Kind, int Dims>
class PadLayer : public Pad {
 public:
  using Options = PadLayerOptions;
  explicit PadLayer(Options options)
      : Pad(detail::pad_layer_name(Kind, Dims), detail::pad_layer_options(Kind, Dims, options)) {}
  Tensor forward(const Tensor& x) override {
    detail::check_pad_layer_input(layer_name(), Kind, Dims, x);
    return detail::with_layer_name(*this, [&] { return Pad::forward(x); });
  }

 protected:
  std::string extra_repr() const override {
    std::string s = "padding=(";
    for (std::size_t i = 0; i < options().pad.size(); ++i) s += str_cat(i ? ", " : "", options().pad[i]);
    s += ")";
    if (Kind == PadLayerKind::Constant) s += str_cat(", value=", options().value);
    return s;
  }
};

using ZeroPad1d = PadLayer<PadLayerKind::Zero, 1>;
using ZeroPad2d = PadLayer<PadLayerKind::Zero, 2>;
using ZeroPad3d = PadLayer<PadLayerKind::Zero, 3>;
using ConstantPad1d = PadLayer<PadLayerKind::Constant, 1>;
using ConstantPad2d = PadLayer<PadLayerKind::Constant, 2>;
using ConstantPad3d = PadLayer<PadLayerKind::Constant, 3>;
using ReflectionPad1d = PadLayer<PadLayerKind::Reflection, 1>;
using ReflectionPad2d = PadLayer<PadLayerKind::Reflection, 2>;
using ReflectionPad3d = PadLayer<PadLayerKind::Reflection, 3>;
using ReplicationPad1d = PadLayer<PadLayerKind::Replication, 1>;
using ReplicationPad2d = PadLayer<PadLayerKind::Replication, 2>;
using ReplicationPad3d = PadLayer<PadLayerKind::Replication, 3>;
using CircularPad1d = PadLayer<PadLayerKind::Circular, 1>;
using CircularPad2d = PadLayer<PadLayerKind::Circular, 2>;
using CircularPad3d = PadLayer<PadLayerKind::Circular, 3>;

}  // namespace mg::nn
