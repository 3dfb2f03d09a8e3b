// nn::parameters_to_vector / vector_to_parameters (nn/parameter_vector.h): the order and values of
// torch.nn.utils' functions, a round trip, gradients through the vector, dtype conversion on the way
// back, the parameters keeping their memory, and the refusals.
#include <catch2/catch.hpp>

#include "core/factory.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("parameters_to_vector and vector_to_parameters round-trip in parameter order", "[nn]") {
  manual_seed(3);
  nn::Linear fc({.in = 3, .out = 2});
  const Tensors ps = fc.parameters();  // weight [2, 3], bias [2]
  const Tensor v = nn::parameters_to_vector(ps);
  CHECK(v.shape() == Shape{8});
  std::vector<double> want = test::values(fc.weight);
  for (double b : test::values(fc.bias)) want.push_back(b);
  CHECK(test::values(v) == want);
  // Gradients reach the parameters through the vector.
  sum(v * v).backward();
  CHECK(test::values(fc.bias.grad()) == test::values(fc.bias * 2.0));
  const void* weight_memory = fc.weight.data_ptr();
  nn::vector_to_parameters(arange(0, 8).to(DType::F64), ps);  // converted to the parameters' f32
  CHECK(fc.weight.data_ptr() == weight_memory);  // the parameter keeps its memory
  CHECK(test::values(fc.weight) == std::vector<double>{0, 1, 2, 3, 4, 5});
  CHECK(test::values(fc.bias) == std::vector<double>{6, 7});
  MG_REQUIRE_ERROR(nn::vector_to_parameters(zeros({7}), ps), "the vector has 7 elements, the parameters 8");
  MG_REQUIRE_ERROR(nn::vector_to_parameters(zeros({2, 4}), ps), "expected a 1-D vector");
  MG_REQUIRE_ERROR(nn::parameters_to_vector({fc.weight, fc.bias.to(DType::F64)}), "(one device and dtype)");
  MG_REQUIRE_ERROR(nn::parameters_to_vector({}), "got no parameters");
}
