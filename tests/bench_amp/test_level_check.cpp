// The "level did nothing" detector: its rules on hand-made evidence (each promise of each level
// broken once), and on real runs of the smoke-size MLP — every level passes as built, and O1
// with the GEMMs' autocast policy overridden to f32 is refused.
#include <catch2/catch.hpp>

#include <string>

#include "benchmarks/amp/level_check.h"
#include "benchmarks/amp/runner.h"
#include "ops/op.h"

using mg::DType;
using mg::amp::OptLevel;
using mg::bench::LevelEvidence;
using mg::bench::level_problems;

namespace {

// What a healthy step at each level looks like (3 linears, 6 parameters).
LevelEvidence healthy(OptLevel level, DType dtype) {
  LevelEvidence e;
  e.ops = 20;
  e.lower_ops = 3;
  if (level == OptLevel::O0) return e.params = 6, e;
  e.lower_ops_low = 3;
  e.low_ops = 10;
  e.low_dtype = dtype;
  e.params = 6;
  e.params_low = level == OptLevel::O1 ? 0 : 6;
  e.master_weights = level == OptLevel::O2;
  return e;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

struct PolicyReset {
  ~PolicyReset() { mg::reset_policies(); }
};

}  // namespace

TEST_CASE("level check: healthy evidence passes at every level", "[bench]") {
  for (OptLevel l : {OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3}) {
    for (DType d : {DType::F16, DType::BF16}) {
      INFO(mg::amp::opt_level_name(l) << " " << mg::dtype_name(d));
      CHECK(level_problems(l, d, healthy(l, d)).empty());
    }
  }
}

TEST_CASE("level check: each broken promise is named", "[bench]") {
  const DType b = DType::BF16;
  LevelEvidence e = healthy(OptLevel::O1, b);
  e.lower_ops_low = 0, e.low_ops = 0, e.low_dtype = DType::F32;  // autocast did nothing
  CHECK(any_contains(level_problems(OptLevel::O1, b, e), "no GEMM/convolution ran in bf16"));

  e = healthy(OptLevel::O1, b);
  e.lower_ops_low = 2;  // one linear escaped autocast
  CHECK(any_contains(level_problems(OptLevel::O1, b, e), "only 2 of 3"));

  e.lower_ops_overridden = 1;  // ... because set_policy keeps it in f32: accepted
  CHECK(level_problems(OptLevel::O1, b, e).empty());

  e = healthy(OptLevel::O1, b);
  e.params_low = 1;
  CHECK(any_contains(level_problems(OptLevel::O1, b, e), "O1 keeps them f32"));

  e = healthy(OptLevel::O2, b);
  e.master_weights = false;
  CHECK(any_contains(level_problems(OptLevel::O2, b, e), "no f32 master weights"));

  e = healthy(OptLevel::O2, b);
  e.params_low = 0;  // the model was never cast
  CHECK(any_contains(level_problems(OptLevel::O2, b, e), "was not cast"));

  for (OptLevel l : {OptLevel::O2, OptLevel::O3}) {
    e = healthy(l, b);
    e.lower_ops_low = 2;  // one layer left in f32 (not cast); no set_policy override applies
    e.lower_ops_overridden = 1;
    CHECK(any_contains(level_problems(l, b, e), "only 2 of 3 GEMM/convolution calls ran in bf16"));
  }

  e = healthy(OptLevel::O3, b);
  e.master_weights = true;
  CHECK(any_contains(level_problems(OptLevel::O3, b, e), "only O2 has them"));

  e = healthy(OptLevel::O3, DType::F16);  // ran f16 when bf16 was asked
  CHECK(any_contains(level_problems(OptLevel::O3, b, e), "ops produced f16 but the level was asked for bf16"));

  e = healthy(OptLevel::O3, b);
  e.both_low_dtypes = true;
  CHECK(any_contains(level_problems(OptLevel::O3, b, e), "both f16 and bf16"));

  e = healthy(OptLevel::O0, b);
  e.low_ops = 4, e.low_dtype = DType::F16;
  CHECK(any_contains(level_problems(OptLevel::O0, b, e), "4 ops produced f16 outputs; O0 is all f32"));

  e = LevelEvidence{};  // the observer saw nothing
  CHECK(any_contains(level_problems(OptLevel::O2, b, e), "no op was recorded"));

  e = healthy(OptLevel::O1, b);
  e.lower_ops = 0, e.lower_ops_low = 0;  // a model without GEMMs cannot show a level's effect
  CHECK(any_contains(level_problems(OptLevel::O1, b, e), "ran no GEMM or convolution"));
}

TEST_CASE("level check: check_level throws LevelDidNothingError with the problems and evidence", "[bench]") {
  LevelEvidence e = healthy(OptLevel::O1, DType::BF16);
  e.lower_ops_low = 0;
  try {
    mg::bench::check_level(OptLevel::O1, DType::BF16, e, "mlp");
    FAIL("check_level accepted an O1 step without a bf16 GEMM");
  } catch (const mg::bench::LevelDidNothingError& err) {
    const std::string msg = err.what();
    CHECK(msg.rfind("bench_amp: O1 bf16 (mlp) did not do what the level promises:", 0) == 0);
    CHECK(msg.find("evidence: 0/3 gemm/conv in bf16") != std::string::npos);
    CHECK(msg.find("hint:") != std::string::npos);
  }
  CHECK_NOTHROW(mg::bench::check_level(OptLevel::O1, DType::BF16, healthy(OptLevel::O1, DType::BF16)));
}

TEST_CASE("level check: every level of the smoke MLP does what it promises", "[bench]") {
  const mg::bench::RunOptions o{.smoke = true, .warmup = 1, .steps = 1};
  for (OptLevel l : {OptLevel::O1, OptLevel::O2, OptLevel::O3}) {
    for (DType d : {DType::F16, DType::BF16}) {
      INFO(mg::amp::opt_level_name(l) << " " << mg::dtype_name(d));
      const mg::bench::RunResult r = mg::bench::run_level("mlp", l, d, o);
      CHECK(r.evidence.lower_ops == 3);  // three linears in one forward
      CHECK(r.evidence.lower_ops_low == 3);
      CHECK(r.evidence.low_dtype == d);
      CHECK(r.evidence.master_weights == (l == OptLevel::O2));
      CHECK((r.evidence.params_low == r.evidence.params) == (l != OptLevel::O1));
    }
  }
  const mg::bench::RunResult r0 = mg::bench::run_level("mlp", OptLevel::O0, DType::F32, o);
  CHECK(r0.evidence.low_ops == 0);
  CHECK(r0.evidence.lower_ops == 3);
}

TEST_CASE("level check: O1 whose GEMMs are kept f32 by a policy override is refused", "[bench]") {
  PolicyReset reset;
  mg::set_policy("linear", mg::CastPolicy::Fp32);
  const mg::bench::RunOptions o{.smoke = true, .warmup = 1, .steps = 1};
  CHECK_THROWS_AS(mg::bench::run_level("mlp", OptLevel::O1, DType::BF16, o), mg::bench::LevelDidNothingError);
  CHECK_THROWS_WITH(mg::bench::run_level("mlp", OptLevel::O1, DType::BF16, o),
                    Catch::Contains("no GEMM/convolution ran in bf16 (0 of 3)"));
}
