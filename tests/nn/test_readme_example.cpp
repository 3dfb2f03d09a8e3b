// The README's first example cannot rot: the ```cpp block under "## A first model" in README.md
// must be tests/nn/readme_first_model.inc byte for byte, and that file is compiled into this test
// (its main() renamed) and run. The same model is then checked: derived type names in the
// printed tree, parameter names, and the mixed-precision training loop lowering the loss.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <mixgrad/mixgrad.h>
#include "test_util.h"
#include "mg_test_paths.h"  // MG_SOURCE_DIR and the paths of the programs tests start

// In a namespace of its own: test_custom_module.cpp also defines a global `Block` (as a user
// would), and two different global classes of one name in one program break the ODR (ASan caught
// the README's Block running the other one's inline constructor).
namespace readme_example {
#define main readme_first_model_main
#include "nn/readme_first_model.inc"
#undef main
}  // namespace readme_example
using readme_example::Net;
using readme_example::readme_first_model_main;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO("reading " << path);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("README: the first example is tests/nn/readme_first_model.inc verbatim", "[nn][readme]") {
  const std::string readme = read_file(MG_SOURCE_DIR "/README.md");
  const std::string code = read_file(MG_SOURCE_DIR "/tests/nn/readme_first_model.inc");
  const std::size_t section = readme.find("\n## A first model\n");
  REQUIRE(section != std::string::npos);
  const std::string fence = "```cpp\n";
  const std::size_t start = readme.find(fence, section);
  REQUIRE(start != std::string::npos);
  // No other code block between the heading and this one.
  CHECK(readme.substr(section, start - section).find("```") == std::string::npos);
  const std::size_t body = start + fence.size();
  const std::size_t end = readme.find("\n```\n", body);
  REQUIRE(end != std::string::npos);
  CHECK(readme.substr(body, end + 1 - body) == code);
  // It is the first C++ example of the README.
  CHECK(readme.find(fence) == start);
}

TEST_CASE("README: the first example runs", "[nn][readme]") {
  CHECK(readme_first_model_main() == 0);
}

TEST_CASE("README: the example's model prints derived names and trains in f16 autocast", "[nn][readme]") {
  mg::manual_seed(0);
  Net net(16, 32, 4);
  CHECK(net.type_name() == "Net");
  CHECK(net.block->type_name() == "Block");
  CHECK(net.str() ==
        "Net(\n"
        "  (embed): Linear(in=16, out=32, bias=true)\n"
        "  (block): Block(\n"
        "    (norm): LayerNorm([32], eps=1e-05, elementwise_affine=true)\n"
        "    (fc1): Linear(in=32, out=128, bias=true)\n"
        "    (fc2): Linear(in=128, out=32, bias=true)\n"
        "  )\n"
        "  (head): Linear(in=32, out=4, bias=true)\n"
        ")");
  std::vector<std::string> keys;
  for (const auto& [name, t] : net.named_parameters()) keys.push_back(name);
  CHECK(keys == std::vector<std::string>{"temperature", "embed.weight", "embed.bias", "block.norm.weight",
                                         "block.norm.bias", "block.fc1.weight", "block.fc1.bias", "block.fc2.weight",
                                         "block.fc2.bias", "head.weight", "head.bias"});

  // The README's loop, shortened, with the values it prints checked.
  mg::Tensor x = mg::randn({256, 16});
  mg::Tensor y = x.matmul(mg::randn({16, 4})).argmax(1);
  mg::optim::AdamW opt(net.parameters(), {.lr = 3e-3});
  mg::amp::GradScaler scaler;
  std::vector<double> losses;
  double accuracy = 0;
  for (int step = 0; step < 30; ++step) {
    mg::Tensor logits, loss;
    {
      mg::amp::Autocast autocast({.dtype = mg::DType::F16});
      logits = net.forward(x);
      CHECK(net.block->fc1->forward(net.embed->forward(x)).dtype() == mg::DType::F16);  // Linear lowered
      loss = -logits.log_softmax(-1).gather(1, y.unsqueeze(1)).mean();
    }
    CHECK(loss.dtype() == mg::DType::F32);
    opt.zero_grad();
    scaler.scale(loss).backward();
    CHECK(scaler.step(opt));
    scaler.update();
    losses.push_back(loss.item<double>());
    accuracy = logits.argmax(1).eq(y).to(mg::DType::F32).mean().item<double>();
  }
  INFO("loss " << losses.front() << " -> " << losses.back() << ", accuracy " << accuracy);
  CHECK(losses.front() > 1.0);   // about log(4) = 1.39 at the start
  CHECK(losses.back() < 0.5 * losses.front());
  CHECK(accuracy > 0.8);
}
