// nn::ParameterList and nn::ParameterDict (nn/container.h): names in the state dict, training,
// to(dtype) keeping the handles, a tensor with history taken as a leaf, and the refusals.
#include <catch2/catch.hpp>

#include <string>

#include "core/factory.h"
#include "nn/container.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

struct Scaled : nn::Module {
  Scaled() : nn::Module("Scaled") {
    scales = register_module("scales", std::make_shared<nn::ParameterList>(Tensors{ones({2}), full({2}, 2.0)}));
    extra = register_module("extra", std::make_shared<nn::ParameterDict>(
                                         std::vector<std::pair<std::string, Tensor>>{{"bias", zeros({2})}}));
  }
  Tensor forward(const Tensor& x) { return x * (*scales)[0] * (*scales)[-1] + (*extra)["bias"]; }
  std::shared_ptr<nn::ParameterList> scales;
  std::shared_ptr<nn::ParameterDict> extra;
};

}  // namespace

TEST_CASE("ParameterList and ParameterDict register their tensors as parameters that train, save and cast",
          "[nn][container]") {
  Scaled m;
  const nn::NamedTensors named = m.named_parameters();
  REQUIRE(named.size() == 3);
  CHECK(named[0].first == "scales.0");
  CHECK(named[1].first == "scales.1");
  CHECK(named[2].first == "extra.bias");
  for (const auto& [name, p] : named) CHECK(p.requires_grad());

  optim::SGD opt(m.parameters(), {.lr = 0.5});
  const Tensor x = from_vector<float>({1, 3}, {2});
  sum(m.forward(x)).backward();  // d/ds0 = x * s1 = [2, 6]; d/ds1 = x * s0 = [1, 3]; d/dbias = 1
  opt.step();
  CHECK(values((*m.scales)[0]) == V({0, -2}));
  CHECK(values((*m.scales)[1]) == V({1.5, 0.5}));
  CHECK(values((*m.extra)["bias"]) == V({-0.5, -0.5}));

  Scaled copy;
  copy.load_state_dict(m.state_dict());
  CHECK(values((*copy.scales)[1]) == V({1.5, 0.5}));

  m.to(DType::F64);  // the handles the containers return follow the module
  CHECK((*m.scales)[0].dtype() == DType::F64);
  CHECK((*m.extra)["bias"].dtype() == DType::F64);
  CHECK(m.scales->str().find("(1): [2] f64") != std::string::npos);

  // A tensor with history is taken without it, as a leaf.
  const Tensor w = ones({3}).requires_grad_();
  nn::ParameterList list;
  const Tensor p = list.push_back(w * 2.0);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  CHECK(list.size() == 1);
}

TEST_CASE("ParameterList and ParameterDict refuse bad indices, keys and tensors, naming them", "[nn][container]") {
  nn::ParameterList list({ones({1})});
  MG_REQUIRE_ERROR(list[1], "ParameterList: index 1 is out of range for 1 parameters");
  MG_REQUIRE_ERROR(list[-2], "index -2 is out of range");
  MG_REQUIRE_ERROR(list.push_back(ones({1}, {.dtype = DType::I64})), "must be floating");
  nn::ParameterDict dict({{"a", ones({1})}, {"b", ones({2})}});
  CHECK(dict.keys() == std::vector<std::string>{"a", "b"});
  CHECK(dict.contains("b"));
  CHECK(!dict.contains("c"));
  MG_REQUIRE_ERROR(dict["c"], "ParameterDict: no parameter \"c\" (keys: \"a\", \"b\")");
  MG_REQUIRE_ERROR(dict.insert("a", ones({1})), "\"a\"");
  MG_REQUIRE_ERROR(dict.insert("x.y", ones({1})), "x.y");
  CHECK(dict.size() == 2);
}
