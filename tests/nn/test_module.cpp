// nn::Module: registration, dotted names, traversal, train/eval, to(dtype) with kept module
// types, zero_grad, state dict round trip and strict-load errors, the printed tree.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/embedding_bag.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "core/generator.h"
#include "nn/module.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

// Stand-ins for real layers (the layer library comes with the nn issue).
struct Affine : nn::Module {
  Affine(int64_t in, int64_t out, bool bias = true) : Module("Affine"), in_(in), out_(out) {
    weight = register_parameter("weight", full({out, in}, 0.5));
    if (bias) this->bias = register_parameter("bias", zeros({out}));
  }
  Tensor forward(const Tensor& x) const { return linear(x, weight, bias); }
  std::string extra_repr() const override {
    return str_cat("in=", in_, ", out=", out_, ", bias=", bias.defined() ? "true" : "false");
  }
  Tensor weight, bias;
  int64_t in_, out_;
};

struct Norm : nn::Module {
  explicit Norm(int64_t c) : Module("Norm") {
    weight = register_parameter("weight", ones({c}));
    running_mean = register_buffer("running_mean", zeros({c}));
  }
  Tensor weight, running_mean;
};

struct Block : nn::Module {
  Block() : Module("Block") {
    fc = register_module("fc", std::make_shared<Affine>(3, 2));
    norm = register_module("norm", std::make_shared<Norm>(2));
  }
  std::shared_ptr<Affine> fc;
  std::shared_ptr<Norm> norm;
};

struct Net : nn::Module {
  Net() : Module("Net") {
    layer1 = register_module("layer1", std::make_shared<Block>());
    head = register_module("head", std::make_shared<Affine>(2, 1, false));
  }
  std::shared_ptr<Block> layer1;
  std::shared_ptr<Affine> head;
};

