// Tests of core/dtype.h: names, sizes, classification, the promotion lattice of DESIGN §3
// (bool < integers < f16, bf16 < f32 < f64; f16 with bf16 gives f32), and the parse error text.
#include <catch2/catch.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

using mg::DType;

namespace {
const std::vector<DType> kAll = {DType::F64, DType::F32, DType::F16, DType::BF16,
                                 DType::I64, DType::I32, DType::U8,  DType::Bool};
}

TEST_CASE("dtype: names, sizes and parsing", "[core][dtype]") {
  struct Row {
    DType t;
    const char* name;
    std::size_t size;
  };
  const Row rows[] = {{DType::F64, "f64", 8}, {DType::F32, "f32", 4}, {DType::F16, "f16", 2},
                      {DType::BF16, "bf16", 2}, {DType::I64, "i64", 8}, {DType::I32, "i32", 4},
                      {DType::U8, "u8", 1},    {DType::Bool, "bool", 1}};
  REQUIRE(std::size(rows) == std::size_t(mg::kNumDTypes));
  for (const Row& r : rows) {
    INFO(r.name);
    CHECK(std::string(mg::dtype_name(r.t)) == r.name);
    CHECK(mg::dtype_size(r.t) == r.size);
    CHECK(mg::dtype_from_name(r.name) == r.t);
  }
}

TEST_CASE("dtype: unknown name error text", "[core][dtype]") {
  CHECK_THROWS_MATCHES(mg::dtype_from_name("float16"), mg::DTypeError,
                       Catch::Matchers::Message(
                           "dtype: unknown dtype \"float16\"; expected one of f64, f32, f16, "
                           "bf16, i64, i32, u8, bool"));
  CHECK_THROWS_AS(mg::dtype_from_name(""), mg::Error);
  CHECK_THROWS_AS(mg::dtype_from_name("F32"), mg::DTypeError);  // names are case-sensitive
}

TEST_CASE("dtype: classification", "[core][dtype]") {
  for (DType t : kAll) {
    INFO(mg::dtype_name(t));
    const bool floating = t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
    CHECK(mg::is_floating(t) == floating);
    CHECK(mg::is_low_precision(t) == (t == DType::F16 || t == DType::BF16));
    CHECK(mg::is_integral(t) == (t == DType::I64 || t == DType::I32 || t == DType::U8));
  }
}

TEST_CASE("dtype: storage types and opmath", "[core][dtype]") {
  STATIC_REQUIRE(mg::dtype_v<float> == DType::F32);
  STATIC_REQUIRE(mg::dtype_v<mg::Half> == DType::F16);
  STATIC_REQUIRE(mg::dtype_v<mg::BFloat16> == DType::BF16);
  STATIC_REQUIRE(mg::dtype_v<bool> == DType::Bool);
  STATIC_REQUIRE(std::is_same_v<mg::opmath_t<mg::Half>, float>);
  STATIC_REQUIRE(std::is_same_v<mg::opmath_t<mg::BFloat16>, float>);
  STATIC_REQUIRE(std::is_same_v<mg::opmath_t<double>, double>);
  STATIC_REQUIRE(std::is_same_v<mg::acc_t<mg::Half>, float>);
  STATIC_REQUIRE(std::is_same_v<mg::acc_t<int32_t>, int64_t>);
  STATIC_REQUIRE(std::is_same_v<mg::acc_t<bool>, int64_t>);
}

TEST_CASE("dtype: promotion lattice", "[core][dtype]") {
  using mg::promote_types;
  // The chain bool < u8 < i32 < i64 < f16 < f32 < f64 (and bf16 beside f16).
  const std::vector<DType> chain = {DType::Bool, DType::U8,  DType::I32, DType::I64,
                                    DType::F16,  DType::F32, DType::F64};
  for (std::size_t i = 0; i < chain.size(); ++i) {
    for (std::size_t j = 0; j < chain.size(); ++j) {
      INFO(mg::dtype_name(chain[i]) << " with " << mg::dtype_name(chain[j]));
      CHECK(promote_types(chain[i], chain[j]) == chain[std::max(i, j)]);
    }
  }
  CHECK(promote_types(DType::F16, DType::BF16) == DType::F32);
  CHECK(promote_types(DType::BF16, DType::F16) == DType::F32);
  CHECK(promote_types(DType::BF16, DType::BF16) == DType::BF16);
  CHECK(promote_types(DType::BF16, DType::I64) == DType::BF16);
  CHECK(promote_types(DType::Bool, DType::BF16) == DType::BF16);
  CHECK(promote_types(DType::BF16, DType::F32) == DType::F32);
  CHECK(promote_types(DType::F64, DType::BF16) == DType::F64);
  // Symmetric and idempotent over all pairs.
  for (DType a : kAll) {
    CHECK(promote_types(a, a) == a);
    for (DType b : kAll) {
      INFO(mg::dtype_name(a) << " with " << mg::dtype_name(b));
      CHECK(promote_types(a, b) == promote_types(b, a));
    }
  }
}
