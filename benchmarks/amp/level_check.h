// The "level did nothing" detector of bench_amp: after a training step at an opt level, the
// evidence of what actually ran (the op recorder's counts, the parameters' dtypes, the
// optimizer's master weights) is checked against what the level promises (amp/properties.h), so
// a level that silently fell back to f32 — O1 with autocast off, O2 with the model never cast —
// fails the benchmark loudly instead of reporting an f32 time under a mixed-precision label.
//
// Decision: the checks are on outcomes, not on amp's own state: "a matmul/linear/conv ran with
// a bf16 output", "a parameter is bf16", not "autocast is enabled". A bug anywhere between the
// flag and the kernel therefore shows.
//
//   mg::bench::LevelEvidence ev = mg::bench::collect_evidence(recorder, *net, optimizer);
//   mg::bench::check_level(mg::amp::OptLevel::O1, mg::DType::BF16, ev);  // throws LevelDidNothingError
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "amp/properties.h"
#include "benchmarks/amp/op_recorder.h"
#include "core/error.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace mg::bench {

// What one recorded step shows about its precision.
struct LevelEvidence {
  int64_t lower_ops = 0;      // forward calls of ops whose built-in autocast policy is "lower"
                              // (matmul family, linear, conv: the work a level must move)
  int64_t lower_ops_low = 0;  // ... of those, with an f16/bf16 output
  int64_t lower_ops_overridden = 0;  // ... of those, with a set_policy override that is not "lower"
  int64_t low_ops = 0;        // forward calls of any op with an f16/bf16 output (casts included)
  int64_t ops = 0;            // forward calls of any op
  DType low_dtype = DType::F32;  // the low dtype the ops produced (F32: none)
  bool both_low_dtypes = false;  // f16 and bf16 outputs in the same step
  int64_t params = 0;         // model parameters
  int64_t params_low = 0;     // ... of those stored in f16/bf16
  bool master_weights = false;   // the optimizer steps on f32 master copies
  int64_t convs = 0;             // conv2d forward calls
  int64_t convs_channels_last = 0;  // ... of those with an NHWC output (the layout that ran)
  // "NHWC" (every conv), "NCHW" (none), "mixed 3/53 NHWC", "-" (no conv).
  std::string layout() const;
  // "12/12 lower ops in bf16, 0/41 params low, masters: no" (the table's evidence cell).
  std::string str() const;
};

LevelEvidence collect_evidence(const OpRecorder& recorder, const nn::Module& model, const optim::Optimizer& optimizer);

// One line per promise of `level` (with low-precision dtype `dtype`) the evidence breaks; empty
// when the level did what it says. O0: no f16/bf16 op or parameter, no masters. O1: f32
// parameters, every lower-policy op in `dtype` (those a set_policy override keeps in f32
// excepted, but at least one must be low). O2: low parameters, f32 masters, every lower op in
// `dtype`. O3: low parameters, no masters, every lower op in `dtype`. Every level but O0: no low op
// in the other low dtype.
std::vector<std::string> level_problems(amp::OptLevel level, DType dtype, const LevelEvidence& evidence);

class LevelDidNothingError : public Error {
  using Error::Error;
};

// Throws LevelDidNothingError listing level_problems (message starts "bench_amp: O1 bf16 ...").
void check_level(amp::OptLevel level, DType dtype, const LevelEvidence& evidence, const std::string& what = "");

}  // namespace mg::bench
