// Helpers of the tests that read PyTorch reference values from JSON files in
// tests/data/reference/ (written once by tools/reference/gen_torch_*.py): load a file, rebuild an
// f64 tensor from flat values and a shape, and compare a tensor with stored values.
#pragma once
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "test_paths.h"
#include "test_util.h"

namespace mg::test {

// tests/data/reference/<name>, parsed.
inline nlohmann::json load_json_reference(const std::string& name) {
  std::ifstream f(source_dir() + "/tests/data/reference/" + name);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

// An f64 tensor from flat values and a shape (JSON arrays).
inline Tensor json_tensor(const nlohmann::json& values, const nlohmann::json& shape) {
  return from_vector<double>(values.get<std::vector<double>>(), shape.get<std::vector<int64_t>>());
}

// Every element of `got` within rel (relative) or abs (absolute) of the stored values.
inline void check_json_close(const Tensor& got, const nlohmann::json& want, double rel = 1e-12, double abs = 1e-13) {
  const std::vector<double> g = values(got), w = want.get<std::vector<double>>();
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(rel).margin(abs));
}

}  // namespace mg::test
