// nn::TransformerEncoderLayer in f64 against torch.nn.TransformerEncoderLayer (PyTorch 1.13,
// float64, train mode with dropout 0, written by tools/reference/gen_reference.py): the state dict
// is loaded by PyTorch's names, then the output, the input gradient and every parameter's gradient
// of sum(y * gy) are compared — post- and pre-norm, ReLU and GELU, a key padding mask and a causal
// float mask.
#include <catch2/catch.hpp>

#include <string>

#include "autograd/engine.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "reference/reference_file.h"

using namespace mg;

TEST_CASE("TransformerEncoderLayer output and gradients match PyTorch", "[reference][nn]") {
  const test::ReferenceFile f = test::load_reference("transformer_encoder_layer.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      nn::TransformerEncoderLayer layer({.d_model = 8,
                                         .nhead = 2,
                                         .dim_feedforward = 16,
                                         .dropout = 0.0,
                                         .activation = f.int_value(c + ".gelu") ? nn::Activation::GELU
                                                                                : nn::Activation::ReLU,
                                         .norm_first = f.int_value(c + ".norm_first") != 0});
      layer.to(DType::F64);
      // Load by PyTorch's names: the same 12 keys, so a strict load must succeed.
      nn::NamedTensors state;
      for (const auto& [name, p] : layer.named_parameters()) state.emplace_back(name, f.tensor(c + "." + name));
      layer.load_state_dict(state);

      const Tensor mask = f.has(c + ".src_mask") ? f.tensor(c + ".src_mask") : Tensor();
      const Tensor pad = f.has(c + ".src_key_padding_mask") ? ne(f.tensor(c + ".src_key_padding_mask"),
                                                                 scalar_like(0, f.tensor(c + ".src_key_padding_mask")))
                                                            : Tensor();
      Tensor x = f.tensor(c + ".x");
      x.requires_grad_();
      const Tensor y = layer.forward(x, mask, pad);
      test::check_reference(y, f, c + ".y", 1e-10);

      Tensors inputs = {x};
      std::vector<std::string> names;
      for (const auto& [name, p] : layer.named_parameters()) {
        inputs.push_back(p);
        names.push_back(name);
      }
      const Tensors g = autograd::grad({sum(y * f.tensor(c + ".gy"))}, inputs);
      test::check_reference(g[0], f, c + ".dx", 1e-10);
      for (std::size_t i = 0; i < names.size(); ++i) {
        INFO("parameter " << names[i]);
        test::check_reference(g[i + 1], f, c + ".grad." + names[i], 1e-10);
      }
    }
  }
}