std::vector<std::string> names(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("named parameters, buffers and modules use dotted paths in registration order", "[nn][module]") {
  Net net;
  REQUIRE(names(net.named_parameters()) ==
          std::vector<std::string>{"layer1.fc.weight", "layer1.fc.bias", "layer1.norm.weight", "head.weight"});
  REQUIRE(names(net.named_buffers()) == std::vector<std::string>{"layer1.norm.running_mean"});
  std::vector<std::string> mods;
  for (auto& [n, m] : net.named_modules()) mods.push_back(n + ":" + m->type_name());
  REQUIRE(mods == std::vector<std::string>{":Net", "layer1:Block", "layer1.fc:Affine", "layer1.norm:Norm", "head:Affine"});
  REQUIRE(net.num_parameters() == 6 + 2 + 2 + 2);
  REQUIRE(net.parameters()[0].is_same(net.layer1->fc->weight));
  REQUIRE(net.parameters()[0].requires_grad());
  REQUIRE(!net.buffers()[0].requires_grad());
}

TEST_CASE("registration errors", "[nn][module][errors]") {
  Affine a(2, 2);
  MG_REQUIRE_ERROR(a.register_parameter("weight", zeros({1})), "Affine: parameter name \"weight\" is already registered");
  MG_REQUIRE_ERROR(a.register_buffer("a.b", zeros({1})), "Affine: buffer name \"a.b\" must be non-empty and contain no '.'");
  MG_REQUIRE_ERROR(a.register_parameter("idx", arange(0, 3)), "Affine: parameter \"idx\" must be floating, got [3] i64 cpu");
}

TEST_CASE("train and eval propagate to children", "[nn][module]") {
  Net net;
  REQUIRE(net.layer1->norm->is_training());
  net.eval();
  REQUIRE(!net.is_training());
  REQUIRE(!net.layer1->norm->is_training());
  net.train();
  REQUIRE(net.head->is_training());
}

TEST_CASE("to(dtype) converts in place and can keep chosen module types in f32", "[nn][module]") {
  Net net;
  const Tensor w = net.layer1->fc->weight;  // a handle taken before the cast
  net.to(DType::F16, [](const nn::Module& m) { return m.type_name() == "Norm"; });
  REQUIRE(w.dtype() == DType::F16);  // the same parameter, converted in place
  REQUIRE(net.layer1->fc->bias.dtype() == DType::F16);
  REQUIRE(net.head->weight.dtype() == DType::F16);
  REQUIRE(net.layer1->norm->weight.dtype() == DType::F32);
  REQUIRE(net.layer1->norm->running_mean.dtype() == DType::F32);
  REQUIRE(w.requires_grad());
  // the converted layer still trains: an f16 forward gives f16 gradients to f16 parameters
  const Tensor y = net.layer1->fc->forward(ones({4, 3}, {.dtype = DType::F16}));
  y.sum().backward();
  REQUIRE(w.grad().dtype() == DType::F16);
  REQUIRE(values(w.grad()) == std::vector<double>(6, 4.0));
}

TEST_CASE("zero_grad clears or zeroes gradients", "[nn][module]") {
  Affine a(3, 2);
  a.forward(ones({1, 3})).sum().backward();
  REQUIRE(a.weight.grad().defined());
  a.zero_grad(/*set_to_none=*/false);
  REQUIRE(values(a.weight.grad()) == std::vector<double>(6, 0.0));
  a.zero_grad();
  REQUIRE(!a.weight.grad().defined());
  // A gradient with history (create_graph) is replaced by zeros without history, not zeroed in
  // place (the next backward would add into the old graph's tensor), as the optimizers do.
  const Tensor loss = (a.forward(ones({1, 3})) * a.forward(ones({1, 3}))).sum();
  autograd::backward({loss}, {}, /*retain_graph=*/false, /*create_graph=*/true);
  REQUIRE(a.weight.grad().grad_fn());
  a.zero_grad(/*set_to_none=*/false);
  CHECK(!a.weight.grad().grad_fn());
  CHECK(values(a.weight.grad()) == std::vector<double>(6, 0.0));
}

TEST_CASE("a buffer registered in two modules is one tensor: listed once, converted once", "[nn][module]") {
  struct Holder : nn::Module {
    explicit Holder(const Tensor& shared) : Module("Holder") { buf = register_buffer("buf", shared); }
    Tensor buf;
  };
  struct Pair : nn::Module {
    Pair() : Module("Pair") {
      const Tensor shared = zeros({3});
      a = register_module("a", std::make_shared<Holder>(shared));
      b = register_module("b", std::make_shared<Holder>(shared));
    }
    std::shared_ptr<Holder> a, b;
  };
  Pair p;
  CHECK(p.buffers().size() == 1);
  CHECK(p.state_dict().size() == 2);  // every name of a shared tensor, as PyTorch
  p.to(DType::F64);
  CHECK(p.a->buf.is_same(p.b->buf));
  CHECK(p.b->buf.dtype() == DType::F64);
}

TEST_CASE("state dict round trip", "[nn][module]") {
  Net src, dst;
  {
    NoGradGuard no_grad;
    src.layer1->fc->weight.copy_(arange(0, 6, 1, {.dtype = DType::F32}).view({2, 3}));
    src.layer1->norm->running_mean.fill_(7.0);
  }
  const nn::NamedTensors sd = src.state_dict();
  REQUIRE(names(sd).size() == 5);
  const Tensor handle = dst.layer1->fc->weight;
  dst.load_state_dict(sd);
  REQUIRE(values(handle) == std::vector<double>{0, 1, 2, 3, 4, 5});  // loaded into the same parameter
  REQUIRE(values(dst.layer1->norm->running_mean) == std::vector<double>{7, 7});
  REQUIRE(handle.storage().data() != src.layer1->fc->weight.storage().data());  // a copy, not an alias
  // values are cast to the destination's dtype
  Net half;
  half.to(DType::BF16);
  half.load_state_dict(sd);
  REQUIRE(half.layer1->fc->weight.dtype() == DType::BF16);
  REQUIRE(values(half.layer1->fc->weight) == std::vector<double>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("load_state_dict writes into each tensor's memory and keeps its layout", "[nn][module][memory_format]") {
  // A captured CUDA graph holds the parameters' addresses, so loading must not move them.
  nn::Conv2d conv({.in = 3, .out = 4, .kernel = 3});
  conv.weight.set_data(conv.weight.to(MemoryFormat::ChannelsLast));
  const void* address = conv.weight.data_ptr();
  const uint64_t version = conv.weight.version();
  nn::Conv2d src({.in = 3, .out = 4, .kernel = 3});
  conv.load_state_dict(src.state_dict());
  CHECK(conv.weight.data_ptr() == address);
  CHECK(conv.weight.is_contiguous(MemoryFormat::ChannelsLast));
  CHECK_FALSE(conv.weight.is_contiguous());
  CHECK(values(conv.weight) == values(src.weight));
  CHECK(values(conv.bias) == values(src.bias));
  CHECK(conv.weight.version() > version);  // a graph saved for backward before the load refuses to run
  CHECK(conv.weight.requires_grad());
  CHECK(conv.weight.grad_fn() == nullptr);
  // Loading a module's own state is harmless.
  const std::vector<double> before = values(conv.weight);
  conv.load_state_dict(conv.state_dict());
  CHECK(values(conv.weight) == before);
  CHECK(conv.weight.data_ptr() == address);
}

TEST_CASE("state_dict hands out detached aliases: the model's memory, no gradient", "[nn][module]") {
  // PyTorch's state_dict: an in-place edit through an entry changes the model (and is allowed:
  // the entry requires no gradient), and the entry leaves the parameter's autograd alone.
  Affine layer(2, 3);
  const nn::NamedTensors sd = layer.state_dict();
  REQUIRE(sd.size() == 2);
  CHECK(sd[0].first == "weight");
  Tensor w = sd[0].second;
  CHECK_FALSE(w.requires_grad());
  CHECK(w.data_ptr() == layer.weight.data_ptr());
  CHECK(layer.weight.requires_grad());
  const uint64_t version = layer.weight.version();
  w.mul_(2.0);
  CHECK(values(layer.weight) == std::vector<double>(6, 1.0));
  CHECK(layer.weight.version() > version);  // shared version counter: saved graphs see the edit
  CHECK_THROWS(layer.weight.mul_(2.0));  // the parameter itself: a leaf that requires grad
}

TEST_CASE("strict loading lists every problem and changes nothing", "[nn][module][errors]") {
  Net net;
  nn::NamedTensors sd = net.state_dict();
  sd.erase(sd.begin());                                        // missing layer1.fc.weight
  sd.emplace_back("layer1.extra", zeros({1}));                 // unexpected
  sd[0].second = zeros({5});                                    // layer1.fc.bias: wrong shape
  const std::vector<double> before = values(net.layer1->norm->weight);
  const std::string msg = mg::test::error_of([&] { net.load_state_dict(sd); });
  REQUIRE_THAT(msg, Catch::Matchers::Contains("Net.load_state_dict: the state does not match the module; nothing was loaded"));
  REQUIRE_THAT(msg, Catch::Matchers::Contains("missing keys (1):\n    layer1.fc.weight"));
  REQUIRE_THAT(msg, Catch::Matchers::Contains("unexpected keys (1):\n    layer1.extra"));
  REQUIRE_THAT(msg, Catch::Matchers::Contains("shape mismatches (1):\n    layer1.fc.bias: checkpoint [5] f32 cpu, model [2] f32 cpu"));
  REQUIRE_THAT(msg, Catch::Matchers::Contains("hint: the checkpoint was saved from a different architecture"));
  REQUIRE(values(net.layer1->norm->weight) == before);
  // non-strict: missing/unexpected keys are allowed (and returned), shape mismatches are not
  sd[0].second = zeros({2});
  const nn::Module::LoadResult skipped = net.load_state_dict(sd, /*strict=*/false);
  REQUIRE(values(net.layer1->fc->bias) == std::vector<double>{0, 0});
  CHECK(skipped.missing_keys == std::vector<std::string>{"layer1.fc.weight"});
  CHECK(skipped.unexpected_keys == std::vector<std::string>{"layer1.extra"});
}

TEST_CASE("the module tree prints like PyTorch's repr", "[nn][module]") {
  Net net;
  REQUIRE(net.str() ==
          "Net(\n"
          "  (layer1): Block(\n"
          "    (fc): Affine(in=3, out=2, bias=true)\n"
          "    (norm): Norm()\n"
          "  )\n"
          "  (head): Affine(in=2, out=1, bias=false)\n"
          ")");
}

TEST_CASE("a module or tensor shared under two names is listed once, and the state dict keeps both names",
          "[nn][module]") {
  // PyTorch: nn.Sequential(lin, nn.ReLU(), lin) has 2 parameters (12 values) and trains with SGD.
  auto lin = std::make_shared<Affine>(3, 3);
  struct Twice : nn::Module {
    explicit Twice(std::shared_ptr<Affine> a) : Module("Twice") {
      first = register_module("first", a);
      second = register_module("second", a);
      tied = register_parameter("tied", a->weight);  // a tied weight: the same tensor again
    }
    std::shared_ptr<Affine> first, second;
    Tensor tied;
  } net(lin);
  REQUIRE(net.tied.is_same(lin->weight));
  // own parameters first (as PyTorch): the tied weight's first name is "tied"
  CHECK(names(net.named_parameters()) == std::vector<std::string>{"tied", "first.bias"});
  CHECK(net.num_parameters() == 12);
  std::vector<std::string> mods;
  for (auto& [n, m] : net.named_modules()) mods.push_back(n);
  CHECK(mods == std::vector<std::string>{"", "first"});
  const nn::NamedTensors sd = net.state_dict();
  CHECK(names(sd) == std::vector<std::string>{"tied", "first.weight", "first.bias", "second.weight", "second.bias"});
  net.load_state_dict(sd);  // every name loads (into the same tensors)
  optim::SGD opt(net.parameters(), {.lr = 0.5});
  sum(net.second->forward(ones({1, 3}))).backward();
  opt.step();  // each shared parameter stepped once: bias 0 - 0.5 * 1
  CHECK(values(lin->bias) == std::vector<double>(3, -0.5));
}

TEST_CASE("to(dtype) and to(device) keep the accumulated gradients, converted, as PyTorch", "[nn][module]") {
  Net net;
  sum(net.layer1->fc->forward(ones({2, 3}))).backward();
  const std::vector<double> g = values(net.layer1->fc->weight.grad());
  net.to(DType::F64);
  REQUIRE(net.layer1->fc->weight.grad().defined());
  CHECK(net.layer1->fc->weight.grad().dtype() == DType::F64);
  CHECK(values(net.layer1->fc->weight.grad()) == g);
  CHECK(!net.head->weight.grad().defined());  // none before, none after
  net.to(Device::cpu());
  CHECK(values(net.layer1->fc->weight.grad()) == g);
}

TEST_CASE("state_dict lists each module's parameters, then its buffers, then its children's, as PyTorch",
          "[nn][module]") {
  // PyTorch: a module with buffer rb, parameter w, child c (Linear), a non-persistent buffer tmp and
  // parameter z (registered in that order) gives ['w', 'z', 'rb', 'c.weight', 'c.bias'].
  struct Mixed : nn::Module {
    Mixed() : Module("Mixed") {
      rb = register_buffer("rb", zeros({1}));
      w = register_parameter("w", ones({1}));
      c = register_module("c", std::make_shared<Affine>(1, 1));
      tmp = register_buffer("tmp", zeros({2}), /*persistent=*/false);
      z = register_parameter("z", ones({1}));
    }
    Tensor rb, w, tmp, z;
    std::shared_ptr<Affine> c;
  } m;
  CHECK(names(m.state_dict()) == std::vector<std::string>{"w", "z", "rb", "c.weight", "c.bias"});
  // A non-persistent buffer is still a buffer: listed, and converted by to().
  CHECK(names(m.named_buffers()) == std::vector<std::string>{"rb", "tmp"});
  m.to(DType::F64);
  CHECK(m.tmp.dtype() == DType::F64);
  // load_state_dict neither expects it nor accepts it (PyTorch: unexpected_keys=['tmp']).
  m.load_state_dict(m.state_dict());
  nn::NamedTensors with_tmp = m.state_dict();
  with_tmp.emplace_back("tmp", ones({2}));
  MG_REQUIRE_ERROR(m.load_state_dict(with_tmp), "unexpected keys (1):\n    tmp");
  const auto skipped = m.load_state_dict(with_tmp, /*strict=*/false);
  CHECK(skipped.unexpected_keys == std::vector<std::string>{"tmp"});
  CHECK(values(m.tmp) == std::vector<double>{0, 0});
  Net net;  // the nested example: own tensors before the children's at every level
  CHECK(names(net.state_dict()) == std::vector<std::string>{"layer1.fc.weight", "layer1.fc.bias", "layer1.norm.weight",
                                                            "layer1.norm.running_mean", "head.weight"});
}

TEST_CASE("children() lists a child registered under two names once, under its first name", "[nn][module]") {
  // PyTorch: [n for n, _ in nn.Sequential(lin, nn.ReLU(), lin).named_children()] == ['0', '1'].
  auto lin = std::make_shared<Affine>(2, 2);
  struct Twice : nn::Module {
    explicit Twice(const std::shared_ptr<Affine>& a) : Module("Twice") {
      register_module("a", a);
      register_module("n", std::make_shared<Norm>(2));
      register_module("b", a);
    }
  } net(lin);
  std::vector<std::string> seen;
  for (const auto& [name, child] : net.named_children()) seen.push_back(name);
  CHECK(seen == std::vector<std::string>{"a", "n"});
  REQUIRE(net.children().size() == 2);
  CHECK(net.children()[0] == lin);
}

TEST_CASE("load_state_dict: batch norm without num_batches_tracked, and a [1] value for a 0-d buffer, load as PyTorch's",
          "[nn][module]") {
  // PyTorch: bn.load_state_dict(sd without num_batches_tracked) matches all keys and keeps the
  // counter; a [1] tensor for the 0-d counter is taken as its element.
  nn::BatchNorm1d bn({.features = 2});
  {
    NoGradGuard no_grad;
    bn.num_batches_tracked.fill_(3.0);
  }
  nn::NamedTensors sd = bn.state_dict();
  for (auto& [name, t] : sd) t = t.clone();
  sd.pop_back();
  REQUIRE(sd.size() == 4);
  const auto result = bn.load_state_dict(sd);
  CHECK(result.missing_keys.empty());
  CHECK(bn.num_batches_tracked.item<int64_t>() == 3);
  sd.emplace_back("num_batches_tracked", from_vector<int64_t>({7}, {1}));
  bn.load_state_dict(sd);
  CHECK(bn.num_batches_tracked.dim() == 0);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 7);
  // Other keys stay required, and a [2] value for a 0-d tensor is still a mismatch.
  sd.back().second = from_vector<int64_t>({1, 2}, {2});
  MG_REQUIRE_ERROR(bn.load_state_dict(sd), "num_batches_tracked: checkpoint [2] i64 cpu, model [] i64 cpu");
  sd.pop_back();
  sd.erase(sd.begin());
  MG_REQUIRE_ERROR(bn.load_state_dict(sd), "missing keys (1):\n    weight\n");
}

TEST_CASE("a module with configuration and children prints the configuration on its own line, as PyTorch's",
          "[nn][module]") {
  struct Wrap : nn::Module {
    Wrap() : Module("Wrap") { register_module("fc", std::make_shared<Affine>(1, 1)); }
    std::string extra_repr() const override { return "k=1"; }
  } w;
  CHECK(w.str() == "Wrap(\n  k=1\n  (fc): Affine(in=1, out=1, bias=true)\n)");
}

TEST_CASE("from_pretrained draws no throwaway table: the default generator is where it was", "[nn][module]") {
  // PyTorch: manual_seed(0); Embedding.from_pretrained(t); rand(2) equals manual_seed(0); rand(2).
  const Tensor table = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  manual_seed(11);
  const std::vector<double> want = values(rand({4}));
  manual_seed(11);
  auto e = nn::Embedding::from_pretrained(table);
  auto b = nn::EmbeddingBag::from_pretrained(table);
  CHECK(values(rand({4})) == want);
  CHECK(values(e->weight) == values(table));
  CHECK(values(b->weight) == values(table));
}
