// nn::Embedding's max_norm (embedding_renorm_) against PyTorch 2.15's torch.nn.Embedding in f64
// (tests/data/reference/torch_embedding_max_norm.json, written by
// tools/reference/gen_torch_embedding_max_norm.py): norm types 1, 2, 3 and inf, a padding row,
// repeated indices, rows under the limit left alone; two batches in a row, the weight after each
// (renormalised in place), the outputs, and the weight gradient of both batches' weighted sum.
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/engine.h"
#include "core/factory.h"
#include "nn/dropout.h"
#include "ops/ops.h"
#include "reference/json_reference.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("Embedding max_norm equals PyTorch's in f64: the in-place renormalisation, outputs and gradient",
          "[nn][embedding]") {
  const nlohmann::json ref = load_json_reference("torch_embedding_max_norm.json");
  int checked = 0;
  for (const auto& c : ref["cases"]) {
    INFO("case " << c["name"].get<std::string>());
    const double norm_type = c["norm_type"].is_string() ? INFINITY : c["norm_type"].get<double>();
    nn::Embedding emb({.num = c["num"].get<int64_t>(),
                       .dim = c["dim"].get<int64_t>(),
                       .padding_idx = c["padding_idx"].is_null() ? std::nullopt
                                                                  : std::optional<int64_t>(c["padding_idx"].get<int64_t>()),
                       .max_norm = c["max_norm"].get<double>(),
                       .norm_type = norm_type});
    emb.to(DType::F64);
    {
      NoGradGuard no_grad;
      emb.weight.copy_(json_tensor(c["weight"], nlohmann::json::array({c["num"], c["dim"]})));
    }
    Tensor total;
    for (const auto& s : c["steps"]) {
      const Tensor idx = from_vector<int64_t>(s["indices"].get<std::vector<int64_t>>(), s["shape"].get<std::vector<int64_t>>());
      const Tensor out = emb.forward(idx);
      check_json_close(emb.weight, s["weight_after"], 1e-12, 1e-14);
      check_json_close(out, s["output"], 1e-12, 1e-14);
      const Tensor part = (out * json_tensor(s["r"], nlohmann::json(out.shape()))).sum();
      total = total.defined() ? total + part : part;
    }
    const Tensors g = autograd::grad({total}, {emb.weight});
    check_json_close(g[0], c["grad_weight"], 1e-12, 1e-14);
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("embedding_renorm_ refuses bad input and scales only the rows over the limit", "[nn][embedding]") {
  Tensor w = from_vector<float>({3, 4, 0.3f, 0.4f}, {2, 2});
  CHECK(nn::embedding_renorm_(w, from_vector<int64_t>({0, 1, 0}, {3}), 1.0) == 1);  // row 0 (norm 5) only
  CHECK(w.data<float>()[0] == Approx(0.6).epsilon(1e-6));
  CHECK(w.data<float>()[2] == 0.3f);
  MG_REQUIRE_ERROR(nn::embedding_renorm_(w, from_vector<int64_t>({2}, {1}), 1.0), "index 2 is out of range for 2 rows");
  MG_REQUIRE_ERROR(nn::embedding_renorm_(w, from_vector<float>({0}, {1}), 1.0), "expected i64 or i32 indices");
  MG_REQUIRE_ERROR(nn::embedding_renorm_(w, from_vector<int64_t>({0}, {1}), -1.0), "max_norm must be finite and >= 0");
  MG_REQUIRE_ERROR(nn::Embedding({.num = 3, .dim = 2, .max_norm = -2.0}), "Embedding: max_norm must be finite and >= 0");
  MG_REQUIRE_ERROR(nn::Embedding({.num = 3, .dim = 2, .max_norm = 1.0, .norm_type = 0.0}), "norm_type must be > 0");
  nn::Embedding emb({.num = 3, .dim = 2, .max_norm = 1.0});
  MG_REQUIRE_ERROR(emb.forward(from_vector<int64_t>({5}, {1})), "index 5 is out of range");
  CHECK(emb.str().find("max_norm=1") != std::string::npos);
}
